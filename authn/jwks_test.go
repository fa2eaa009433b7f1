package authn_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	josejwt "gopkg.in/go-jose/go-jose.v2/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/internal/jwt"
	"github.com/reviewauth/reviewauth/internal/review"
)

func newPreVerified(t *testing.T, srv *authtest.Server, clk *clocktesting.FakeClock) *authn.Authenticator {
	t.Helper()
	v, err := authn.NewJWKSVerifier(srv.Config(), authn.JWKSOptions{Clock: clk, MinRefreshInterval: 30 * time.Second, RefreshInterval: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return newAuth(t, srv, authn.Options{Audiences: []string{aud}, PreVerifier: v, Clock: clk})
}

// outcome is what a PreVerifier's answer means to the Authenticator.
type outcome string

const (
	accepted   outcome = "accepted (reviewed)"
	refused    outcome = "refused as forged"
	cannotTell outcome = "cannot tell (reviewed)"
)

func outcomeOf(err error) outcome {
	switch {
	case err == nil:
		return accepted
	case errors.Is(err, reviewauth.ErrUnauthenticated):
		return refused
	default:
		return cannotTell
	}
}

// forgedWithKid returns a token naming the key id of genuine, with other
// claims and a signature that no key made.
func forgedWithKid(genuine string, claims map[string]any) string {
	payload, _ := json.Marshal(claims)
	sig := make([]byte, len(splitDots(genuine)[2])*3/4)
	rand.Read(sig)
	return splitDots(genuine)[0] + "." + b64.EncodeToString(payload) + "." + b64.EncodeToString(sig)
}

// randomKidToken returns a JWT naming a random key id, as an attacker sends
// to make the verifier refresh.
func randomKidToken() string {
	kid := make([]byte, 32)
	rand.Read(kid)
	sig := make([]byte, 256)
	rand.Read(sig)
	payload, _ := json.Marshal(map[string]any{"sub": "system:serviceaccount:apps:backup", "aud": []string{aud}})
	return b64.EncodeToString([]byte(header("RS256", b64.EncodeToString(kid)))) + "." + b64.EncodeToString(payload) + "." + b64.EncodeToString(sig)
}

var claims = map[string]any{"iss": "https://kubernetes.default.svc", "sub": "system:serviceaccount:apps:backup", "aud": []string{aud}}

// headerOfSize returns a JOSE header naming kid with alg, exactly n bytes
// long.
func headerOfSize(alg, kid string, n int) string {
	h := header(alg, kid)
	pad := n - len(h) - len(`,"pad":""`)
	return h[:len(h)-1] + `,"pad":"` + strings.Repeat("x", pad) + `"}`
}

// TestJWKSDecisions checks every row of JWKSVerifier's decision table
// against a key set served the way the API server serves it, with tokens
// signed the way it signs them (go-jose), and hand-made tokens that a
// careless verifier accepts. Every answer is held against the API
// server's own signature step (apiServerKeys.verifies, go-jose as
// pkg/serviceaccount runs it): the verifier never refuses a token that
// passes it, and never calls verified one that does not.
func TestJWKSDecisions(t *testing.T) {
	t.Parallel()
	k := testKeys()
	cluster := apiServerKeys{k.rsa, k.p256, k.p384, k.p521}
	jwks := newJWKSServer(cluster...)
	now := time.Unix(1_800_000_000, 0)
	clk := clocktesting.NewFakeClock(now)
	v := mustJWKS(t, jwks.fetch, authn.JWKSOptions{Clock: clk})
	ctx := context.Background()
	if err := v.Verify(ctx, signGenuine(k.p256, claims)); err != nil {
		t.Fatalf("Verify(genuine ES256) = %v; want nil", err)
	}
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(k.rsa.priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	swapped := swapPayload(signGenuine(k.rsa, claims), signGenuine(k.rsa, map[string]any{"sub": "system:serviceaccount:kube-system:admin"}))
	genuine := signGenuine(k.p256, claims)
	respelled := respellings(genuine)
	at := func(d time.Duration) int64 { return now.Add(d).Unix() }
	timed := func(c map[string]any) string {
		m := map[string]any{}
		for k, v := range claims {
			m[k] = v
		}
		for k, v := range c {
			m[k] = v
		}
		return signGenuine(k.p256, m)
	}
	auds := authenticator.WithAudiences(ctx, authenticator.Audiences{"other.example", aud})

	tests := []struct {
		name  string
		ctx   context.Context // nil: no audiences
		token string
		want  outcome
	}{
		// A kid in the key set, the algorithm that fits its key.
		{"RS256 genuine", nil, signGenuine(k.rsa, claims), accepted},
		{"ES256 genuine", nil, genuine, accepted},
		{"ES384 genuine", nil, signGenuine(k.p384, claims), accepted},
		{"ES512 genuine", nil, signGenuine(k.p521, claims), accepted},
		{"RS256 payload swapped under a genuine signature", nil, swapped, refused},
		{"ES256 signed by another key", nil, signRaw(header("ES256", k.p256.kid), claims, other, crypto.SHA256, false), refused},
		{"ES256 signature bytes random", nil, forgedWithKid(genuine, claims), refused},

		// A kid in the key set, an algorithm that does not fit its key,
		// with a signature that is valid for the key and that hash.
		{"ES256 header, P-384 key's kid, signed by it over SHA-256", nil, signRaw(header("ES256", k.p384.kid), claims, k.p384.priv, crypto.SHA256, false), refused},
		{"ES384 header, P-256 key's kid, signed by it over SHA-384", nil, signRaw(header("ES384", k.p256.kid), claims, k.p256.priv, crypto.SHA384, false), refused},
		{"ES512 header, P-384 key's kid", nil, signRaw(header("ES512", k.p384.kid), claims, k.p384.priv, crypto.SHA512, false), refused},
		{"RS256 header, EC key's kid", nil, signRaw(header("RS256", k.p256.kid), claims, k.rsa.priv, crypto.SHA256, false), refused},
		{"ES256 header, RSA key's kid", nil, signRaw(header("ES256", k.rsa.kid), claims, k.p256.priv, crypto.SHA256, false), refused},

		// Algorithms the API server never signs with: what go-jose
		// verifies with the key, the API server accepts too.
		{"alg none", nil, signRaw(header("none", k.rsa.kid), claims, nil, 0, false), refused},
		{"HS256 keyed with the RSA public key (DER)", nil, signRaw(header("HS256", k.rsa.kid), claims, der, crypto.SHA256, false), refused},
		{"HS256 keyed with the RSA public key (PEM)", nil, signRaw(header("HS256", k.rsa.kid), claims, pemKey, crypto.SHA256, false), refused},
		{"PS256 by the RSA key", nil, signRaw(header("PS256", k.rsa.kid), claims, k.rsa.priv, crypto.SHA256, true), accepted},
		{"RS384 by the RSA key", nil, signRaw(header("RS384", k.rsa.kid), claims, k.rsa.priv, crypto.SHA384, false), accepted},
		{"b64 header", nil, signRaw(`{"alg":"ES256","kid":"`+k.p256.kid+`","b64":false,"crit":["b64"]}`, claims, k.p256.priv, crypto.SHA256, false), refused},
		{"crit header", nil, signRaw(`{"alg":"ES256","kid":"`+k.p256.kid+`","crit":["exp"]}`, claims, k.p256.priv, crypto.SHA256, false), refused},

		// No kid: every key is tried, here and by the API server, which
		// may hold keys the key set leaves out.
		{"no kid, ES256 by a published key", nil, signRaw(header("ES256", ""), claims, k.p256.priv, crypto.SHA256, false), accepted},
		{"no kid, RS256 by a published key", nil, signRaw(header("RS256", ""), claims, k.rsa.priv, crypto.SHA256, false), accepted},
		{"no kid, RS256 by an unpublished key", nil, signRaw(header("RS256", ""), claims, k.rsa2.priv, crypto.SHA256, false), cannotTell},
		{"alg none without kid", nil, signRaw(header("none", ""), claims, nil, 0, false), cannotTell},
		{"HS256 keyed with the RSA public key, no kid", nil, signRaw(header("HS256", ""), claims, pemKey, crypto.SHA256, false), cannotTell},
		{"KID (upper case: no key id to go-jose), by a published key", nil, signRaw(`{"alg":"ES256","KID":"`+k.p256.kid+`"}`, claims, k.p256.priv, crypto.SHA256, false), accepted},
		{"KID naming a published key, by an unpublished one", nil, signRaw(`{"alg":"RS256","KID":"`+k.rsa.kid+`"}`, claims, k.rsa2.priv, crypto.SHA256, false), cannotTell},
		{"kid and KID", nil, signRaw(`{"alg":"ES256","KID":"other","kid":"`+k.p256.kid+`"}`, claims, k.p256.priv, crypto.SHA256, false), accepted},

		// An x5c chain (4 KiB of header) is no reason to refuse.
		{"x5c chain of two certificates (2.2 KiB), by a published key", nil, signRaw(x5cHeader("ES256", k.p256.kid, 2), claims, k.p256.priv, crypto.SHA256, false), accepted},
		{"x5c chain of three certificates (3.2 KiB), by a published key", nil, signRaw(x5cHeader("ES256", k.p256.kid, 3), claims, k.p256.priv, crypto.SHA256, false), accepted},
		{"x5c chain, unpublished key", nil, signRaw(x5cHeader("RS256", "idp-key", 3), claims, k.rsa2.priv, crypto.SHA256, false), cannotTell},

		// A kid not in the key set, no refresh allowed: review it.
		{"unknown kid, genuinely signed by a key not yet fetched", nil, signGenuine(k.rsa2, claims), cannotTell},
		{"unknown random kid", nil, randomKidToken(), cannotTell},
		{"authtest.MintJWT", nil, authtest.MintJWT(claims), cannotTell},

		// Signed, but not verified: other spellings, not valid now, not
		// for the call's audiences.
		{"another spelling of a genuine token (first)", nil, respelled[0], cannotTell},
		{"another spelling of a genuine token (last)", nil, respelled[len(respelled)-1], cannotTell},
		{"another spelling of a forgery", nil, respellings(forgedWithKid(genuine, claims))[0], refused},
		{"exp 1s ahead", nil, timed(map[string]any{"exp": at(time.Second)}), accepted},
		{"exp now", nil, timed(map[string]any{"exp": at(0)}), cannotTell},
		{"expired", nil, timed(map[string]any{"exp": at(-time.Hour)}), cannotTell},
		{"nbf at the leeway", nil, timed(map[string]any{"nbf": at(authn.ValidityLeeway)}), accepted},
		{"nbf 1s past the leeway", nil, timed(map[string]any{"nbf": at(authn.ValidityLeeway + time.Second)}), cannotTell},
		{"iat at the leeway", nil, timed(map[string]any{"iat": at(authn.ValidityLeeway)}), accepted},
		{"iat 1s past the leeway", nil, timed(map[string]any{"iat": at(authn.ValidityLeeway + time.Second)}), cannotTell},
		{"exp not a number", nil, timed(map[string]any{"exp": fmt.Sprint(at(time.Hour))}), cannotTell},
		{"for the call's audience", auds, genuine, accepted},
		{"aud a string, the call's", auds, timed(map[string]any{"aud": aud}), accepted},
		{"for another audience", auds, timed(map[string]any{"aud": []string{"someone-else"}}), cannotTell},
		{"no aud (the API server's)", auds, timed(map[string]any{"aud": nil}), cannotTell},

		// Not a compact JWS: cannot tell, as other authenticators of the
		// API server may read it.
		{"empty", nil, "", cannotTell},
		{"opaque token", nil, "0123456789abcdef0123456789abcdef", cannotTell},
		{"two parts", nil, "eyJhbGciOiJSUzI1NiJ9.e30", cannotTell},
		{"four parts", nil, genuine + ".e30", cannotTell},
		{"empty header", nil, "." + splitDots(genuine)[1] + "." + splitDots(genuine)[2], cannotTell},
		{"JSON serialization", nil, `{"payload":"e30","protected":"eyJhbGciOiJFUzI1NiJ9","signature":"AA"}`, cannotTell},
		{"header not JSON", nil, b64.EncodeToString([]byte("not json")) + ".e30.AA", cannotTell},
		{"padded base64", nil, genuine + "==", cannotTell},
		{"whitespace inside", nil, strings.Replace(genuine, ".", ". ", 1), cannotTell},
		{"header at the size limit", nil, signRaw(headerOfSize("ES256", k.p256.kid, jwt.MaxPart), claims, k.p256.priv, crypto.SHA256, false), accepted},
		{"header 1 byte over the size limit", nil, signRaw(headerOfSize("ES256", k.p256.kid, jwt.MaxPart+1), claims, k.p256.priv, crypto.SHA256, false), cannotTell},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := tt.ctx
			if c == nil {
				c = ctx
			}
			err := v.Verify(c, tt.token)
			got := outcomeOf(err)
			if got != tt.want {
				t.Errorf("Verify() = %v (%s); want %s", err, got, tt.want)
			}
			switch apiServer := cluster.verifies(tt.token); {
			case got == refused && apiServer:
				t.Errorf("Verify() refused a token the API server's signature check accepts")
			case got == accepted && !apiServer:
				t.Errorf("Verify() verified a token the API server's signature check refuses")
			}
			if err != nil && strings.Contains(err.Error(), splitDots(tt.token)[0]) && splitDots(tt.token)[0] != "" {
				t.Errorf("Verify() error %q quotes the token", err)
			}
		})
	}
	t.Cleanup(func() {
		if n := jwks.count.Load(); n != 1 {
			t.Errorf("JWKS fetches = %d; want 1 (the clock did not move past MinRefreshInterval)", n)
		}
	})
}

// TestJWKSExternalSigner (issue #30): with an external signer
// (--service-account-signing-endpoint), the API server verifies with every
// key the signer returns, and publishes only those not excluded from OIDC
// discovery (pkg/serviceaccount/externaljwt/plugin keyCache and
// openidmetadata); the signer names its keys, and keys may share a kid. A
// token signed by an excluded key under a published key's kid passes the
// API server, so it must not be refused: a kid proves a forgery only when
// it is the one the API server derives from the published key.
func TestJWKSExternalSigner(t *testing.T) {
	t.Parallel()
	k := testKeys()
	named := func(c clusterKey, kid string) clusterKey { c.kid = kid; return c }
	published := named(k.p256, "signer-key-1")
	excluded := named(k.rsa2, "signer-key-1") // same kid, left out of discovery
	retired := named(k.p384, "signer-key-0")  // excluded, a kid of its own
	apiServer := apiServerKeys{published, excluded, retired}
	jwks := newJWKSServer(published) // what /openid/v1/jwks serves
	v := mustJWKS(t, jwks.fetch, authn.JWKSOptions{Clock: clocktesting.NewFakeClock(time.Now())})
	// A cluster whose keys come from --service-account-key-file: kids
	// derived from the keys.
	static := mustJWKS(t, newJWKSServer(k.p256).fetch, authn.JWKSOptions{Clock: clocktesting.NewFakeClock(time.Now())})
	for _, tt := range []struct {
		name  string
		v     *authn.JWKSVerifier
		token string
		want  outcome
	}{
		{"published key", v, signGenuine(published, claims), accepted},
		{"excluded key under the published key's kid", v, signGenuine(excluded, claims), cannotTell},
		{"excluded key under its own kid", v, signGenuine(retired, claims), cannotTell},
		{"no key under the signer's kid verifies", v, forgedWithKid(signGenuine(published, claims), claims), cannotTell},
		{"no kid, excluded key", v, signRaw(header("RS256", ""), claims, excluded.priv, crypto.SHA256, false), cannotTell},
		{"static keys: the derived kid, another key", static, signRaw(header("RS256", k.p256.kid), claims, k.rsa2.priv, crypto.SHA256, false), refused},
		{"static keys: the derived kid, a bad signature", static, forgedWithKid(signGenuine(k.p256, claims), claims), refused},
	} {
		got := outcomeOf(tt.v.Verify(context.Background(), tt.token))
		if got != tt.want {
			t.Errorf("%s: Verify() %s; want %s", tt.name, got, tt.want)
		}
		if got == refused && apiServer.verifies(tt.token) {
			t.Errorf("%s: refused a token the API server accepts", tt.name)
		}
	}
}

// TestJWKSJunkFloods (issue #30): floods of tokens that carry a signature
// of the cluster's key but cannot be genuine now (other spellings of a
// valid token, expired tokens, tokens for another audience), each from
// its own address, and of tokens that look genuine in every way the
// verifier can see (a deleted pod's) from a fourth, all at once, at full
// speed, through pre-verification and the review queue, against an API
// server that takes 20ms a review. A genuine token the verifier cannot
// check (another issuer's), from a fifth address, must be reviewed within
// the queue's bound: the first three kinds are "cannot tell", reviewed in
// the unverified class where the sources take turns (three ahead of it),
// the last kind is verified, and the unverified class has a guaranteed
// share. Before issue #30 all four kinds were verified, and the verified
// class was served first: the genuine token waited for the flood to end.
func TestJWKSJunkFloods(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	srv.InjectFault(authtest.TokenReviews, authtest.Fault{Delay: 20 * time.Millisecond})
	v, err := authn.NewJWKSVerifier(srv.Config(), authn.JWKSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const maxInFlight = 2
	a := newAuth(t, srv, authn.Options{Audiences: []string{aud}, PreVerifier: v, Backoff: noRetries, MaxInFlight: maxInFlight})
	ctx := t.Context()
	if _, ok, err := a.AuthenticateToken(ctx, srv.MintToken(backup, []string{aud}, time.Now().Add(time.Hour))); !ok || err != nil {
		t.Fatalf("genuine token: (%v, %v)", ok, err)
	}
	// respelled hands out the other spellings of fresh valid tokens, one
	// token's at a time.
	var mu sync.Mutex
	var spellings []string
	respelled := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(spellings) == 0 {
			spellings = respellings(srv.MintToken(backup, []string{aud}, time.Now().Add(time.Hour)))
		}
		tok := spellings[0]
		spellings = spellings[1:]
		return tok
	}
	kinds := []struct {
		name string
		next func() string
	}{
		{"re-spelled", respelled},
		{"expired", func() string { return srv.MintToken(backup, []string{aud}, time.Now().Add(-time.Minute)) }},
		{"foreign audience", func() string { return srv.MintToken(backup, []string{"other.example"}, time.Now().Add(time.Hour)) }},
		{"deleted pod's (verified)", func() string {
			tok := srv.MintToken(backup, []string{aud}, time.Now().Add(time.Hour))
			srv.RevokeToken(tok)
			return tok
		}},
	}
	// The queue's bound for a caller alone on its address with three other
	// addresses waiting in its class, in reviews handed a slot after it
	// arrives, plus the reviews in flight then and those granted while it
	// is looked up and pre-verified.
	const (
		perKind = 3
		bound   = (3+1)*(review.VerifiedShare+1) + 2*maxInFlight
	)
	floodCtx, stop := context.WithCancel(ctx)
	var sent atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	for i, kind := range kinds {
		for j := range perKind {
			actx := review.WithSource(floodCtx, review.Source{Address: fmt.Sprintf("192.0.2.%d", i+1), Conn: fmt.Sprint(j)})
			wg.Go(func() {
				for actx.Err() == nil {
					sent.Add(1)
					a.AuthenticateToken(actx, kind.next())
				}
			})
		}
	}
	// Wait for the queue to fill, spinning (nothing here waits for time).
	for deadline := time.Now().Add(10 * time.Second); a.Waiting() < len(kinds)*perKind-maxInFlight-2; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("the flood did not fill the queue: %d waiting", a.Waiting())
		}
	}
	// Another issuer's token: a key id the cluster does not publish, so
	// the verifier cannot tell; the API server accepts it. Measured up to
	// three times: the count of reviews ahead of it depends on when its
	// goroutine runs on a loaded machine; a queue that starves it misses
	// every time.
	var ahead int
	for try := 1; try <= 3; try++ {
		genuine := authtest.MintJWT(map[string]any{"sub": backup.Name, "aud": []string{aud}, "try": try})
		srv.AddToken(genuine, backup, []string{aud}, time.Now().Add(time.Hour))
		gctx, cancel := context.WithTimeout(review.WithSource(ctx, review.Source{Address: "192.0.2.7", Conn: "1"}), 3*time.Second)
		before := srv.Count(authtest.TokenReviews)
		start := time.Now()
		_, ok, err := a.AuthenticateToken(gctx, genuine)
		delay := time.Since(start)
		cancel()
		if !ok || err != nil {
			t.Fatalf("genuine unverifiable token under the floods = (%v, %v) after %v; want authenticated", ok, err, delay)
		}
		ahead = slices.IndexFunc(srv.TokenReviews()[before:], func(r authenticationv1.TokenReview) bool { return r.Spec.Token == genuine })
		t.Logf("a genuine unverifiable token from another address answered after %v, %d flood reviews reached the API server before it (%d flood tokens sent so far)", delay.Round(time.Microsecond), ahead, sent.Load())
		if ahead <= bound {
			break
		}
	}
	if ahead > bound {
		t.Errorf("genuine unverifiable token under the floods: %d reviews reached the API server before it; want at most %d", ahead, bound)
	}
}

