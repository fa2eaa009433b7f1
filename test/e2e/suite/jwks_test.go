package suite_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"
	josejwt "gopkg.in/go-jose/go-jose.v2/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	apiserverserviceaccount "k8s.io/apiserver/pkg/authentication/serviceaccount"
	externaljwtv1 "k8s.io/externaljwt/apis/v1"
	"k8s.io/kubernetes/pkg/serviceaccount"
	externaljwtplugin "k8s.io/kubernetes/pkg/serviceaccount/externaljwt/plugin"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// countingReviewer counts the TokenReviews it forwards.
type countingReviewer struct {
	next authn.TokenReviewer
	n    atomic.Int32
}

func (c *countingReviewer) Create(ctx context.Context, tr *authenticationv1.TokenReview, o metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	c.n.Add(1)
	return c.next.Create(ctx, tr, o)
}

// TestJWKSPreVerification checks authn's opt-in JWKS pre-verification
// against the real API server's /openid/v1/jwks and its real RS256
// signatures: a genuine token verifies locally and is still reviewed; a
// token whose payload was swapped under a genuine header and signature is
// refused without a review, and so are headers naming the real key with
// another algorithm; a kid the cluster does not publish is reviewed (and
// rejected by the API server), never refused locally.
func TestJWKSPreVerification(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	ns := c.UniqueNamespace(t, "jwks")
	c.CreateServiceAccount(t, ns, "caller")
	const aud = "jwks.example"
	genuine := c.RequestToken(t, ns, "caller", cluster.TokenOptions{Audiences: []string{aud}, ExpirationSeconds: 600})
	other := c.RequestToken(t, ns, "caller", cluster.TokenOptions{Audiences: []string{"someone-else"}, ExpirationSeconds: 600})

	v, err := authn.NewJWKSVerifier(c.AdminConfig(), authn.JWKSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := v.Verify(ctx, genuine); err != nil {
		t.Fatalf("Verify(genuine token) = %v; want nil (the real JWKS verifies the real signature)", err)
	}
	g, o := strings.Split(genuine, "."), strings.Split(other, ".")
	swapped := g[0] + "." + o[1] + "." + g[2] // other's claims under genuine's signature
	if err := v.Verify(ctx, swapped); !errors.Is(err, reviewauth.ErrUnauthenticated) {
		t.Fatalf("Verify(swapped payload) = %v; want ErrUnauthenticated", err)
	}

	reviewer := &countingReviewer{next: c.Clientset().AuthenticationV1().TokenReviews()}
	a, err := authn.New(reviewer, authn.Options{Audiences: []string{aud}, PreVerifier: v})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := a.AuthenticateToken(ctx, genuine); !ok || err != nil {
		t.Fatalf("AuthenticateToken(genuine) = (%v, %v); want authenticated", ok, err)
	}
	if _, ok, err := a.AuthenticateToken(ctx, swapped); ok || !errors.Is(err, reviewauth.ErrUnauthenticated) {
		t.Fatalf("AuthenticateToken(swapped) = (%v, %v); want ErrUnauthenticated", ok, err)
	}
	if _, ok, _ := a.AuthenticateToken(ctx, other); ok {
		t.Fatalf("AuthenticateToken(token for another audience) authenticated; want rejected by the review")
	}
	if n := reviewer.n.Load(); n != 2 {
		t.Errorf("TokenReviews = %d; want 2 (genuine and other-audience; the forged one is refused locally)", n)
	}

	// The real header names the real key; change the header and keep the
	// real payload and signature.
	rawHeader, err := base64.RawURLEncoding.DecodeString(g[0])
	if err != nil {
		t.Fatal(err)
	}
	var hdr struct{ Alg, Kid string }
	if err := json.Unmarshal(rawHeader, &hdr); err != nil || hdr.Alg != "RS256" || hdr.Kid == "" {
		t.Fatalf("real token header %s: want RS256 with a kid", rawHeader)
	}
	withHeader := func(h string) string {
		return base64.RawURLEncoding.EncodeToString([]byte(h)) + "." + g[1] + "." + g[2]
	}
	for _, tt := range []struct {
		name, token string
		refused     bool // locally; otherwise reviewed, and rejected by the API server
	}{
		{"ES256 header with the real RSA key's kid", withHeader(`{"alg":"ES256","kid":"` + hdr.Kid + `"}`), true},
		{"alg none with the real kid", withHeader(`{"alg":"none","kid":"` + hdr.Kid + `"}`), true},
		{"PS256 with the real kid", withHeader(`{"alg":"PS256","kid":"` + hdr.Kid + `"}`), true},
		{"a kid the cluster does not publish", withHeader(`{"alg":"RS256","kid":"rotated-in-later"}`), false},
	} {
		err := v.Verify(ctx, tt.token)
		if got := errors.Is(err, reviewauth.ErrUnauthenticated); got != tt.refused {
			t.Errorf("%s: Verify() = %v; want refused %v", tt.name, err, tt.refused)
		}
		before := reviewer.n.Load()
		if _, ok, err := a.AuthenticateToken(ctx, tt.token); ok || !errors.Is(err, reviewauth.ErrUnauthenticated) {
			t.Errorf("%s: AuthenticateToken() = (%v, %v); want ErrUnauthenticated", tt.name, ok, err)
		}
		want := int32(1)
		if tt.refused {
			want = 0
		}
		if n := reviewer.n.Load() - before; n != want {
			t.Errorf("%s: TokenReviews = %d; want %d", tt.name, n, want)
		}
	}
}

// signWith signs header and payload (base64url parts as given) with the
// cluster's service-account key: RS256, or PS256 when pss.
func signWith(t *testing.T, key *rsa.PrivateKey, header, payload string, pss bool) string {
	t.Helper()
	input := header + "." + payload
	sum := sha256.Sum256([]byte(input))
	var sig []byte
	var err error
	if pss {
		sig, err = rsa.SignPSS(rand.Reader, key, crypto.SHA256, sum[:], nil)
	} else {
		sig, err = rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	}
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// serviceAccountKey reads the cluster's --service-account-signing-key-file.
func serviceAccountKey(t *testing.T, c *cluster.Cluster) *rsa.PrivateKey {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.Dir(), "sa.key"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		t.Fatal("sa.key: no PEM block")
	}
	key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// respelled returns token with the unused low bits of the last character
// of its part i (0 header, 1 payload, 2 signature) set, when it has any,
// and false otherwise.
func respelled(token string, i int) (string, bool) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	parts := strings.Split(token, ".")
	p := parts[i]
	free := map[int]int{2: 0xf, 3: 0x3}[len(p)%4]
	if free == 0 {
		return "", false
	}
	parts[i] = p[:len(p)-1] + string(alphabet[strings.IndexByte(alphabet, p[len(p)-1])|free])
	return strings.Join(parts, "."), true
}

// x5cChain returns n self-signed RSA 2048 certificates in x5c form (std
// base64 DER), about 1 KiB each.
func x5cChain(t *testing.T, key *rsa.PrivateKey, n int) []string {
	t.Helper()
	var chain []string
	for i := range n {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 1)), Subject: pkix.Name{CommonName: fmt.Sprintf("x5c %d", i), Organization: []string{"idp.example"}},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"idp.example", "login.idp.example", "sts.idp.example"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, base64.StdEncoding.EncodeToString(der))
	}
	return chain
}

