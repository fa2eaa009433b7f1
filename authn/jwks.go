package authn

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"

	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth"
)

// PreVerifier checks a token locally before it is reviewed. Verify returns
// nil when the token may be genuine (it is then reviewed as usual: only the
// TokenReview checks that the token's bound objects still exist), an error
// matching reviewauth.ErrUnauthenticated when it is certainly forged (it is
// then refused without a review), and any other error when it cannot tell
// (the token is then reviewed). Implementations must be safe for concurrent
// use.
type PreVerifier interface {
	Verify(ctx context.Context, token string) error
}

// JWKSOptions configures a [JWKSVerifier]. The zero value is valid.
type JWKSOptions struct {
	// RefreshInterval is how long a fetched key set is used before it is
	// fetched again. Zero means 10 minutes.
	RefreshInterval time.Duration
	// MinRefreshInterval bounds fetches: after any fetch, successful or
	// not, no other starts for this long, however many tokens name an
	// unknown key. Zero means 30 seconds.
	MinRefreshInterval time.Duration
	// Clock tells the time. Nil means the real clock.
	Clock clock.PassiveClock
}

// JWKSVerifier is an opt-in [PreVerifier] for service-account tokens: it
// checks a token's signature against the cluster's public keys, served by
// the API server at /openid/v1/jwks, so that a flood of forged tokens costs
// no TokenReviews. It only refuses tokens; a token it accepts still goes
// through the TokenReview, which alone checks expiry, audiences and that the
// pod or secret the token is bound to still exists.
//
// With it enabled only JWTs signed by the cluster are accepted: opaque
// tokens (static tokens, some OIDC setups) are refused. Keys are fetched on
// first use and refreshed every RefreshInterval, or sooner when a token
// names an unknown key id, but never more often than MinRefreshInterval.
// While no key set could be fetched, Verify reports that it cannot tell, and
// tokens are reviewed as if it were not there.
//
// The caller of the API server needs get on the non-resource URL
// /openid/v1/jwks (the system:service-account-issuer-discovery ClusterRole).
// A JWKSVerifier is safe for concurrent use.
type JWKSVerifier struct {
	fetch func(ctx context.Context) ([]byte, error)
	opts  JWKSOptions
	clock clock.PassiveClock

	mu        sync.Mutex
	keys      map[string]crypto.PublicKey
	fetchedAt time.Time // last successful fetch
	triedAt   time.Time // last attempt
	fetching  chan struct{}
}

var _ PreVerifier = (*JWKSVerifier)(nil)

// NewJWKSVerifier returns a JWKSVerifier that fetches keys from the API
// server described by cfg.
func NewJWKSVerifier(cfg *rest.Config, opts JWKSOptions) (*JWKSVerifier, error) {
	if cfg == nil {
		return nil, errors.New("authn: nil rest.Config")
	}
	c, err := authenticationv1client.NewForConfig(ReviewConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("authn: building the JWKS client: %w", err)
	}
	rc := c.RESTClient()
	return NewJWKSVerifierFunc(func(ctx context.Context) ([]byte, error) {
		return rc.Get().AbsPath("/openid/v1/jwks").MaxRetries(0).DoRaw(ctx)
	}, opts), nil
}