// TestJWKSRandomKidFloodDuringRotation is the attack of issue #11, item 11:
// an attacker sends tokens with random key ids all the time, so that every
// refresh the verifier may make is spent on them, and the cluster rotates
// its signing key just after one of those refreshes. Genuine tokens signed
// with the new key must be accepted at every moment (through the review,
// until the next refresh brings the key), never refused, and never answered
// from a cached rejection.
func TestJWKSRandomKidFloodDuringRotation(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Now())
	srv := authtest.Start(t)
	a := newPreVerified(t, srv, clk)
	ctx := context.Background()

	const (
		seconds    = 125 // of fake time, in 1s steps
		attackRate = 5   // attacker tokens per second
		rotateAt   = 30  // right after the attacker's refresh at 30s
	)
	genuine, attacks := 0, 0
	for s := 0; s < seconds; s++ {
		for range attackRate {
			attacks++
			if _, ok, err := a.AuthenticateToken(ctx, randomKidToken()); ok || !errors.Is(err, reviewauth.ErrUnauthenticated) {
				t.Fatalf("%ds: attacker token: (%v, %v); want ErrUnauthenticated", s, ok, err)
			}
		}
		if s == rotateAt {
			srv.RotateSigningKey()
		}
		tok := srv.MintToken(backup, []string{aud}, time.Time{})
		genuine++
		// Twice: the second answer must not come from a cached rejection.
		for try := range 2 {
			if _, ok, err := a.AuthenticateToken(ctx, tok); !ok || err != nil {
				t.Fatalf("%ds (rotated at %ds), try %d: genuine token: (%v, %v); want authenticated", s, rotateAt, try, ok, err)
			}
		}
		clk.Step(time.Second)
	}
	// Fetches: the first, then one per MinRefreshInterval at most.
	if n, max := srv.Count(authtest.JWKS), 1+seconds/30; n > max {
		t.Errorf("JWKS fetches = %d; want at most %d", n, max)
	}
	// Each distinct token is reviewed once: the attacker's cost the API
	// server what they would without the verifier, and no more.
	if n := srv.Count(authtest.TokenReviews); n != genuine+attacks {
		t.Errorf("TokenReviews = %d; want %d (one per distinct token)", n, genuine+attacks)
	}
}

