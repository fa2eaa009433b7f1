package authn

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	jose "gopkg.in/go-jose/go-jose.v2"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/internal/cache"
	"github.com/reviewauth/reviewauth/internal/jwt"
	"github.com/reviewauth/reviewauth/internal/review"
)

// PreVerifier checks a token locally before it is reviewed. Verify returns
// nil when the token may be genuine (it is then reviewed as usual: only the
// TokenReview checks that the token's bound objects still exist), an error
// matching reviewauth.ErrUnauthenticated when it is certainly forged (it is
// then refused without a review, and the refusal is cached for
// [Options.FailureTTL]), and any other error when it cannot tell (the token
// is then reviewed, and nothing is cached). An implementation must never
// claim certainty it does not have: a genuine token it refuses is locked out
// for FailureTTL. Implementations must be safe for concurrent use.
type PreVerifier interface {
	Verify(ctx context.Context, token string) error
}

// JWKSOptions configures a [JWKSVerifier]. The zero value is valid.
type JWKSOptions struct {
	// RefreshInterval is how long a fetched key set is used before it is
	// fetched again. Zero or negative means 10 minutes.
	RefreshInterval time.Duration
	// MinRefreshInterval bounds fetches: after any fetch starts, successful
	// or not, no other starts for this long, however many tokens name an
	// unknown key. Zero or negative means 30 seconds. While it holds a
	// refresh back, a token naming an unknown key is reviewed, never
	// refused.
	MinRefreshInterval time.Duration
	// Clock tells the time. Nil means the real clock.
	Clock clock.PassiveClock
}

// Limits of a [JWKSVerifier]. Each is far above what a real API server
// produces, and each fails safe: a token past maxJWSHeader is refused (the
// API server never signs such a header), a key set past maxJWKSSize or
// maxJWKSKeys is not used (tokens are then reviewed, as when the key set
// cannot be fetched).
const (
	// maxJWSHeader bounds a token's decoded JOSE header. The API server's
	// header is {"alg","kid"} with a 43-byte kid; an external signer's kid
	// is at most 1024 bytes (k8s.io/kubernetes pkg/serviceaccount/externaljwt).
	maxJWSHeader = 2 << 10
	// maxJWKSSize bounds the key set document, in bytes.
	maxJWKSSize = 64 << 10
	// maxJWKSKeys bounds the number of keys in the key set; it also bounds
	// the signature checks of a token without a key id.
	maxJWKSKeys = 32
	// jwksFetchTimeout bounds one fetch of the key set.
	jwksFetchTimeout = 5 * time.Second
)