// TestJWKSAgainstAPIServer (issue #30) holds pre-verification against the
// real API server, which reviews every token first (the oracle): tokens
// the cluster's key signs the way a genuine one is not (another spelling,
// a "KID" member, an x5c chain of 2 KiB, PS256), one it signed that
// expired, one for another audience, and a forgery. Pre-verification
// never refuses a token the API server authenticates, verifies only
// canonical, valid tokens for the call's audience, and the Authenticator
// then answers as the API server does, with a TokenReview for every token
// but the forgery. Both for a service audience and, with
// AllowAPIServerAudience, the API server's own.
func TestJWKSAgainstAPIServer(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	ns := c.UniqueNamespace(t, "jwks-oracle")
	c.CreateServiceAccount(t, ns, "caller")
	key := serviceAccountKey(t, c)
	v, err := authn.NewJWKSVerifier(c.AdminConfig(), authn.JWKSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding
	for _, cfg := range []struct {
		name     string
		aud      string // "" is the API server's own
		opts     authn.Options
		reviewed []string // audiences the oracle reviews for
	}{
		{"service audience", "jwks-oracle.example", authn.Options{Audiences: []string{"jwks-oracle.example"}}, []string{"jwks-oracle.example"}},
		{"AllowAPIServerAudience", "", authn.Options{AllowAPIServerAudience: true}, nil},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			var auds []string
			if cfg.aud != "" {
				auds = []string{cfg.aud}
			}
			genuine := c.RequestToken(t, ns, "caller", cluster.TokenOptions{Audiences: auds, ExpirationSeconds: 600})
			other := c.RequestToken(t, ns, "caller", cluster.TokenOptions{Audiences: []string{"someone-else"}, ExpirationSeconds: 600})
			g := strings.Split(genuine, ".")
			rawHeader, _ := enc.DecodeString(g[0])
			var hdr struct{ Alg, Kid string }
			if err := json.Unmarshal(rawHeader, &hdr); err != nil || hdr.Alg != "RS256" || hdr.Kid == "" {
				t.Fatalf("real token header %s: want RS256 with a kid", rawHeader)
			}
			var claims map[string]any
			rawClaims, _ := enc.DecodeString(g[1])
			if err := json.Unmarshal(rawClaims, &claims); err != nil {
				t.Fatal(err)
			}
			claims["iat"], claims["nbf"], claims["exp"] = time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-time.Hour).Unix()
			expiredClaims, _ := json.Marshal(claims)
			h := func(v any) string {
				b, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				return enc.EncodeToString(b)
			}
			// With AllowAPIServerAudience the verifier does not know the
			// API server's audiences: a token for another audience is
			// verified, and rejected by its review.
			o := strings.Split(other, ".")
			tokens := []struct {
				name string
				tok  string
				api  bool // what the API server answers, checked
				want string
			}{
				{"genuine", genuine, true, "verified"},
				{"KID naming the cluster's key (no key id to go-jose)", signWith(t, key, h(map[string]string{"alg": "RS256", "KID": hdr.Kid}), g[1], false), true, "verified"},
				{"an x5c chain of 2 KiB", signWith(t, key, h(map[string]any{"alg": "RS256", "kid": hdr.Kid, "x5c": x5cChain(t, key, 2)}), g[1], false), true, "verified"},
				{"PS256 by the cluster's key", signWith(t, key, h(map[string]string{"alg": "PS256", "kid": hdr.Kid}), g[1], true), true, "verified"},
				{"expired", signWith(t, key, g[0], enc.EncodeToString(expiredClaims), false), false, "cannot tell"},
				{"for another audience", other, false, map[bool]string{true: "cannot tell", false: "verified"}[cfg.aud != ""]},
				{"other's claims under genuine's signature", g[0] + "." + o[1] + "." + g[2], false, "refused"},
			}
			for i := range 3 {
				if tok, ok := respelled(genuine, i); ok {
					tokens = append(tokens, struct {
						name string
						tok  string
						api  bool
						want string
					}{fmt.Sprintf("genuine, part %d spelled otherwise", i), tok, true, "cannot tell"})
				}
			}
			reviewer := &countingReviewer{next: c.Clientset().AuthenticationV1().TokenReviews()}
			opts := cfg.opts
			opts.PreVerifier = v
			a, err := authn.New(reviewer, opts)
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			vctx := ctx
			if len(auds) > 0 {
				vctx = authenticator.WithAudiences(ctx, auds)
			}
			for _, tt := range tokens {
				st := c.ReviewToken(t, tt.tok, cfg.reviewed...)
				if st.Authenticated != tt.api {
					t.Errorf("%s: the API server authenticates it: %v (%s); the test assumes %v", tt.name, st.Authenticated, st.Error, tt.api)
				}
				err := v.Verify(vctx, tt.tok)
				got := "cannot tell"
				switch {
				case err == nil:
					got = "verified"
				case errors.Is(err, reviewauth.ErrUnauthenticated):
					got = "refused"
				}
				if got == "refused" && st.Authenticated {
					t.Errorf("%s: pre-verification refused a token the API server authenticates", tt.name)
				}
				if got != tt.want {
					t.Errorf("%s: Verify() = %v (%s); want %s", tt.name, err, got, tt.want)
				}
				before := reviewer.n.Load()
				_, ok, err := a.AuthenticateToken(ctx, tt.tok)
				if ok != st.Authenticated || (!ok && !errors.Is(err, reviewauth.ErrUnauthenticated)) {
					t.Errorf("%s: AuthenticateToken() = (%v, %v); the API server: authenticated %v", tt.name, ok, err, st.Authenticated)
				}
				want := int32(1)
				if got == "refused" {
					want = 0
				}
				if n := reviewer.n.Load() - before; n != want {
					t.Errorf("%s: TokenReviews = %d; want %d", tt.name, n, want)
				}
			}
		})
	}
}

