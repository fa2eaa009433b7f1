package authn_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	"k8s.io/client-go/kubernetes"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/metrics"
)

// benchTokenSize is the size of the service-account JWT a real kube-apiserver
// v1.37.2 mints for one audience and 600s (CONTEXT.md).
const benchTokenSize = 866

// jwtOfSize returns a JWT-shaped token of exactly n bytes with an exp claim.
func jwtOfSize(tb testing.TB, n int) string {
	tb.Helper()
	for pad := 0; pad < n; pad++ {
		tok := authtest.MintJWT(map[string]any{
			"aud": []string{aud}, "exp": time.Now().Add(24 * time.Hour).Unix(),
			"sub": "system:serviceaccount:apps:backup", "pad": strings.Repeat("x", pad),
		})
		if len(tok) == n {
			return tok
		}
		if len(tok) > n {
			break
		}
	}
	tb.Fatalf("cannot build a %d-byte JWT", n)
	return ""
}

// tokenHitSetup returns, for the same token and authtest server, a warm
// reviewauth Authenticator and a warm k8s.io/apiserver delegated token
// authenticator (token/cache.New over the webhook's NewFromInterface), with
// the context each needs.
func tokenHitSetup(b *testing.B) (ours, theirs authenticator.Token, ctx, theirCtx context.Context, token string) {
	srv := authtest.Start(b)
	token = jwtOfSize(b, benchTokenSize)
	srv.AddToken(token, backup, []string{aud}, time.Now().Add(24*time.Hour))

	a, err := authn.NewForConfig(srv.Config(), authn.Options{Audiences: []string{aud}, SuccessTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(srv.Config())
	if err != nil {
		b.Fatal(err)
	}
	noop := webhook.AuthenticatorMetrics{
		RecordRequestTotal:   func(context.Context, string) {},
		RecordRequestLatency: func(context.Context, string, float64) {},
	}
	wh, err := webhook.NewFromInterface(cs.AuthenticationV1(), authenticator.Audiences{aud}, wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}, 10*time.Second, noop)
	if err != nil {
		b.Fatal(err)
	}
	ctx = context.Background()
	theirCtx = authenticator.WithAudiences(ctx, authenticator.Audiences{aud})
	theirs = tokencache.New(wh, false, time.Hour, 10*time.Second)

	for _, c := range []struct {
		t   authenticator.Token
		ctx context.Context
	}{{a, ctx}, {theirs, theirCtx}} {
		if _, ok, err := c.t.AuthenticateToken(c.ctx, token); !ok || err != nil {
			b.Fatalf("warming up: (%v, %v)", ok, err)
		}
	}
	before := srv.Count(authtest.TokenReviews)
	b.Cleanup(func() {
		if n := srv.Count(authtest.TokenReviews); n != before {
			b.Errorf("the warm benchmark sent %d TokenReviews; want 0", n-before)
		}
	})
	return a, theirs, ctx, theirCtx, token
}

// BenchmarkTokenHit measures a warm-cache authentication of the same 866-byte
// JWT with one audience, for reviewauth and for k8s.io/apiserver, in one run.
func BenchmarkTokenHit(b *testing.B) {
	ours, theirs, ctx, theirCtx, token := tokenHitSetup(b)
	b.Run("reviewauth", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok, _ := ours.AuthenticateToken(ctx, token); !ok {
				b.Fatal("not authenticated")
			}
		}
	})
	b.Run("apiserver", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok, _ := theirs.AuthenticateToken(theirCtx, token); !ok {
				b.Fatal("not authenticated")
			}
		}
	})
}

// BenchmarkTokenHitParallel is BenchmarkTokenHit from GOMAXPROCS goroutines.
func BenchmarkTokenHitParallel(b *testing.B) {
	ours, theirs, ctx, theirCtx, token := tokenHitSetup(b)
	b.Run("reviewauth", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, ok, _ := ours.AuthenticateToken(ctx, token); !ok {
					b.Fatal("not authenticated")
				}
			}
		})
	})
	b.Run("apiserver", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, ok, _ := theirs.AuthenticateToken(theirCtx, token); !ok {
					b.Fatal("not authenticated")
				}
			}
		})
	})
}

// BenchmarkTokenHitMetrics is BenchmarkTokenHit's reviewauth case with
// metrics off and on: cache counters are read at scrape time, so a hit
// should cost the same.
func BenchmarkTokenHitMetrics(b *testing.B) {
	srv := authtest.Start(b)
	token := jwtOfSize(b, benchTokenSize)
	srv.AddToken(token, backup, []string{aud}, time.Now().Add(24*time.Hour))
	for _, bc := range []struct {
		name string
		m    *metrics.Metrics
	}{{"off", nil}, {"on", metrics.New()}} {
		a, err := authn.NewForConfig(srv.Config(), authn.Options{Audiences: []string{aud}, SuccessTTL: time.Hour, Metrics: bc.m})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		if _, ok, err := a.AuthenticateToken(ctx, token); !ok || err != nil {
			b.Fatalf("warming up: (%v, %v)", ok, err)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok, _ := a.AuthenticateToken(ctx, token); !ok {
					b.Fatal("not authenticated")
				}
			}
		})
	}
}