// JWKSVerifier is an opt-in [PreVerifier] for service-account tokens: it
// checks a token's signature against the cluster's public keys, served by
// the API server at /openid/v1/jwks, so that a flood of forged tokens costs
// no TokenReviews. It only refuses tokens; a token it accepts still goes
// through the TokenReview, which alone checks expiry, audiences and that the
// pod or secret the token is bound to still exists.
//
// Tokens and key sets are parsed, and signatures checked, with go-jose
// (gopkg.in/go-jose/go-jose.v2), the library and version the API server
// signs and verifies service-account tokens with. Per token:
//
//	token                                          answer
//	-----                                          ------
//	not a compact JWS (three base64url parts,      refused: with the verifier,
//	a JSON header of at most 2 KiB), or a crit     only JWTs are accepted
//	or b64 header
//	alg not RS256, ES256, ES384 or ES512 (none,    refused: the API server
//	HS256, PS256, EdDSA, ...)                      signs with no other
//	no key set yet, or it cannot be fetched        cannot tell: reviewed
//	kid in the key set, and a key of that kid      accepted, then reviewed
//	that fits alg (RSA: RS256; P-256, P-384,
//	P-521: ES256, ES384, ES512) verifies it
//	kid in the key set, no key of it fits alg      refused
//	kid in the key set, no fitting key verifies    refused
//	kid not in the key set                         refreshed when allowed and
//	                                               decided as above; still
//	                                               unknown: cannot tell,
//	                                               reviewed
//	no kid, a key that fits alg verifies it (the   accepted, then reviewed
//	API server tries every key then too)
//	no kid, no key verifies it                     refused
//
// Keys the verifier cannot use (other types, RSA outside 2048 to 8192 bits,
// "use" other than "sig", malformed) are skipped, and where one of them
// could have signed the token (its kid, or no kid), "refused" becomes
// "cannot tell".
//
// "Cannot tell" is never a refusal, so it is never cached. An unknown kid is
// not proof of forgery: the API server also accepts tokens signed by keys
// added since the last fetch, by external-signer keys it leaves out of its
// key set, and, in a TokenReview, JWTs from any OIDC issuer it trusts. So an
// attacker sending tokens with random key ids uses up the refresh allowance
// but locks no one out: a genuine token signed with a key rotated in
// meanwhile is reviewed and accepted. Each such token costs one review, as
// it would without the verifier (bounded by [Options.MaxInFlight], and the
// review's rejection is cached); forged tokens naming a key in the key set
// cost none. A token without a kid is refused when no key verifies it: the
// API server puts a kid in every token it signs, and an external signer
// must, so a genuine token without one predates kids and was signed by a key
// the cluster has long published.
//
// Keys are fetched on first use and refreshed every RefreshInterval, or
// sooner when a token names an unknown key id, but no fetch starts less than
// MinRefreshInterval after the previous one. A token with nothing to be
// checked with (no key set yet, or an unknown kid) waits for a fetch in
// flight, within its own deadline. One fetch runs at a time, on a goroutine
// of its own, detached from the cancellation of the caller that started it
// and bounded by 5 s; it is cancelled when every caller waiting for it has
// given up. A key set over 64 KiB or 32 keys is not used. Refusal reasons
// never quote the token.
//
// The caller of the API server needs get on the non-resource URL
// /openid/v1/jwks (the system:service-account-issuer-discovery ClusterRole).
// A JWKSVerifier is safe for concurrent use.
type JWKSVerifier struct {
	fetch func(ctx context.Context) ([]byte, error)
	opts  JWKSOptions
	clock clock.PassiveClock
	// keys holds the key set: refreshed every RefreshInterval, fetched at
	// most once per MinRefreshInterval, one fetch at a time.
	keys cache.Holder[*keySet]
}

var _ PreVerifier = (*JWKSVerifier)(nil)

// NewJWKSVerifier returns a JWKSVerifier that fetches keys from the API
// server described by cfg (GET /openid/v1/jwks), with the client
// [NewForConfig] uses: client-go's HTTP client for cfg, client-go's rate
// limiter (QPS and Burst default to [reviewauth.DefaultQPS] and [reviewauth.DefaultBurst]), no
// retries of its own, no body ever logged, and the answer read up to 64 KiB
// (a larger key set is not used). cfg is not modified.
func NewJWKSVerifier(cfg *rest.Config, opts JWKSOptions) (*JWKSVerifier, error) {
	c, err := review.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("authn: building the JWKS client: %w", err)
	}
	return NewJWKSVerifierFunc(func(ctx context.Context) ([]byte, error) {
		return c.Get(ctx, "/openid/v1/jwks", maxJWKSSize)
	}, opts)
}

// NewJWKSVerifierFunc returns a JWKSVerifier that gets the JSON key set from
// fetch. fetch is called on the verifier's fetch goroutine, at most once at
// a time, and must be safe to call from any goroutine. A nil fetch is an
// error.
func NewJWKSVerifierFunc(fetch func(ctx context.Context) ([]byte, error), opts JWKSOptions) (*JWKSVerifier, error) {
	if fetch == nil {
		return nil, errors.New("authn: NewJWKSVerifierFunc with a nil fetch")
	}
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
	return &JWKSVerifier{fetch: fetch, opts: opts, clock: clk,
		keys: cache.Holder[*keySet]{Timeout: jwksFetchTimeout, MinInterval: opts.MinRefreshInterval, Clock: clk}}, nil
}

// Errors for "cannot tell". They do not match reviewauth.ErrUnauthenticated,
// so the token is reviewed.
var (
	errNoKeySet   = errors.New("authn: no JWKS available to pre-verify the token")
	errUnknownKey = errors.New("authn: the token's key is not in the cluster's JWKS")
)

func forged(reason string) error {
	return &reviewauth.RejectedError{Reason: "pre-verification: " + reason}
}