// externalSigner is an ExternalJWTSigner (k8s.io/externaljwt/apis/v1) that
// only serves keys: the API server's key cache asks it for them.
type externalSigner struct {
	externaljwtv1.UnimplementedExternalJWTSignerServer
	keys []*externaljwtv1.Key
}

func (s *externalSigner) FetchKeys(context.Context, *externaljwtv1.FetchKeysRequest) (*externaljwtv1.FetchKeysResponse, error) {
	return &externaljwtv1.FetchKeysResponse{Keys: s.keys, DataTimestamp: timestamppb.Now(), RefreshHintSeconds: 3600}, nil
}

// TestJWKSExternalSigner (issue #30) runs the API server's own code for an
// external signer (--service-account-signing-endpoint): its key cache
// (k8s.io/kubernetes v1.37.2 pkg/serviceaccount/externaljwt/plugin), fed by
// a signer whose keys share a kid and are partly excluded from discovery;
// the key set it publishes at /openid/v1/jwks (pkg/serviceaccount
// openidmetadata, which leaves excluded keys out); and its
// service-account token authenticator (pkg/serviceaccount
// JWTTokenAuthenticator, which tries every key under a kid). A token that
// authenticator accepts is never refused by a JWKSVerifier reading that
// key set; one it refuses may be.
func TestJWKSExternalSigner(t *testing.T) {
	t.Parallel()
	const issuer = "https://signer.example"
	gen := func() *rsa.PrivateKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	published, excluded, retired := gen(), gen(), gen()
	pkix := func(k *rsa.PrivateKey) []byte {
		der, err := x509.MarshalPKIXPublicKey(k.Public())
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	signer := &externalSigner{keys: []*externaljwtv1.Key{
		{KeyId: "signer-1", Key: pkix(published)},
		{KeyId: "signer-1", Key: pkix(excluded), ExcludeFromOidcDiscovery: true},
		{KeyId: "signer-0", Key: pkix(retired), ExcludeFromOidcDiscovery: true},
	}}
	socket := filepath.Join(t.TempDir(), "signer.sock")
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	externaljwtv1.RegisterExternalJWTSignerServer(srv, signer)
	go srv.Serve(lis)
	defer srv.Stop()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, keys, err := externaljwtplugin.New(ctx, issuer, socket, 10*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	provider, err := serviceaccount.NewOpenIDMetadataProvider(issuer, issuer+"/openid/v1/jwks", "", keys)
	if err != nil {
		t.Fatal(err)
	}
	jwks, _ := provider.GetKeysetJSON()
	v, err := authn.NewJWKSVerifierFunc(func(context.Context) ([]byte, error) { return jwks, nil }, authn.JWKSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	apiServer := serviceaccount.JWTTokenAuthenticator[struct{}]([]string{issuer}, keys, authenticator.Audiences{"api"}, acceptSignature{})

	enc := base64.RawURLEncoding
	payload := enc.EncodeToString(fmt.Appendf(nil, `{"iss":%q,"sub":"system:serviceaccount:ns:sa","aud":["api"],"exp":%d}`, issuer, time.Now().Add(time.Hour).Unix()))
	head := func(kid string) string {
		return enc.EncodeToString(fmt.Appendf(nil, `{"alg":"RS256","kid":%q,"typ":"JWT"}`, kid))
	}
	for _, tt := range []struct {
		name string
		tok  string
		api  bool // the API server's authenticator accepts it, checked
		want string
	}{
		{"published key", signWith(t, published, head("signer-1"), payload, false), true, "verified"},
		{"excluded key under the published key's kid", signWith(t, excluded, head("signer-1"), payload, false), true, "cannot tell"},
		{"excluded key under its own kid", signWith(t, retired, head("signer-0"), payload, false), true, "cannot tell"},
		{"signer-1's kid, signed by a key under another kid", signWith(t, retired, head("signer-1"), payload, false), false, "cannot tell"},
		{"KID (no key id to go-jose), excluded key", signWith(t, excluded, enc.EncodeToString([]byte(`{"alg":"RS256","KID":"signer-1","typ":"JWT"}`)), payload, false), true, "cannot tell"},
		{"no kid, excluded key", signWith(t, excluded, enc.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`)), payload, false), true, "cannot tell"},
	} {
		_, accepted, _ := apiServer.AuthenticateToken(authenticator.WithAudiences(t.Context(), authenticator.Audiences{"api"}), tt.tok)
		if accepted != tt.api {
			t.Errorf("%s: the API server's authenticator accepts it: %v; the test assumes %v", tt.name, accepted, tt.api)
		}
		err := v.Verify(t.Context(), tt.tok)
		got := "cannot tell"
		switch {
		case err == nil:
			got = "verified"
		case errors.Is(err, reviewauth.ErrUnauthenticated):
			got = "refused"
		}
		if got == "refused" && accepted {
			t.Errorf("%s: refused a token the API server's authenticator accepts", tt.name)
		}
		if got != tt.want {
			t.Errorf("%s: Verify() = %v (%s); want %s", tt.name, err, got, tt.want)
		}
	}
}

// acceptSignature is a serviceaccount.Validator that accepts every token
// whose signature and issuer the authenticator checked: the test asks
// only about keys.
type acceptSignature struct{}

func (acceptSignature) Validate(_ context.Context, _ string, public *josejwt.Claims, _ *struct{}) (*apiserverserviceaccount.ServiceAccountInfo, error) {
	return &apiserverserviceaccount.ServiceAccountInfo{Namespace: "ns", Name: "sa"}, nil
}
