package authn

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	jose "gopkg.in/go-jose/go-jose.v2"
	josejson "gopkg.in/go-jose/go-jose.v2/json"
	josejwt "gopkg.in/go-jose/go-jose.v2/jwt"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/internal/cache"
	"github.com/reviewauth/reviewauth/internal/jwt"
	"github.com/reviewauth/reviewauth/internal/review"
)

// PreVerifier checks a token locally before it is reviewed. Verify returns
// one of three answers:
//
//   - nil: verified, as far as a local check can tell (a JWKSVerifier: the
//     cluster's key signed it, it is spelled canonically, valid now and for
//     the call's audiences). The token is still reviewed (only the
//     TokenReview checks that the objects it is bound to still exist), in
//     the class of the review queue that takes most turns (see
//     [Options.MaxInFlight]).
//   - an error matching reviewauth.ErrUnauthenticated: certainly forged,
//     where the API server itself would refuse it. It is refused without a
//     review, and the refusal is cached for [Options.FailureTTL].
//   - any other error: it cannot tell. The token is reviewed as without a
//     PreVerifier, in the other class of the queue, and nothing is cached.
//
// An implementation must never claim certainty it does not have: a genuine
// token it refuses is locked out for FailureTTL, and junk it calls verified
// takes turns from genuine tokens it cannot check. The call's audiences are
// in ctx (authenticator.AudiencesFrom), unless the API server's own are
// meant (AllowAPIServerAudience). Implementations must be safe for
// concurrent use.
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
// produces, and each fails safe: a token whose header is past
// internal/jwt's MaxPart is reviewed, a key set past maxJWKSSize or
// maxJWKSKeys is not used (tokens are then reviewed, as when the key set
// cannot be fetched).
const (
	// maxJWKSSize bounds the key set document, in bytes.
	maxJWKSSize = 64 << 10
	// maxJWKSKeys bounds the number of keys in the key set; it also bounds
	// the signature checks of a token without a key id.
	maxJWKSKeys = 32
	// jwksFetchTimeout bounds one fetch of the key set.
	jwksFetchTimeout = 5 * time.Second
	// ValidityLeeway is how far in the future a verified token's nbf and
	// iat may be for it to be valid now: the API server's own leeway
	// (go-jose's jwt.DefaultLeeway, one minute), so that a clock behind
	// the API server's does not demote fresh tokens. Its exp has none: a
	// token at or past its exp is not verified (the API server accepts it
	// for another minute, through its review).
	ValidityLeeway = josejwt.DefaultLeeway
)

