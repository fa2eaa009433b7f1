// Package metrics exposes what reviewauth does as Prometheus metrics, on a
// registry of the caller's choosing. Nothing is registered globally:
// k8s.io/apiserver registers its authentication metrics in a legacy global
// registry that controller-runtime never serves and kube-rbac-proxy never
// exposes, so they are invisible in exactly the programs that need them.
//
// Build one [Metrics], pass it to the Options of authn, authz, httpauth and
// grpcauth, and register it once:
//
//	m := metrics.New()
//	reg.MustRegister(m)
//
// The metrics (names, labels, meaning) are listed in the README. Cache hit
// and miss counts are read from the caches' own counters when the registry
// is scraped, so a cache hit pays nothing for metrics.
//
// A Metrics holds the caches it reports only weakly: an Authenticator or
// Authorizer that is no longer used, say one replaced on a configuration
// reload, is garbage collected with its caches. Its final counts are then
// added to per-name retired totals, so that every counter stays monotonic
// (rate() sees no reset), while its entries leave
// reviewauth_cache_entries.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewauth/reviewauth/internal/observe"
)

// Metrics is a prometheus.Collector of every reviewauth metric. Pass it in
// the Metrics field of the Options of authn, authz, httpauth and grpcauth,
// and register it on your registry. One Metrics may serve any number of
// authenticators, authorizers and transports: series of one name are
// summed. A Metrics is safe for concurrent use. A nil *Metrics is valid in
// those Options and records nothing, at no cost; it must not be
// registered. The zero Metrics is not usable: call [New].
type Metrics struct {
	r *observe.Recorder
}

var _ prometheus.Collector = (*Metrics)(nil)

func init() {
	observe.Install(func(v any) *observe.Recorder {
		if m, ok := v.(*Metrics); ok && m != nil {
			return m.r
		}
		return nil
	})
}

// New returns a Metrics with all its collectors, registered nowhere.
func New() *Metrics { return &Metrics{r: observe.NewRecorder()} }

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	if m != nil {
		m.r.Describe(ch)
	}
}

// Collect implements prometheus.Collector. It reads every cache's counters
// at the time of the scrape.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	if m != nil {
		m.r.Collect(ch)
	}
}
