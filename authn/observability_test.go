package authn_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/metrics"
)

func TestMetricsAfterKnownSequence(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	m := metrics.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	clk := clocktesting.NewFakeClock(time.Now())
	a := newAuth(t, srv, authn.Options{Audiences: []string{aud}, Metrics: m, Clock: clk,
		Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 2}})
	ctx := context.Background()
	good := srv.MintToken(backup, []string{aud}, time.Time{})

	// 1. miss, then 2. hit.
	a.AuthenticateToken(ctx, good)
	a.AuthenticateToken(ctx, good)
	// 3. a 503 then a retry that succeeds.
	retried := srv.MintToken(backup, []string{aud}, time.Time{})
	srv.InjectFault(authtest.TokenReviews, authtest.Fault{Status: 503, Times: 1})
	stop := stepper(clk, time.Millisecond)
	a.AuthenticateToken(ctx, retried)
	stop()
	// 4. an error that is not retried.
	failed := srv.MintToken(backup, []string{aud}, time.Time{})
	srv.InjectFault(authtest.TokenReviews, authtest.Fault{Status: 400, Times: 1})
	a.AuthenticateToken(ctx, failed)
	// 5. two concurrent callers for one cold token: one coalesced wait.
	shared := srv.MintToken(backup, []string{aud}, time.Time{})
	release := srv.Block(authtest.TokenReviews)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.AuthenticateToken(ctx, shared) }()
	for srv.InFlight(authtest.TokenReviews) == 0 {
		runtime.Gosched()
	}
	wg.Add(1)
	go func() { defer wg.Done(); a.AuthenticateToken(ctx, shared) }()
	for !coalescedYet(reg) {
		runtime.Gosched()
	}
	release()
	wg.Wait()

	want := `
# HELP reviewauth_reviews_total Requests sent to the API server, by review (TokenReview, SubjectAccessReview) and HTTP code (0: no answer).
# TYPE reviewauth_reviews_total counter
reviewauth_reviews_total{code="201",review="TokenReview"} 3
reviewauth_reviews_total{code="400",review="TokenReview"} 1
reviewauth_reviews_total{code="503",review="TokenReview"} 1
# HELP reviewauth_review_retries_total Retries of failed reviews, by review.
# TYPE reviewauth_review_retries_total counter
reviewauth_review_retries_total{review="TokenReview"} 1
# HELP reviewauth_cache_hits_total Lookups that found a live entry, by cache. Includes the final counts of collected caches.
# TYPE reviewauth_cache_hits_total counter
reviewauth_cache_hits_total{cache="token"} 1
reviewauth_cache_hits_total{cache="token_rejected"} 0
# HELP reviewauth_cache_coalesced_total Lookups that waited for a review another caller had started instead of sending their own, by cache. Includes the final counts of collected caches.
# TYPE reviewauth_cache_coalesced_total counter
reviewauth_cache_coalesced_total{cache="token"} 1
reviewauth_cache_coalesced_total{cache="token_rejected"} 0
# HELP reviewauth_reviews_in_flight Requests to the API server in flight now, by review.
# TYPE reviewauth_reviews_in_flight gauge
reviewauth_reviews_in_flight{review="TokenReview"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"reviewauth_reviews_total", "reviewauth_review_retries_total", "reviewauth_cache_hits_total",
		"reviewauth_cache_coalesced_total", "reviewauth_reviews_in_flight"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m, "reviewauth_review_duration_seconds"); n != 1 {
		t.Errorf("latency series = %d; want 1", n)
	}
}

func coalescedYet(reg *prometheus.Registry) bool {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "reviewauth_cache_coalesced_total" {
			for _, m := range mf.GetMetric() {
				if m.GetCounter().GetValue() > 0 {
					return true
				}
			}
		}
	}
	return false
}

func TestSpans(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	a := newAuth(t, srv, authn.Options{Audiences: []string{aud}, TracerProvider: tp})
	tok := srv.MintToken(backup, []string{aud}, time.Time{})
	a.AuthenticateToken(context.Background(), tok)
	a.AuthenticateToken(context.Background(), tok)
	a.AuthenticateToken(context.Background(), "bad token")

	spans := rec.Ended()
	type got struct {
		name string
		hit  string
		dec  string
	}
	var gots []got
	for _, s := range spans {
		g := got{name: s.Name()}
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), tok) {
				t.Fatalf("span %s attribute %s carries the token", s.Name(), kv.Key)
			}
			switch kv.Key {
			case "reviewauth.cache_hit":
				g.hit = kv.Value.Emit()
			case "reviewauth.decision":
				g.dec = kv.Value.Emit()
			case "reviewauth.audiences":
				if v := kv.Value.AsStringSlice(); len(v) != 1 || v[0] != aud {
					t.Errorf("span %s audiences = %v; want [%s]", s.Name(), v, aud)
				}
			}
		}
		gots = append(gots, g)
	}
	want := []got{
		{"reviewauth.TokenReview", "", "authenticated"},
		{"reviewauth.authn.AuthenticateToken", "false", "authenticated"},
		{"reviewauth.authn.AuthenticateToken", "true", "authenticated"},
		{"reviewauth.authn.AuthenticateToken", "false", "unauthenticated"},
	}
	if len(gots) != len(want) {
		t.Fatalf("spans = %+v; want %+v", gots, want)
	}
	for i := range want {
		if gots[i] != want[i] {
			t.Errorf("span %d = %+v; want %+v", i, gots[i], want[i])
		}
	}
	_ = attribute.Key("")
}