// TestJWKSRefreshBounds checks MinRefreshInterval and RefreshInterval at
// their edges, and that a refresh brings a rotated key into use.
func TestJWKSRefreshBounds(t *testing.T) {
	t.Parallel()
	k := testKeys()
	jwks := newJWKSServer(k.p256)
	clk := clocktesting.NewFakeClock(time.Now())
	const minRefresh, refresh = 30 * time.Second, 10 * time.Minute
	v := mustJWKS(t, jwks.fetch, authn.JWKSOptions{Clock: clk, MinRefreshInterval: minRefresh, RefreshInterval: refresh})
	ctx := context.Background()
	old, rotated := signGenuine(k.p256, claims), signGenuine(k.rsa, claims)
	check := func(step string, token string, want outcome, wantFetches int32) {
		t.Helper()
		if got := outcomeOf(v.Verify(ctx, token)); got != want {
			t.Errorf("%s: Verify() %s; want %s", step, got, want)
		}
		if n := jwks.count.Load(); n != wantFetches {
			t.Errorf("%s: JWKS fetches = %d; want %d", step, n, wantFetches)
		}
	}
	check("first use", old, accepted, 1)
	jwks.set(jwksOf(k.rsa, k.p256), nil) // the cluster rotates
	check("rotated key at once", rotated, cannotTell, 1)
	clk.Step(minRefresh - time.Nanosecond)
	check("rotated key 1ns before MinRefreshInterval", rotated, cannotTell, 1)
	clk.Step(time.Nanosecond)
	check("rotated key at MinRefreshInterval", rotated, accepted, 2)
	check("forged with the rotated key's kid", forgedWithKid(rotated, claims), refused, 2)
	clk.Step(refresh - time.Nanosecond)
	check("known key 1ns before RefreshInterval", old, accepted, 2)
	clk.Step(time.Nanosecond)
	check("known key at RefreshInterval", old, accepted, 3)
	// A key retired by the cluster is unknown after the next refresh.
	jwks.set(jwksOf(k.rsa), nil)
	clk.Step(refresh)
	check("retired key after a refresh", old, cannotTell, 4)
}