// NewJWKSVerifierFunc returns a JWKSVerifier that gets the JSON key set from
// fetch.
func NewJWKSVerifierFunc(fetch func(ctx context.Context) ([]byte, error), opts JWKSOptions) *JWKSVerifier {
	if opts.RefreshInterval <= 0 {
		opts.RefreshInterval = 10 * time.Minute
	}
	if opts.MinRefreshInterval <= 0 {
		opts.MinRefreshInterval = 30 * time.Second
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &JWKSVerifier{fetch: fetch, opts: opts, clock: clk}
}

// errCannotTell is returned when no key set is available.
var errCannotTell = errors.New("authn: no JWKS available to pre-verify the token")

// Verify implements [PreVerifier].
func (v *JWKSVerifier) Verify(ctx context.Context, token string) error {
	header, signingInput, sig, err := splitJWT(token)
	if err != nil {
		return &reviewauth.RejectedError{Reason: "pre-verification: " + err.Error()}
	}
	keys, err := v.keysFor(ctx, header.Kid)
	if err != nil {
		return err
	}
	key, ok := keys[header.Kid]
	if !ok && header.Kid == "" && len(keys) == 1 {
		for _, k := range keys {
			key, ok = k, true
		}
	}
	if !ok {
		return &reviewauth.RejectedError{Reason: "pre-verification: the token's key id is not in the cluster's JWKS"}
	}
	if err := verifySignature(header.Alg, key, signingInput, sig); err != nil {
		return &reviewauth.RejectedError{Reason: "pre-verification: " + err.Error()}
	}
	return nil
}

// keysFor returns the current keys, fetching them when they are stale or do
// not include kid, within the fetch bounds.
func (v *JWKSVerifier) keysFor(ctx context.Context, kid string) (map[string]crypto.PublicKey, error) {
	for {
		v.mu.Lock()
		now := v.clock.Now()
		keys := v.keys
		_, known := keys[kid]
		stale := keys == nil || now.Sub(v.fetchedAt) >= v.opts.RefreshInterval || (!known && kid != "")
		if !stale {
			v.mu.Unlock()
			return keys, nil
		}
		if wait := v.fetching; wait != nil {
			// A fetch is running: wait for it rather than give up, so a
			// burst of tokens at start-up costs one fetch and no reviews.
			v.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if mayFetch := v.triedAt.IsZero() || now.Sub(v.triedAt) >= v.opts.MinRefreshInterval; !mayFetch {
			v.mu.Unlock()
			if keys == nil {
				return nil, errCannotTell
			}
			return keys, nil
		}
		done := make(chan struct{})
		v.fetching = done
		v.triedAt = now
		v.mu.Unlock()

		fetched, err := v.load(ctx)

		v.mu.Lock()
		if err == nil {
			v.keys, v.fetchedAt = fetched, v.clock.Now()
		}
		v.fetching = nil
		close(done)
		v.mu.Unlock()
		// Loop: the next pass returns the keys, or nil when none were ever
		// fetched, without another fetch (triedAt was just set).
	}
}

func (v *JWKSVerifier) load(ctx context.Context) (map[string]crypto.PublicKey, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := v.fetch(ctx)
	if err != nil {
		return nil, err
	}
	return ParseJWKS(raw)
}

type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
	N   string `json:"n"`
	E   string `json:"e"`
}

// ParseJWKS parses a JSON Web Key Set holding RSA and EC (P-256, P-384,
// P-521) signing keys. Keys of other types, and keys whose use is not "sig",
// are skipped; a malformed key is an error.
func ParseJWKS(raw []byte) (map[string]crypto.PublicKey, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("authn: parsing JWKS: %w", err)
	}
	enc := base64.RawURLEncoding
	keys := make(map[string]crypto.PublicKey, len(set.Keys))
	for i, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		switch k.Kty {
		case "RSA":
			n, err1 := enc.DecodeString(k.N)
			e, err2 := enc.DecodeString(k.E)
			if err1 != nil || err2 != nil || len(n) < 256 || len(e) == 0 || len(e) > 4 {
				return nil, fmt.Errorf("authn: JWKS key %d: malformed or weak RSA key", i)
			}
			exp := new(big.Int).SetBytes(e)
			keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(exp.Int64())}
		case "EC":
			var curve elliptic.Curve
			switch k.Crv {
			case "P-256":
				curve = elliptic.P256()
			case "P-384":
				curve = elliptic.P384()
			case "P-521":
				curve = elliptic.P521()
			default:
				return nil, fmt.Errorf("authn: JWKS key %d: unsupported curve %q", i, k.Crv)
			}
			x, err1 := enc.DecodeString(k.X)
			y, err2 := enc.DecodeString(k.Y)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("authn: JWKS key %d: malformed EC key", i)
			}
			// Validate the point through the uncompressed encoding.
			size := (curve.Params().BitSize + 7) / 8
			if len(x) != size || len(y) != size {
				return nil, fmt.Errorf("authn: JWKS key %d: malformed EC key", i)
			}
			pt := append([]byte{4}, append(x, y...)...)
			pub, err := ecdsa.ParseUncompressedPublicKey(curve, pt)
			if err != nil {
				return nil, fmt.Errorf("authn: JWKS key %d: %v", i, err)
			}
			keys[k.Kid] = pub
		}
	}
	return keys, nil
}

type jwtHeader struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
}

// splitJWT parses a compact JWS without trusting anything in it.
func splitJWT(token string) (h jwtHeader, signingInput string, sig []byte, err error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return h, "", nil, errors.New("not a JWT")
	}
	enc := base64.RawURLEncoding
	rawHeader, err := enc.DecodeString(parts[0])
	if err != nil || len(rawHeader) > 1024 {
		return h, "", nil, errors.New("malformed JWT header")
	}
	if err := json.Unmarshal(rawHeader, &h); err != nil {
		return h, "", nil, errors.New("malformed JWT header")
	}
	sig, err = enc.DecodeString(parts[2])
	if err != nil {
		return h, "", nil, errors.New("malformed JWT signature")
	}
	return h, parts[0] + "." + parts[1], sig, nil
}

func verifySignature(alg string, key crypto.PublicKey, signingInput string, sig []byte) error {
	var hashed []byte
	var h crypto.Hash
	switch alg {
	case "RS256", "ES256", "PS256":
		s := sha256.Sum256([]byte(signingInput))
		hashed, h = s[:], crypto.SHA256
	case "RS384", "ES384", "PS384":
		s := sha512.Sum384([]byte(signingInput))
		hashed, h = s[:], crypto.SHA384
	case "RS512", "ES512", "PS512":
		s := sha512.Sum512([]byte(signingInput))
		hashed, h = s[:], crypto.SHA512
	default:
		return fmt.Errorf("unsupported algorithm %q", alg)
	}
	switch k := key.(type) {
	case *rsa.PublicKey:
		switch alg[0] {
		case 'R':
			if rsa.VerifyPKCS1v15(k, h, hashed, sig) != nil {
				return errors.New("bad signature")
			}
		case 'P':
			if rsa.VerifyPSS(k, h, hashed, sig, nil) != nil {
				return errors.New("bad signature")
			}
		default:
			return fmt.Errorf("algorithm %q does not fit an RSA key", alg)
		}
	case *ecdsa.PublicKey:
		size := (k.Curve.Params().BitSize + 7) / 8
		if alg[0] != 'E' || len(sig) != 2*size {
			return errors.New("bad signature")
		}
		r := new(big.Int).SetBytes(sig[:size])
		s := new(big.Int).SetBytes(sig[size:])
		if !ecdsa.Verify(k, hashed, r, s) {
			return errors.New("bad signature")
		}
	default:
		return errors.New("unsupported key")
	}
	return nil
}