// JWKSVerifier is a [PreVerifier] for service-account tokens: it checks a
// token's signature against the cluster's public keys, served by the API
// server at /openid/v1/jwks, so that a flood of forged tokens costs no
// TokenReviews, and so that genuine tokens take most turns of the review
// queue under a flood of junk. It refuses only what the API server itself
// refuses; every token it does not refuse still goes through the
// TokenReview, which alone checks that the pod or secret the token is
// bound to still exists.
//
// Tokens and key sets are parsed, and signatures checked, with go-jose
// (gopkg.in/go-jose/go-jose.v2), the library and version the API server
// verifies service-account tokens with, the way it does
// (k8s.io/kubernetes pkg/serviceaccount JWTTokenAuthenticator): the
// header's kid (case-sensitive: a "KID" member is no key id) picks the
// keys, every key when there is none, and the header's alg is checked
// against each key by go-jose. Per token:
//
//	token                                          answer
//	-----                                          ------
//	not a compact JWS go-jose reads (three         cannot tell: reviewed
//	unpadded base64url parts, a JSON header of
//	at most 8 KiB decoded)
//	no key set yet, or it cannot be fetched        cannot tell
//	kid not in the key set                         refreshed when allowed and
//	                                               decided below; still
//	                                               unknown: cannot tell
//	kid in the key set, a key under it verifies    verified when also
//	the signature; or no kid, and any key does     canonical and valid now
//	                                               (below); else cannot tell
//	kid in the key set, no key under it verifies   refused (forged)
//	it, the kid is the one the API server derives
//	from a key under it (the base64url SHA-256
//	of its PKIX DER), and no entry under it was
//	skipped
//	kid in the key set, no key verifies it,        cannot tell
//	otherwise (an external signer chooses its
//	kids: keys it leaves out of discovery may
//	share one, and the API server tries them)
//	no kid, no key verifies it                     cannot tell (the API
//	                                               server tries every key,
//	                                               unpublished ones too)
//
// What the API server could still accept that this refuses: a token signed
// by a key an external signer names with the kid derived from another,
// published key (the API server tries both; no signer names keys so), and
// whatever a token webhook of the API server accepts of a JWT naming a
// cluster key whose signature does not verify.
//
// A token whose signature verifies is verified (nil) only when also:
//
//   - spelled canonically (internal/jwt Canonical): every part re-encodes
//     to itself. The unused low bits of each part's last character give
//     one signed token up to 4,096 spellings, which go-jose and the API
//     server all accept, each a different cache key and review;
//   - valid now by the verifier's clock: before its exp (no leeway), and
//     its nbf and iat at most [ValidityLeeway] ahead; claims read as the
//     API server reads them (go-jose's jwt.Claims: a claim of the wrong
//     type is not valid);
//   - for one of the call's audiences, when the context names them
//     (authenticator.AudiencesFrom): a token for another audience is
//     rejected by the review.
//
// Otherwise it cannot tell. So an attacker cannot feed the verified class
// with what any cluster token yields (its other spellings, an expired
// token, one for another audience); what remains is distinct tokens valid
// now for this audience (a deleted pod's), which cost a TokenRequest each,
// and the review queue never gives even those every turn.
//
// Keys the verifier cannot use (other types, RSA outside 2048 to 8192 bits,
// "use" other than "sig", malformed) are skipped; under their kid,
// "refused" becomes "cannot tell". "Cannot tell" is
// never a refusal, so it is never cached. An unknown kid is not proof of
// forgery: the API server also accepts tokens signed by keys added since
// the last fetch, by external-signer keys it leaves out of its key set,
// and, in a TokenReview, JWTs from any issuer it trusts. So an attacker
// sending tokens with random key ids uses up the refresh allowance but
// locks no one out. Each such token costs one review, as it would without
// the verifier (bounded by [Options.MaxInFlight], and the review's
// rejection is cached); forged tokens naming a key of the cluster cost
// none.
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
	errNoKeySet     = errors.New("authn: no JWKS available to pre-verify the token")
	errUnknownKey   = errors.New("authn: the token's key is not in the cluster's JWKS")
	errNotJWS       = errors.New("authn: the token is not a compact JWS the verifier reads")
	errUnverified   = errors.New("authn: no key of the cluster's JWKS verifies the token, and the API server may hold others")
	errNotCanonical = errors.New("authn: the token is not spelled canonically")
	errClaims       = errors.New("authn: the token's claims are not valid now")
	errAudience     = errors.New("authn: the token is not for the call's audiences")
)

func forged(reason string) error {
	return &reviewauth.RejectedError{Reason: "pre-verification: " + reason}
}

// Verify implements [PreVerifier]; [JWKSVerifier] documents its decisions.
func (v *JWKSVerifier) Verify(ctx context.Context, token string) error {
	jws, err := parseJWS(token)
	if err != nil {
		return err
	}
	kid := jws.Signatures[0].Header.KeyID
	set, err := v.keysFor(ctx, kid)
	if err != nil {
		return err
	}
	candidates := set.all
	if kid != "" {
		if candidates = set.byKid[kid]; len(candidates) == 0 {
			// Unknown, or only keys the verifier cannot use.
			return errUnknownKey
		}
	}
	for _, k := range candidates {
		// What the API server runs: go-jose checks the header's alg
		// against the key (RS*, PS* for RSA; ES* at the key's curve).
		if payload, err := jws.Verify(k.key); err == nil {
			return v.valid(ctx, token, payload)
		}
	}
	if kid != "" && set.derived[kid] && !set.unusable[kid] {
		return forged("bad signature")
	}
	return errUnverified
}

