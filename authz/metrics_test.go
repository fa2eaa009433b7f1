package authz_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/metrics"
)

// metricValue returns the value of the sample of family name whose labels
// include want, or -1.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() = %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for k, v := range want {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == k && l.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	f := newFixture(t, allowBackupPods, authz.Options{Metrics: m, Backoff: wait.Backoff{Duration: time.Millisecond, Steps: 1}})
	f.srv.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{Status: http.StatusServiceUnavailable, Times: 1})
	for range 2 {
		if r := f.authorizeStepping(context.Background(), getPods(backup()), time.Second); r.d != authorizer.DecisionAllow {
			t.Fatalf("Authorize() = %v, %v; want Allow", r.d, r.err)
		}
	}
	sar := map[string]string{"review": "SubjectAccessReview"}
	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"reviewauth_reviews_total", map[string]string{"review": "SubjectAccessReview", "code": "503"}, 1},
		{"reviewauth_review_retries_total", sar, 1},
		{"reviewauth_reviews_in_flight", sar, 0},
		{"reviewauth_cache_hits_total", map[string]string{"cache": "sar"}, 1},
		{"reviewauth_cache_entries", map[string]string{"cache": "sar"}, 1},
	} {
		if got := metricValue(t, reg, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v; want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}

func TestNoRetries(t *testing.T) {
	t.Parallel()
	f := newFixture(t, allowBackupPods, authz.Options{Backoff: wait.Backoff{Steps: -1}})
	f.srv.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{Status: http.StatusServiceUnavailable, Times: 1})
	if d, _, err := f.az.Authorize(context.Background(), getPods(backup())); d == authorizer.DecisionAllow || err == nil {
		t.Errorf("Authorize() = %v, %v; want Deny with an error", d, err)
	}
	if got := f.sars(); got != 1 {
		t.Errorf("SARs with Steps < 0 = %d; want 1", got)
	}
}