// TestJWKSKeySetUnavailable: with no key set, or a key set that cannot be
// used, every token is reviewed; a failed refresh keeps the last good set.
func TestJWKSKeySetUnavailable(t *testing.T) {
	t.Parallel()
	k := testKeys()
	genuine := signGenuine(k.p256, claims)
	forged := forgedWithKid(genuine, claims)
	oversized := append(jwksOf(k.p256), make([]byte, authn.MaxJWKSSize)...)
	for _, tt := range []struct {
		name string
		raw  []byte
		err  error
	}{
		{"fetch fails", nil, errors.New("connection refused")},
		{"not a key set", []byte(`<html>`), nil},
		{"key set over the size limit", oversized, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			jwks := &jwksServer{}
			jwks.set(tt.raw, tt.err)
			clk := clocktesting.NewFakeClock(time.Now())
			v := mustJWKS(t, jwks.fetch, authn.JWKSOptions{Clock: clk})
			for _, tok := range []string{genuine, forged} {
				if got := outcomeOf(v.Verify(context.Background(), tok)); got != cannotTell {
					t.Errorf("Verify() %s; want %s", got, cannotTell)
				}
			}
			if got := outcomeOf(v.Verify(context.Background(), "opaque")); got != cannotTell {
				t.Errorf("Verify(opaque) %s; want %s", got, cannotTell)
			}
			if n := jwks.count.Load(); n != 1 {
				t.Errorf("JWKS fetches = %d; want 1", n)
			}
			// Once the key set is served, forgeries are refused again.
			jwks.set(jwksOf(k.p256), nil)
			clk.Step(30 * time.Second)
			if got := outcomeOf(v.Verify(context.Background(), forged)); got != refused {
				t.Errorf("after recovery: Verify(forged) %s; want %s", got, refused)
			}
			// And a failed refresh keeps that set.
			jwks.set(nil, errors.New("connection refused"))
			clk.Step(10 * time.Minute)
			if got := outcomeOf(v.Verify(context.Background(), forged)); got != refused {
				t.Errorf("after a failed refresh: Verify(forged) %s; want %s", got, refused)
			}
			if got := outcomeOf(v.Verify(context.Background(), genuine)); got != accepted {
				t.Errorf("after a failed refresh: Verify(genuine) %s; want %s", got, accepted)
			}
		})
	}
}

