package suite_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