// valid says whether a token whose signature verified, with payload, is
// verified (nil) or cannot be told (see [JWKSVerifier]).
func (v *JWKSVerifier) valid(ctx context.Context, token string, payload []byte) error {
	if !jwt.Canonical(token) {
		return errNotCanonical
	}
	var c josejwt.Claims
	if josejson.Unmarshal(payload, &c) != nil {
		return errClaims
	}
	now := v.clock.Now()
	switch {
	case c.Expiry != nil && !now.Before(c.Expiry.Time()),
		c.NotBefore != nil && now.Add(ValidityLeeway).Before(c.NotBefore.Time()),
		c.IssuedAt != nil && now.Add(ValidityLeeway).Before(c.IssuedAt.Time()):
		return errClaims
	}
	if auds, _ := authenticator.AudiencesFrom(ctx); len(auds) > 0 && len(auds.Intersect(authenticator.Audiences(c.Audience))) == 0 {
		return errAudience
	}
	return nil
}

// parseJWS parses a compact JWS without trusting anything in it, with
// go-jose, as the API server does. Its errors never quote the token.
//
// go-jose costs more than the hand-written JOSE this verifier used before;
// it is kept because it is what the API server runs, and the signature
// check dominates the path a flood of forged tokens takes.
// BenchmarkJWKSVerify, CPU time per token (AMD EPYC, -cpu 1), go-jose vs
// hand-written: forged RS256 95 vs 61 µs, forged ES256 155 vs 98 µs,
// unknown kid (parse only; go-jose v2 rebuilds the token rune by rune to
// strip whitespace) 34 vs 4 µs, not a JWT 0.3 vs 0.2 µs. A TokenReview,
// which every one of them would cost otherwise, is a round trip and far
// more work for the API server, and a repeated token is answered from the
// rejection cache.
func parseJWS(token string) (*jose.JSONWebSignature, error) {
	// go-jose also reads the JSON serialization and strips whitespace, and
	// the API server's service-account authenticator reads neither. Check
	// the compact shape first, which also keeps junk away from the JSON
	// parser.
	header, _, _, ok := jwt.Split(token)
	if !ok {
		return nil, errNotJWS
	}
	for i := 0; i < len(token); i++ {
		if !compactJWS[token[i]] {
			return nil, errNotJWS
		}
	}
	if n := len(header); n == 0 || base64.RawURLEncoding.DecodedLen(n) > jwt.MaxPart {
		return nil, errNotJWS
	}
	jws, err := jose.ParseSigned(token)
	if err != nil || len(jws.Signatures) != 1 {
		return nil, errNotJWS
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

// verifyKey is a public key the verifier checks signatures with.
type verifyKey struct {
	key crypto.PublicKey // *rsa.PublicKey or *ecdsa.PublicKey
}

// keySet is a parsed JWKS. Several keys may share a kid, as in the API
// server's own key lookup.
type keySet struct {
	byKid    map[string][]verifyKey
	all      []verifyKey
	unusable map[string]bool // kids of entries that were skipped
	// derived holds the kids that are the one the API server derives from
	// a key under them (k8s.io/kubernetes pkg/serviceaccount
	// keyIDFromPublicKey): the kids of --service-account-key-file keys.
	derived map[string]bool
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
	set := &keySet{byKid: map[string][]verifyKey{}, unusable: map[string]bool{}, derived: map[string]bool{}}
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
		k := verifyKey{key: jwk.Key}
		set.byKid[jwk.KeyID] = append(set.byKid[jwk.KeyID], k)
		set.all = append(set.all, k)
		if jwk.KeyID != "" && jwk.KeyID == keyIDFromPublicKey(jwk.Key) {
			set.derived[jwk.KeyID] = true
		}
	}
	return set, nil
}

func (s *keySet) skip(kid string) {
	s.unusable[kid] = true
}

// keyIDFromPublicKey is the kid the API server gives key
// (k8s.io/kubernetes pkg/serviceaccount keyIDFromPublicKey): the
// unpadded base64url SHA-256 of its PKIX DER, or "" when key has none.
func keyIDFromPublicKey(key crypto.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:])
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