// TestJWKSSkippedKeys: a token naming a key the verifier cannot use is
// reviewed, not refused.
func TestJWKSSkippedKeys(t *testing.T) {
	t.Parallel()
	k := testKeys()
	weak := newClusterKey(mustRSA(t, 1024), "RS256")
	weakToken := signRaw(header("RS256", weak.kid), claims, weak.priv, crypto.SHA256, false)
	for _, tt := range []struct {
		name  string
		jwks  []byte
		token string
		want  outcome
	}{
		{"kid of a 1024-bit RSA key", jwksOf(k.p256, weak), weakToken, cannotTell},
		{"no kid, signed by a skipped key", jwksOf(k.p256, weak), signRaw(header("RS256", ""), claims, weak.priv, crypto.SHA256, false), cannotTell},
		{"kid shared by a usable and a skipped key", sharedKid(k.p256, weak), signRaw(header("RS256", k.p256.kid), claims, weak.priv, crypto.SHA256, false), cannotTell},
		{"kid shared, the usable key signed", sharedKid(k.p256, weak), signRaw(header("ES256", k.p256.kid), claims, k.p256.priv, crypto.SHA256, false), accepted},
		{"kid of an encryption key", []byte(`{"keys":[{"kty":"EC","use":"enc","kid":"` + k.p256.kid + `","crv":"P-256",` + ecXY(k.p256) + `}]}`), signGenuine(k.p256, claims), cannotTell},
		{"no kid, nothing skipped, none verifies", jwksOf(k.p256), signRaw(header("ES256", ""), claims, mustEC(t), crypto.SHA256, false), cannotTell},
		{"derived kid, nothing skipped, none verifies", jwksOf(k.p256), signRaw(header("ES256", k.p256.kid), claims, mustEC(t), crypto.SHA256, false), refused},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			jwks := &jwksServer{}
			jwks.set(tt.jwks, nil)
			v := mustJWKS(t, jwks.fetch, authn.JWKSOptions{Clock: clocktesting.NewFakeClock(time.Now())})
			if got := outcomeOf(v.Verify(context.Background(), tt.token)); got != tt.want {
				t.Errorf("Verify() %s; want %s", got, tt.want)
			}
		})
	}
}

