package authn_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
)

func newPreVerified(t *testing.T, srv *authtest.Server, clk *clocktesting.FakeClock) *authn.Authenticator {
	t.Helper()
	v, err := authn.NewJWKSVerifier(srv.Config(), authn.JWKSOptions{Clock: clk, MinRefreshInterval: 30 * time.Second, RefreshInterval: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return newAuth(t, srv, authn.Options{Audiences: []string{aud}, PreVerifier: v, Clock: clk})
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
	tests := []struct{ name, token string }{
		{"forged signature", authtest.MintJWT(map[string]any{"sub": "system:serviceaccount:apps:backup", "aud": []string{aud}})},
		{"opaque token", "0123456789abcdef0123456789abcdef"},
		{"payload swapped under a genuine signature", swapPayload(genuine, srv.MintToken(backup, []string{"other"}, time.Time{}))},
	}
	for _, tt := range tests {
		before := srv.Count(authtest.TokenReviews)
		_, ok, err := a.AuthenticateToken(ctx, tt.token)
		if ok || !errors.Is(err, reviewauth.ErrUnauthenticated) {
			t.Errorf("%s: (%v, %v); want ErrUnauthenticated", tt.name, ok, err)
		}
		if n := srv.Count(authtest.TokenReviews) - before; n != 0 {
			t.Errorf("%s: %d TokenReviews; want 0", tt.name, n)
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
	// A flood of tokens with unknown kids fetches no more often than
	// MinRefreshInterval.
	for i := 0; i < 100; i++ {
		forged := authtest.MintJWT(map[string]any{"i": i})
		if _, ok, _ := a.AuthenticateToken(ctx, forged); ok {
			t.Fatal("forged token authenticated")
		}
	}
	if n := srv.Count(authtest.JWKS); n != 2 {
		t.Errorf("JWKS fetches during a flood of unknown kids = %d; want still 2", n)
	}
	if n := srv.Count(authtest.TokenReviews); n != 2 {
		t.Errorf("TokenReviews = %d; want 2: forged tokens are never reviewed", n)
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
	forged := authtest.MintJWT(map[string]any{"sub": "x"})
	if _, ok, err := a.AuthenticateToken(ctx, forged); ok || !errors.Is(err, reviewauth.ErrUnauthenticated) {
		t.Fatalf("forged token with JWKS down: (%v, %v); want rejected by the TokenReview", ok, err)
	}
	if n := srv.Count(authtest.JWKS); n != 1 {
		t.Errorf("JWKS fetches while down = %d; want 1 (bounded by MinRefreshInterval)", n)
	}
	srv.ClearFaults()
	clk.Step(30 * time.Second)
	forged2 := authtest.MintJWT(map[string]any{"sub": "y"})
	before := srv.Count(authtest.TokenReviews)
	a.AuthenticateToken(ctx, forged2)
	if n := srv.Count(authtest.TokenReviews) - before; n != 0 {
		t.Errorf("forged token after JWKS recovered: %d TokenReviews; want 0", n)
	}
}

func TestParseJWKS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		raw     string
		wantN   int
		wantErr bool
	}{
		{"empty set", `{"keys":[]}`, 0, false},
		{"not json", `{"keys":[`, 0, true},
		{"encryption key skipped", `{"keys":[{"kty":"RSA","use":"enc","kid":"a","n":"AQAB","e":"AQAB"}]}`, 0, false},
		{"weak rsa", `{"keys":[{"kty":"RSA","kid":"a","n":"AQAB","e":"AQAB"}]}`, 0, true},
		{"bad curve", `{"keys":[{"kty":"EC","kid":"a","crv":"P-192","x":"AA","y":"AA"}]}`, 0, true},
		{"point not on curve", `{"keys":[{"kty":"EC","kid":"a","crv":"P-256","x":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","y":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}]}`, 0, true},
		{"unknown kty skipped", `{"keys":[{"kty":"OKP","kid":"a"}]}`, 0, false},
	}
	for _, tt := range tests {
		keys, err := authn.ParseJWKS([]byte(tt.raw))
		if (err != nil) != tt.wantErr || (err == nil && len(keys) != tt.wantN) {
			t.Errorf("%s: ParseJWKS() = (%d keys, %v); want %d keys, error %v", tt.name, len(keys), err, tt.wantN, tt.wantErr)
		}
	}
}

func FuzzParseJWKS(f *testing.F) {
	f.Add([]byte(`{"keys":[{"kty":"EC","kid":"a","crv":"P-256","x":"AA","y":"AA"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","kid":"a","n":"AQAB","e":"AQAB"}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		keys, err := authn.ParseJWKS(raw)
		if err != nil && keys != nil {
			t.Fatalf("ParseJWKS returned keys and an error")
		}
	})
}

func FuzzJWKSVerify(f *testing.F) {
	srv := authtest.NewServer()
	defer srv.Close()
	good := srv.MintToken(backup, []string{aud}, time.Time{})
	f.Add(good)
	f.Add(authtest.MintJWT(map[string]any{"a": 1}))
	f.Add("a.b.c")
	f.Add("")
	real, err := authn.NewJWKSVerifier(srv.Config(), authn.JWKSOptions{})
	if err != nil {
		f.Fatal(err)
	}
	if err := real.Verify(context.Background(), good); err != nil {
		f.Fatalf("Verify(genuine) = %v", err)
	}
	f.Fuzz(func(t *testing.T, token string) {
		err := real.Verify(context.Background(), token)
		if err == nil && token != good {
			// Any other accepted token must carry the genuine signature
			// over the genuine signing input.
			if splitDots(token)[0]+"."+splitDots(token)[1] != splitDots(good)[0]+"."+splitDots(good)[1] {
				t.Fatalf("Verify accepted a token with a different signing input: %q", token)
			}
		}
	})
}