// Verify implements [PreVerifier]; [JWKSVerifier] documents its decisions.
func (v *JWKSVerifier) Verify(ctx context.Context, token string) error {
	jws, err := parseJWS(token)
	if err != nil {
		return forged(err.Error())
	}
	h := jws.Signatures[0].Header
	alg := jose.SignatureAlgorithm(h.Algorithm)
	switch alg {
	case jose.RS256, jose.ES256, jose.ES384, jose.ES512:
	default:
		// Not echoed: the reason is returned to the caller.
		return forged("the token's signature algorithm is not one the API server signs with")
	}
	set, err := v.keysFor(ctx, h.KeyID)
	if err != nil {
		return err
	}
	var candidates []verifyKey
	partial := set.partial
	if h.KeyID != "" {
		candidates, partial = set.byKid[h.KeyID], set.unusable[h.KeyID]
		if len(candidates) == 0 {
			// Unknown, or only keys the verifier cannot use.
			return errUnknownKey
		}
	} else {
		candidates = set.all
	}
	fits := false
	for _, k := range candidates {
		if k.alg != alg {
			continue
		}
		fits = true
		if _, err := jws.Verify(k.key); err == nil {
			return nil
		}
	}
	switch {
	case partial:
		// A key the verifier skipped may have signed it.
		return errUnknownKey
	case !fits:
		return forged("the token's signature algorithm does not fit the cluster's key")
	default:
		return forged("bad signature")
	}
}

// parseJWS parses a compact JWS without trusting anything in it. Its errors
// never quote the token.
//
// go-jose costs more than the hand-written JOSE this verifier used before;
// it is kept because the signature check dominates the path a flood of
// forged tokens takes, and the hand-written code had the algorithm
// confusions go-jose plus keyAlgorithm rule out. BenchmarkJWKSVerify, CPU
// time per token (AMD EPYC, -cpu 1), go-jose vs hand-written: forged RS256
// 95 vs 61 µs, forged ES256 155 vs 98 µs, unknown kid (parse only; go-jose
// v2 rebuilds the token rune by rune to strip whitespace) 34 vs 4 µs, not a
// JWT 0.3 vs 0.2 µs. A TokenReview, which every one of them would cost
// otherwise, is a round trip and far more work for the API server, and a
// repeated token is answered from the rejection cache.
func parseJWS(token string) (*jose.JSONWebSignature, error) {
	// go-jose also reads the JSON serialization and strips whitespace; the
	// API server signs neither. Check the compact shape first, which also
	// keeps junk away from the JSON parser.
	header, _, _, ok := jwt.Split(token)
	if !ok {
		return nil, errors.New("not a JWT")
	}
	for i := 0; i < len(token); i++ {
		if !compactJWS[token[i]] {
			return nil, errors.New("not a JWT")
		}
	}
	if n := len(header); n == 0 || n > (maxJWSHeader*4+2)/3 {
		return nil, errors.New("malformed or oversized JWT header")
	}
	jws, err := jose.ParseSigned(token)
	if err != nil || len(jws.Signatures) != 1 {
		return nil, errors.New("malformed JWT")
	}
	// b64 (RFC 7797) changes what is signed; the API server never sets it
	// or crit, and go-jose v2 honours b64 even without crit.
	if x := jws.Signatures[0].Header.ExtraHeaders; x["crit"] != nil || x["b64"] != nil {
		return nil, errors.New("unsupported JWT header")
	}
	return jws, nil
}

// compactJWS is the alphabet of a compact JWS: base64url and the dots.
var compactJWS = func() (t [256]bool) {
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.") {
		t[c] = true
	}
	return t
}()

// keysFor returns the key set to check a token naming kid with, fetching it
// when there is none, when it is due for a refresh, or when kid is not in it,
// within the fetch bound (see cache.Holder). It returns an error only when
// there is no key set.
func (v *JWKSVerifier) keysFor(ctx context.Context, kid string) (*keySet, error) {
	set, ok, _ := v.keys.Get(ctx, false, v.load)
	// An unknown kid forces a fetch, twice at most: the first may join a
	// fetch that started before this token arrived, the second may start
	// a fresh one. MinRefreshInterval bounds both.
	for round := 0; round < 2 && ok && kid != "" && !set.known(kid) && ctx.Err() == nil; round++ {
		set, ok, _ = v.keys.Get(ctx, true, v.load)
	}
	if !ok {
		return nil, errNoKeySet
	}
	return set, nil
}