// sharedKid serves a and b under a's kid, as the API server allows.
func sharedKid(a, b clusterKey) []byte {
	b.kid = a.kid
	return jwksOf(a, b)
}

// ecXY returns the "x" and "y" members of an EC key's JWK.
func ecXY(k clusterKey) string {
	var set struct{ Keys []struct{ X, Y string } }
	if err := json.Unmarshal(jwksOf(k), &set); err != nil {
		panic(err)
	}
	return fmt.Sprintf(`"x":%q,"y":%q`, set.Keys[0].X, set.Keys[0].Y)
}

func TestJWKSPreVerification(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Now())
	srv := authtest.Start(t)
	a := newPreVerified(t, srv, clk)
	ctx := context.Background()

	genuine := srv.MintToken(backup, []string{aud}, time.Time{})
	if _, ok, err := a.AuthenticateToken(ctx, genuine); !ok || err != nil {
		t.Fatalf("genuine token: (%v, %v); want success", ok, err)
	}
	if n := srv.Count(authtest.TokenReviews); n != 1 {
		t.Fatalf("TokenReviews for a genuine token = %d; want 1: pre-verified tokens are still reviewed", n)
	}
	tests := []struct {
		name        string
		token       string
		wantReviews int
	}{
		{"forged signature under the cluster's key id", forgedWithKid(genuine, map[string]any{"sub": "system:serviceaccount:apps:backup", "aud": []string{aud}}), 0},
		{"opaque token: reviewed, and rejected by the review", "0123456789abcdef0123456789abcdef", 1},
		{"payload swapped under a genuine signature", swapPayload(genuine, srv.MintToken(backup, []string{"other"}, time.Time{})), 0},
		{"unknown key id: reviewed, and rejected by the review", authtest.MintJWT(map[string]any{"sub": "system:serviceaccount:apps:backup", "aud": []string{aud}}), 1},
	}
	for _, tt := range tests {
		before := srv.Count(authtest.TokenReviews)
		_, ok, err := a.AuthenticateToken(ctx, tt.token)
		if ok || !errors.Is(err, reviewauth.ErrUnauthenticated) {
			t.Errorf("%s: (%v, %v); want ErrUnauthenticated", tt.name, ok, err)
		}
		if n := srv.Count(authtest.TokenReviews) - before; n != tt.wantReviews {
			t.Errorf("%s: %d TokenReviews; want %d", tt.name, n, tt.wantReviews)
		}
	}
	if n := srv.Count(authtest.JWKS); n != 1 {
		t.Errorf("JWKS fetches = %d; want 1", n)
	}
}

// swapPayload puts b's payload under a's header and signature.
func swapPayload(a, b string) string {
	pa, pb := splitDots(a), splitDots(b)
	return pa[0] + "." + pb[1] + "." + pa[2]
}

func splitDots(s string) [3]string {
	var out [3]string
	i := 0
	start := 0
	for j := 0; j < len(s); j++ {
		if s[j] == '.' && i < 2 {
			out[i] = s[start:j]
			i++
			start = j + 1
		}
	}
	out[2] = s[start:]
	return out
}

func TestJWKSRotationAndBoundedRefresh(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Now())
	srv := authtest.Start(t)
	a := newPreVerified(t, srv, clk)
	ctx := context.Background()
	a.AuthenticateToken(ctx, srv.MintToken(backup, []string{aud}, time.Time{}))

	// A new signing key: its tokens name an unknown kid, which triggers a
	// refresh once MinRefreshInterval has passed since the last fetch.
	srv.RotateSigningKey()
	rotated := srv.MintToken(backup, []string{aud}, time.Time{})
	clk.Step(30 * time.Second)
	if _, ok, err := a.AuthenticateToken(ctx, rotated); !ok || err != nil {
		t.Fatalf("token from a rotated key: (%v, %v); want success after a refresh", ok, err)
	}
	if n := srv.Count(authtest.JWKS); n != 2 {
		t.Fatalf("JWKS fetches = %d; want 2", n)
	}
	// A flood of tokens naming the cluster's key without its signature
	// costs no review; a flood of unknown kids fetches no more often than
	// MinRefreshInterval, and costs one review per token.
	for i := range 100 {
		for _, forged := range []string{forgedWithKid(rotated, map[string]any{"i": i}), authtest.MintJWT(map[string]any{"i": i})} {
			if _, ok, _ := a.AuthenticateToken(ctx, forged); ok {
				t.Fatal("forged token authenticated")
			}
		}
	}
	if n := srv.Count(authtest.JWKS); n != 2 {
		t.Errorf("JWKS fetches during a flood of unknown kids = %d; want still 2", n)
	}
	if n := srv.Count(authtest.TokenReviews); n != 2+100 {
		t.Errorf("TokenReviews = %d; want %d: 2 genuine, 100 unknown kids, 0 for forgeries of a known kid", n, 2+100)
	}
}

func TestJWKSUnavailableFallsBackToReview(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Now())
	srv := authtest.Start(t)
	srv.InjectFault(authtest.JWKS, authtest.Fault{Status: 503})
	a := newPreVerified(t, srv, clk)
	ctx := context.Background()
	genuine := srv.MintToken(backup, []string{aud}, time.Time{})
	if _, ok, err := a.AuthenticateToken(ctx, genuine); !ok || err != nil {
		t.Fatalf("genuine token with JWKS down: (%v, %v); want success through the TokenReview", ok, err)
	}
	forged := forgedWithKid(genuine, map[string]any{"sub": "x"})
	if _, ok, err := a.AuthenticateToken(ctx, forged); ok || !errors.Is(err, reviewauth.ErrUnauthenticated) {
		t.Fatalf("forged token with JWKS down: (%v, %v); want rejected by the TokenReview", ok, err)
	}
	if n := srv.Count(authtest.JWKS); n != 1 {
		t.Errorf("JWKS fetches while down = %d; want 1 (bounded by MinRefreshInterval)", n)
	}
	srv.ClearFaults()
	clk.Step(30 * time.Second)
	forged2 := forgedWithKid(genuine, map[string]any{"sub": "y"})
	before := srv.Count(authtest.TokenReviews)
	a.AuthenticateToken(ctx, forged2)
	if n := srv.Count(authtest.TokenReviews) - before; n != 0 {
		t.Errorf("forged token after JWKS recovered: %d TokenReviews; want 0", n)
	}
}

