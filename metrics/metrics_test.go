package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/reviewauth/reviewauth/internal/observe"
	"github.com/reviewauth/reviewauth/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMetricsCollectsWhatThePackagesRecord: what authn, authz and the
// transports record through observe.Of(m) is what m collects, and m passes
// Prometheus' linter on a pedantic registry.
func TestMetricsCollectsWhatThePackagesRecord(t *testing.T) {
	m := metrics.New()
	rec := observe.Of(m)
	if rec == nil {
		t.Fatal("observe.Of(metrics.New()) = nil")
	}
	rec.ReviewAttempt("TokenReview", 201, 3*time.Millisecond)
	rec.ReviewRetry("TokenReview")
	want := `
# HELP reviewauth_review_retries_total Retries of failed reviews, by review.
# TYPE reviewauth_review_retries_total counter
reviewauth_review_retries_total{review="TokenReview"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "reviewauth_review_retries_total"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatalf("Register() = %v", err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("Gather() = %v", err)
	}
}

// TestNilMetrics: a nil *Metrics records nothing and never panics.
func TestNilMetrics(t *testing.T) {
	var m *metrics.Metrics
	if rec := observe.Of(m); rec != nil {
		t.Fatalf("observe.Of(nil *Metrics) = %v; want nil", rec)
	}
	observe.Of(m).Decision("http", observe.OutcomeAllowed)
	ch := make(chan *prometheus.Desc, 1)
	m.Describe(ch)
	close(ch)
	if len(ch) != 0 {
		t.Errorf("nil Metrics described %d metrics; want none", len(ch))
	}
}
