package cache_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/reviewauth/reviewauth/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// metricValue returns the value of the series name{cache=cacheName} that m
// collects, or -1.
func metricValue(t testing.TB, m *metrics.Metrics, name, cacheName string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "cache" && l.GetValue() == cacheName {
					if s.GetCounter() != nil {
						return s.GetCounter().GetValue()
					}
					return s.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}