func TestParseJWKS(t *testing.T) {
	t.Parallel()
	k := testKeys()
	weak := newClusterKey(mustRSA(t, 1024), "RS256")
	entries := func(n int) string {
		return `{"keys":[` + strings.TrimSuffix(strings.Repeat(`{"kty":"none"},`, n), ",") + `]}`
	}
	padTo := func(raw []byte, n int) string {
		return string(raw) + strings.Repeat(" ", n-len(raw))
	}
	tests := []struct {
		name        string
		raw         string
		wantUsable  int
		wantSkipped bool
		wantErr     bool
	}{
		{"as the API server serves it", string(jwksOf(k.rsa, k.p256, k.p384, k.p521)), 4, false, false},
		{"empty set", `{"keys":[]}`, 0, false, false},
		{"no keys member", `{}`, 0, false, true},
		{"not an object", `[]`, 0, false, true},
		{"not json", `{"keys":[`, 0, false, true},
		{"encryption key skipped", `{"keys":[{"kty":"EC","use":"enc","kid":"a","crv":"P-256",` + ecXY(k.p256) + `}]}`, 0, true, false},
		{"alg that does not fit the key skipped", `{"keys":[{"kty":"EC","alg":"ES384","kid":"a","crv":"P-256",` + ecXY(k.p256) + `}]}`, 0, true, false},
		{"1024-bit rsa skipped", string(jwksOf(weak)), 0, true, false},
		{"bad curve skipped", `{"keys":[{"kty":"EC","kid":"a","crv":"P-192","x":"AA","y":"AA"}]}`, 0, true, false},
		{"point not on curve skipped", `{"keys":[{"kty":"EC","kid":"a","crv":"P-256","x":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","y":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}]}`, 0, true, false},
		{"symmetric key skipped", `{"keys":[{"kty":"oct","kid":"a","k":"c2VjcmV0"}]}`, 0, true, false},
		{"unknown kty skipped", `{"keys":[{"kty":"OKP","kid":"a"}]}`, 0, true, false},
		{"one bad key does not spoil the set", `{"keys":[{"kty":"nope"},` + strings.TrimPrefix(string(jwksOf(k.p256)), `{"keys":[`), 1, true, false},
		{"at the size limit", padTo(jwksOf(k.p256), authn.MaxJWKSSize), 1, false, false},
		{"1 byte over the size limit", padTo(jwksOf(k.p256), authn.MaxJWKSSize+1), 0, false, true},
		{"at the key count limit", entries(authn.MaxJWKSKeys), 0, true, false},
		{"1 key over the key count limit", entries(authn.MaxJWKSKeys + 1), 0, false, true},
	}
	for _, tt := range tests {
		usable, skipped, err := authn.ParseJWKS([]byte(tt.raw))
		if (err != nil) != tt.wantErr || usable != tt.wantUsable || skipped != tt.wantSkipped {
			t.Errorf("%s: ParseJWKS() = (%d usable, skipped %v, %v); want (%d, %v, error %v)", tt.name, usable, skipped, err, tt.wantUsable, tt.wantSkipped, tt.wantErr)
		}
	}
}