// load is the shared fetch.
func (v *JWKSVerifier) load(ctx context.Context) (cache.Fetched[*keySet], error) {
	raw, err := v.fetch(ctx)
	if err != nil {
		return cache.Fetched[*keySet]{}, err
	}
	set, err := parseJWKS(raw)
	if err != nil {
		return cache.Fetched[*keySet]{}, err
	}
	return cache.Fetched[*keySet]{Value: set, RefreshAt: v.clock.Now().Add(v.opts.RefreshInterval)}, nil
}

// verifyKey is a public key with the one algorithm the API server signs
// with under it.
type verifyKey struct {
	alg jose.SignatureAlgorithm
	key crypto.PublicKey // *rsa.PublicKey or *ecdsa.PublicKey
}

// keySet is a parsed JWKS. Several keys may share a kid, as in the API
// server's own key lookup.
type keySet struct {
	byKid    map[string][]verifyKey
	all      []verifyKey
	unusable map[string]bool // kids of entries that were skipped
	partial  bool            // some entry was skipped
}

func (s *keySet) known(kid string) bool {
	_, ok := s.byKid[kid]
	return ok || s.unusable[kid]
}

// parseJWKS parses a JSON Web Key Set with go-jose, one key at a time, so
// that one entry it cannot use does not spoil the others (go-jose's
// JSONWebKeySet refuses the whole set). An entry it cannot use (an unknown
// type, a private or symmetric key, an RSA key outside 2048 to 8192 bits, a
// curve other than P-256, P-384, P-521, an "alg" that does not fit the key,
// a "use" other than "sig", or a malformed entry) is skipped, and tokens it
// could have signed are reviewed. A document that is not a key set, or past
// maxJWKSSize or maxJWKSKeys, is an error.
func parseJWKS(raw []byte) (*keySet, error) {
	if len(raw) > maxJWKSSize {
		return nil, fmt.Errorf("authn: JWKS larger than %d bytes", maxJWKSSize)
	}
	var doc struct {
		Keys *[]json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("authn: parsing JWKS: %w", err)
	}
	if doc.Keys == nil {
		return nil, errors.New("authn: parsing JWKS: no keys member")
	}
	if len(*doc.Keys) > maxJWKSKeys {
		return nil, fmt.Errorf("authn: JWKS has more than %d keys", maxJWKSKeys)
	}
	set := &keySet{byKid: map[string][]verifyKey{}, unusable: map[string]bool{}}
	for _, entry := range *doc.Keys {
		var jwk jose.JSONWebKey
		var kid struct {
			Kid string `json:"kid"`
		}
		if json.Unmarshal(entry, &jwk) != nil {
			_ = json.Unmarshal(entry, &kid)
			set.skip(kid.Kid)
			continue
		}
		alg, ok := keyAlgorithm(jwk.Key)
		if !ok || (jwk.Use != "" && jwk.Use != "sig") || (jwk.Algorithm != "" && jwk.Algorithm != string(alg)) {
			set.skip(jwk.KeyID)
			continue
		}
		k := verifyKey{alg: alg, key: jwk.Key}
		set.byKid[jwk.KeyID] = append(set.byKid[jwk.KeyID], k)
		set.all = append(set.all, k)
	}
	return set, nil
}

func (s *keySet) skip(kid string) {
	s.partial = true
	s.unusable[kid] = true
}

// keyAlgorithm returns the algorithm the API server signs with under key,
// as k8s.io/kubernetes pkg/serviceaccount algorithmFromPublicKey does: RS256
// for RSA, ES256, ES384, ES512 for P-256, P-384, P-521. Private keys, RSA
// keys under 2048 or over 8192 bits, and even or out-of-range exponents are
// not usable.
func keyAlgorithm(key any) (jose.SignatureAlgorithm, bool) {
	switch k := key.(type) {
	case *rsa.PublicKey:
		// What crypto/rsa verifies with; outside it a genuine signature
		// could fail to verify, which must not read as a forgery.
		if k.N == nil || k.N.BitLen() < 2048 || k.N.BitLen() > 8192 || k.N.Bit(0) == 0 || k.E < 3 || k.E > 1<<31-1 || k.E&1 == 0 {
			return "", false
		}
		return jose.RS256, true
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return jose.ES256, true
		case elliptic.P384():
			return jose.ES384, true
		case elliptic.P521():
			return jose.ES512, true
		}
	}
	return "", false
}
