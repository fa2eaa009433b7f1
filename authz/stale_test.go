package authz_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/metrics"
)

func TestStaleIfError(t *testing.T) {
	t.Parallel()
	const ttl, grace = time.Minute, 30 * time.Second
	denyAll := authtest.Policy(func(spec authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
		return false, true, "no", ""
	})
	tests := []struct {
		name      string
		policy    authtest.Policy
		elapsed   time.Duration
		outage    bool
		flip      bool // the policy now denies
		want      authorizer.Decision
		wantErr   bool
		wantStale float64
	}{
		{"fresh allow during an outage: a plain hit", allowBackupPods, ttl - time.Nanosecond, true, false, authorizer.DecisionAllow, false, 0},
		{"stale allow during an outage: served", allowBackupPods, ttl + time.Second, true, false, authorizer.DecisionAllow, false, 1},
		{"1ns before the grace ends: served", allowBackupPods, ttl + grace - time.Nanosecond, true, false, authorizer.DecisionAllow, false, 1},
		{"exactly at the grace's end: unavailable", allowBackupPods, ttl + grace, true, false, authorizer.DecisionDeny, true, 0},
		{"stale allow, API server up: asked again", allowBackupPods, ttl + time.Second, false, true, authorizer.DecisionDeny, false, 0},
		{"denials are never extended", denyAll, authz.DefaultDeniedTTL, true, false, authorizer.DecisionDeny, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := metrics.New()
			f := newFixture(t, tt.policy, authz.Options{AllowedTTL: ttl, StaleIfError: grace, Backoff: wait.Backoff{Steps: -1}, Metrics: m})
			attrs := getPods(backup())
			if _, _, err := f.az.Authorize(context.Background(), attrs); err != nil {
				t.Fatal(err)
			}
			f.clock.Step(tt.elapsed)
			if tt.outage {
				f.srv.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{Status: 503})
			}
			if tt.flip {
				f.srv.SetPolicy(denyAll)
			}
			d, _, err := f.az.Authorize(context.Background(), attrs)
			if d != tt.want || (err != nil) != tt.wantErr {
				t.Fatalf("Authorize() at +%v = (%v, %v); want (%v, error %v)", tt.elapsed, d, err, tt.want, tt.wantErr)
			}
			if err != nil && (!errors.Is(err, reviewauth.ErrUnavailable) || d == authorizer.DecisionAllow) {
				t.Fatalf("Authorize() error = %v with %v; want ErrUnavailable and never Allow", err, d)
			}
			n := testutil.CollectAndCount(m, "reviewauth_stale_serves_total")
			if tt.wantStale == 0 && n != 0 {
				t.Errorf("stale serves recorded; want none")
			}
			if tt.wantStale > 0 {
				want := "# HELP reviewauth_stale_serves_total Allowed results served past their TTL because the API server was unavailable (stale-if-error), by cache.\n# TYPE reviewauth_stale_serves_total counter\nreviewauth_stale_serves_total{cache=\"sar\"} 1\n"
				if err := testutil.CollectAndCompare(m, strings.NewReader(want), "reviewauth_stale_serves_total"); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func TestAuthorizeSpans(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	f := newFixture(t, allowBackupPods, authz.Options{TracerProvider: tp})
	attrs := getPods(backup())
	f.az.Authorize(context.Background(), attrs)
	f.az.Authorize(context.Background(), attrs)
	var got []string
	for _, s := range rec.Ended() {
		line := s.Name()
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "reviewauth.cache_hit", "reviewauth.decision", "reviewauth.verb", "reviewauth.resource":
				line += " " + string(kv.Key) + "=" + kv.Value.Emit()
			}
		}
		got = append(got, line)
	}
	want := []string{
		"reviewauth.SubjectAccessReview",
		"reviewauth.authz.Authorize reviewauth.verb=get reviewauth.resource=pods reviewauth.cache_hit=false reviewauth.decision=allowed",
		"reviewauth.authz.Authorize reviewauth.verb=get reviewauth.resource=pods reviewauth.cache_hit=true reviewauth.decision=allowed",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("spans:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