func FuzzParseJWKS(f *testing.F) {
	k := testKeys()
	f.Add(jwksOf(k.rsa, k.p256, k.p384, k.p521))
	f.Add([]byte(`{"keys":[{"kty":"EC","kid":"a","crv":"P-256","x":"AA","y":"AA"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","kid":"a","n":"AQAB","e":"AQAB"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","kid":"a","n":"AQAB","e":"AQAB","x5c":["AA"]}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		usable, _, err := authn.ParseJWKS(raw)
		if err != nil && usable != 0 {
			t.Fatalf("ParseJWKS returned keys and an error")
		}
		if usable > authn.MaxJWKSKeys {
			t.Fatalf("ParseJWKS returned %d keys; the limit is %d", usable, authn.MaxJWKSKeys)
		}
	})
}

// FuzzJWKSVerify: whatever the token, Verify refuses it only when the API
// server's signature check (apiServerKeys.verifies) refuses it too, and
// verifies it only when that check passes, it is canonical, and it carries
// the claims of a genuine token (the fuzzer cannot sign others).
func FuzzJWKSVerify(f *testing.F) {
	k := testKeys()
	cluster := apiServerKeys{k.rsa, k.p256}
	v := mustJWKS(f, newJWKSServer(cluster...).fetch, authn.JWKSOptions{Clock: clocktesting.NewFakeClock(time.Now())})
	good := []string{signGenuine(k.p256, claims), signGenuine(k.rsa, claims)}
	for _, g := range good {
		f.Add(g)
		f.Add(respellings(g)[0])
		f.Add(forgedWithKid(g, claims))
	}
	f.Add(authtest.MintJWT(map[string]any{"a": 1}))
	f.Add(signRaw(header("ES256", ""), claims, k.p256.priv, crypto.SHA256, false))
	f.Add("a.b.c")
	f.Add("")
	decoded := func(tok string) string {
		c, _ := b64.DecodeString(splitDots(tok)[1])
		return string(c)
	}
	f.Fuzz(func(t *testing.T, token string) {
		switch outcomeOf(v.Verify(context.Background(), token)) {
		case refused:
			if cluster.verifies(token) {
				t.Fatalf("Verify refused a token the API server's signature check accepts: %q", token)
			}
		case accepted:
			if !cluster.verifies(token) || !jwt.Canonical(token) || (decoded(token) != decoded(good[0]) && decoded(token) != decoded(good[1])) {
				t.Fatalf("Verify verified %q", token)
			}
		}
	})
}

// FuzzJWKSVerifySigned signs whatever header and payload the fuzzer makes
// with a key in the set (ES256 over the canonical encoding), and checks the
// verifier against the API server's own checks: it refuses only what the
// API server's signature check refuses; it verifies only what that check
// passes with alg ES256 and the key's kid (or none), whose claims pass the
// API server's claim check (go-jose's Claims.Validate, one-minute leeway,
// at the verifier's clock) and have not reached their exp; and it verifies
// the header the API server writes over valid claims.
func FuzzJWKSVerifySigned(f *testing.F) {
	k := testKeys()
	cluster := apiServerKeys{k.rsa, k.p256}
	now := time.Unix(1_800_000_000, 0)
	v := mustJWKS(f, newJWKSServer(cluster...).fetch, authn.JWKSOptions{Clock: clocktesting.NewFakeClock(now)})
	genuineHeader := header("ES256", k.p256.kid)
	for _, h := range []string{
		genuineHeader,
		header("ES256", ""),
		header("ES384", k.p256.kid),
		header("RS256", k.p256.kid),
		header("none", k.p256.kid),
		`{"alg":"ES256","kid":"` + k.p256.kid + `","b64":false,"crit":["b64"]}`,
		`{"alg":"ES256","KID":"` + k.p256.kid + `"}`,
		`{"alg":"ES256","kid":"` + k.p256.kid + `","x5c":["AA"]}`,
		`{"alg":"ES256","alg":"HS256"}`,
		`{"alg":"ES256","jwk":{"kty":"EC"}}`,
	} {
		f.Add(h, `{}`)
	}
	for _, c := range []string{`{"exp":1800000001}`, `{"exp":1800000000}`, `{"nbf":1800000060,"iat":1800000061}`,
		`{"exp":"1800000001"}`, `{"exp":1.8e9}`, `{"aud":"x","exp":1e300}`, `[]`, `null`, `{"exp":null}`, `{"aud":null}`} {
		f.Add(genuineHeader, c)
	}
	f.Fuzz(func(t *testing.T, h, payload string) {
		input := b64.EncodeToString([]byte(h)) + "." + b64.EncodeToString([]byte(payload))
		sum := sha256.Sum256([]byte(input))
		r, s, err := ecdsa.Sign(rand.Reader, k.p256.priv.(*ecdsa.PrivateKey), sum[:])
		if err != nil {
			t.Fatal(err)
		}
		sig := make([]byte, 64)
		r.FillBytes(sig[:32])
		s.FillBytes(sig[32:])
		tok := input + "." + b64.EncodeToString(sig)
		err = v.Verify(context.Background(), tok)
		if h == genuineHeader && payload == `{}` && err != nil {
			t.Fatalf("Verify(genuine header, no claims) = %v", err)
		}
		switch outcomeOf(err) {
		case refused:
			if cluster.verifies(tok) {
				t.Fatalf("Verify refused header %q, payload %q, which the API server's signature check accepts", h, payload)
			}
		case accepted:
			var m map[string]any
			if json.Unmarshal([]byte(h), &m) != nil || !cluster.verifies(tok) {
				t.Fatalf("Verify verified header %q", h)
			}
			if kid, hasKid := m["kid"]; m["alg"] != "ES256" || (hasKid && kid != k.p256.kid && kid != "") {
				t.Fatalf("Verify verified header %q", h)
			}
			parsed, err := josejwt.ParseSigned(tok)
			var c josejwt.Claims
			if err != nil || parsed.Claims(k.p256.priv.Public(), &c) != nil || c.Validate(josejwt.Expected{Time: now}) != nil {
				t.Fatalf("Verify verified payload %q, which the API server's claim check refuses", payload)
			}
			if c.Expiry != nil && !now.Before(c.Expiry.Time()) {
				t.Fatalf("Verify verified payload %q, at or past its exp", payload)
			}
		}
	})
}

func mustRSA(t *testing.T, bits int) *rsa.PrivateKey {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func mustEC(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// TestNewJWKSVerifierOverHTTP runs the verifier's real client-go fetch
// against a real HTTP server: the key set is read up to its size limit, and
// a refused or oversized answer leaves the verifier unable to tell, never
// refusing.
func TestNewJWKSVerifierOverHTTP(t *testing.T) {
	t.Parallel()
	k := testKeys()
	genuine := signGenuine(k.p256, claims)
	pad := func(n int) []byte {
		raw := jwksOf(k.p256)
		return append(raw, []byte(strings.Repeat(" ", n-len(raw)))...)
	}
	for _, tt := range []struct {
		name   string
		status int
		body   []byte
		want   outcome
	}{
		{"key set", http.StatusOK, jwksOf(k.p256), accepted},
		{"key set at the size limit", http.StatusOK, pad(authn.MaxJWKSSize), accepted},
		{"key set 1 byte over the size limit", http.StatusOK, pad(authn.MaxJWKSSize + 1), cannotTell},
		{"forbidden (no RBAC for /openid/v1/jwks)", http.StatusForbidden, []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`), cannotTell},
		{"server error", http.StatusInternalServerError, nil, cannotTell},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var paths []string
			var mu sync.Mutex
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				paths = append(paths, r.Method+" "+r.URL.Path)
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				w.Write(tt.body)
			}))
			defer srv.Close()
			cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
			v, err := authn.NewJWKSVerifier(cfg, authn.JWKSOptions{Clock: clocktesting.NewFakeClock(time.Now())})
			if err != nil {
				t.Fatal(err)
			}
			if got := outcomeOf(v.Verify(context.Background(), genuine)); got != tt.want {
				t.Errorf("Verify(genuine) %s; want %s", got, tt.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(paths) != 1 || paths[0] != "GET /openid/v1/jwks" {
				t.Errorf("requests = %q; want one GET /openid/v1/jwks (no retries)", paths)
			}
		})
	}
}

// mustJWKS is authn.NewJWKSVerifierFunc, failing tb on an error.
func mustJWKS(tb testing.TB, fetch func(context.Context) ([]byte, error), opts authn.JWKSOptions) *authn.JWKSVerifier {
	tb.Helper()
	v, err := authn.NewJWKSVerifierFunc(fetch, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}
