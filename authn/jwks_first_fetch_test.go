package authn_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
)

// TestJWKSFirstFetchWaiters: a forged token that arrives while the first
// JWKS fetch is in flight must wait for it and be refused, not be handed to
// the TokenReview as "cannot tell".
func TestJWKSFirstFetchWaiters(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	raw := []byte(`{"keys":[]}`)
	v := authn.NewJWKSVerifierFunc(func(ctx context.Context) ([]byte, error) {
		close(entered)
		<-release
		return raw, nil
	}, authn.JWKSOptions{})
	forged := authtest.MintJWT(map[string]any{"sub": "x"})
	first := make(chan error, 1)
	go func() { first <- v.Verify(context.Background(), forged) }()
	<-entered // the first fetch is in flight
	second := make(chan error, 1)
	go func() { second <- v.Verify(context.Background(), forged) }()
	select {
	case err := <-second:
		// Returned while the fetch is still blocked: it did not wait.
		t.Errorf("Verify(forged) during the first fetch = %v; want it to wait for the fetch and match ErrUnauthenticated", err)
		close(release)
	case <-time.After(time.Second): // only bounds the failure's detection
		close(release)
		if err := <-second; !errors.Is(err, reviewauth.ErrUnauthenticated) {
			t.Errorf("second Verify(forged) = %v; want ErrUnauthenticated", err)
		}
	}
	if err := <-first; !errors.Is(err, reviewauth.ErrUnauthenticated) {
		t.Errorf("first Verify(forged) = %v; want ErrUnauthenticated", err)
	}
}
