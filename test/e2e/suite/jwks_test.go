package suite_test

import (
	"context"
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
// refused without a review.
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
}
