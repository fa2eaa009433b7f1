// Package observe records what reviewauth does, for package metrics to
// expose: the Prometheus collectors, and the calls authn, authz, httpauth,
// grpcauth and internal/review make to count reviews, retries, refusals,
// decisions, stale serves and caches. It is internal so that a service
// author sees only metrics.Metrics, a prometheus.Collector, and passes it
// to the Options of each package; the packages reach its Recorder through
// [Of], which package metrics installs.
package observe

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewauth/reviewauth/internal/cache"
)

// Outcomes of a request decided by a transport adapter, the values of the
// outcome label of reviewauth_decisions_total.
const (
	OutcomeAllowed         = "allowed"
	OutcomeDenied          = "denied"
	OutcomeUnauthenticated = "unauthenticated"
	OutcomeUnavailable     = "unavailable"
	// OutcomeBadRequest is a request refused before authorization because
	// it could not be mapped to attributes (a bad path, a missing field).
	OutcomeBadRequest = "bad_request"
	// OutcomeAlwaysAllowed is a request to an always-allow path, served
	// without authentication or authorization.
	OutcomeAlwaysAllowed = "always_allowed"
)

// buckets are the review latency buckets, in seconds: from 1ms, where a
// review on loopback lands, to 10s, the default review budget.
var buckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Recorder holds every reviewauth metric: what metrics.Metrics collects,
// and what authn, authz, httpauth and grpcauth record into. It is safe for
// concurrent use; its methods do nothing on a nil receiver.
type Recorder struct {
	reviews     *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	retries     *prometheus.CounterVec
	inFlight    *prometheus.GaugeVec
	decisions   *prometheus.CounterVec
	staleServes *prometheus.CounterVec
	refusals    *prometheus.CounterVec
	jwks        prometheus.Gauge
	jwksSet     atomic.Bool // jwks has been set: collect it
	conns       *prometheus.GaugeVec
	connsClosed *prometheus.CounterVec

	// The revoker's (package revocation): revSynced is collected once set.
	revSynced    prometheus.Gauge
	revSyncedSet atomic.Bool
	revocations  *prometheus.CounterVec
	revFlushes   *prometheus.CounterVec
	revResyncs   *prometheus.CounterVec

	// decided holds the decision counters of the known transports and
	// outcomes, resolved once: a request pays a map read, not a label hash.
	decided map[[2]string]prometheus.Counter

	mu      sync.Mutex
	caches  []namedCache
	retired map[string]cache.Stats // final counts of collected caches, by name
	names   []string               // every name ever added, in order

	cacheHits, cacheMisses, cacheEvictions, cacheExpired, cacheEntries, coalesced *prometheus.Desc

	keyPRF *prometheus.Desc // reviewauth_cache_key_prf_info: cache.PRF()
}

type namedCache struct {
	name     string
	counters *cache.Counters
}

// retiredToo ends the help of the cache counters.
const retiredToo = " Includes the final counts of collected caches."

// counters returns a counter vector.
func counters(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// cacheDesc describes a metric of the caches, labelled by cache name.
func cacheDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, []string{"cache"}, nil)
}

// NewRecorder returns a Recorder with all its collectors.
func NewRecorder() *Recorder {
	m := &Recorder{
		reviews: counters("reviewauth_reviews_total",
			"Requests sent to the API server, by review (TokenReview, SubjectAccessReview) and HTTP code (0: no answer).", "review", "code"),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "reviewauth_review_duration_seconds",
			Help: "Latency of each request sent to the API server, by review.", Buckets: buckets}, []string{"review"}),
		retries: counters("reviewauth_review_retries_total", "Retries of failed reviews, by review.", "review"),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "reviewauth_reviews_in_flight",
			Help: "Requests to the API server in flight now, by review."}, []string{"review"}),
		decisions: counters("reviewauth_decisions_total",
			"Requests decided by a transport adapter, by transport (http, grpc) and outcome (allowed, denied, unauthenticated, unavailable).", "transport", "outcome"),
		staleServes: counters("reviewauth_stale_serves_total",
			"Allowed results served past their TTL because the API server was unavailable (stale-if-error), by cache.", "cache"),
		refusals: counters("reviewauth_review_credential_refusals_total",
			"Reviews the API server refused to perform for this service (HTTP 401 or 403: its own credentials are invalid or lack the system:auth-delegator ClusterRole), by review.", "review"),
		cacheHits:      cacheDesc("reviewauth_cache_hits_total", "Lookups that found a live entry, by cache."+retiredToo),
		cacheMisses:    cacheDesc("reviewauth_cache_misses_total", "Lookups that found no live entry, by cache."+retiredToo),
		cacheEvictions: cacheDesc("reviewauth_cache_evictions_total", "Live entries dropped to make room, by cache."+retiredToo),
		cacheExpired:   cacheDesc("reviewauth_cache_expired_total", "Expired entries dropped, by cache."+retiredToo),
		cacheEntries:   cacheDesc("reviewauth_cache_entries", "Entries held now, by cache, in caches still in use."),
		coalesced: cacheDesc("reviewauth_cache_coalesced_total",
			"Lookups that waited for a review another caller had started instead of sending their own, by cache."+retiredToo),
		jwks: prometheus.NewGauge(prometheus.GaugeOpts{Name: "reviewauth_jwks_preverify_available",
			Help: "1 when the cluster's service-account key set was read at the last try and tokens are pre-verified against it; 0 when it could not be read (every token is then reviewed). Absent without pre-verification."}),
		conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "reviewauth_connections",
			Help: "Client connections of servers of package serving: admitted (at most the budget), waiting (accepted, not admitted yet), and parked (past the rapid-reset bound, outside the budget: at most the budget)."}, []string{"state"}),
		connsClosed: counters("reviewauth_connections_closed_total",
			"Client connections a server of package serving closed to make room (evicted), past a timeout shrunk by pressure (timeout), past the rapid-reset bound (rapid_reset), or after 8 refused requests and none served (refused), by reason and by the stage the connection was in.", "reason", "stage"),
		revSynced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "reviewauth_revocation_synced",
			Help: "1 when every watch of the revoker (package revocation) has listed and heard from the API server within its stall timeout since its last error: deletions and RBAC changes are acted on within seconds; 0 otherwise (cached identities and decisions then live their TTLs). Absent without a revoker."}),
		revocations: counters("reviewauth_revocations_total",
			"UIDs whose cached identities the revoker revoked, by the resource deleted (pods, serviceaccounts, nodes).", "resource"),
		revFlushes: counters("reviewauth_revocation_decision_flushes_total",
			"Flushes of cached authorization decisions the revoker made on RBAC changes, by scope (user: the decisions of one user; all), second flushes included.", "scope"),
		revResyncs: counters("reviewauth_revocation_resyncs_total",
			"Times the revoker listed a resource again after its first list (relist: a watch error or an expired resource version; then it revokes what disappeared and flushes every decision), or gave up on a watch that delivered nothing past its stall timeout (stalled), by resource and reason.", "resource", "reason"),
		keyPRF: prometheus.NewDesc("reviewauth_cache_key_prf_info",
			"The keyed hash cache keys are derived with in this process (cache.PRF): sha256 or blake2b; always 1.", []string{"prf"}, nil),
	}
	m.decided = make(map[[2]string]prometheus.Counter)
	for _, t := range []string{"http", "grpc"} {
		for _, o := range []string{OutcomeAllowed, OutcomeDenied, OutcomeUnauthenticated, OutcomeUnavailable, OutcomeBadRequest, OutcomeAlwaysAllowed} {
			m.decided[[2]string{t, o}] = m.decisions.WithLabelValues(t, o)
		}
	}
	return m
}

// vecs are the collectors a Recorder holds, apart from the cache metrics
// it computes at scrape time.
func (m *Recorder) vecs() []prometheus.Collector {
	cs := []prometheus.Collector{m.reviews, m.latency, m.retries, m.inFlight, m.decisions, m.staleServes, m.refusals, m.conns, m.connsClosed,
		m.revocations, m.revFlushes, m.revResyncs}
	if m.jwksSet.Load() {
		cs = append(cs, m.jwks)
	}
	if m.revSyncedSet.Load() {
		cs = append(cs, m.revSynced)
	}
	return cs
}

// Describe implements prometheus.Collector.
func (m *Recorder) Describe(ch chan<- *prometheus.Desc) {
	if m == nil {
		return
	}
	for _, c := range m.vecs() {
		c.Describe(ch)
	}
	if !m.jwksSet.Load() {
		m.jwks.Describe(ch)
	}
	if !m.revSyncedSet.Load() {
		m.revSynced.Describe(ch)
	}
	for _, d := range []*prometheus.Desc{m.cacheHits, m.cacheMisses, m.cacheEvictions, m.cacheExpired, m.cacheEntries, m.coalesced, m.keyPRF} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Recorder) Collect(ch chan<- prometheus.Metric) {
	if m == nil {
		return
	}
	for _, c := range m.vecs() {
		c.Collect(ch)
	}
	ch <- prometheus.MustNewConstMetric(m.keyPRF, prometheus.GaugeValue, 1, cache.PRF())
	// Several caches may share a name (two authenticators); sum them, with
	// the retired totals of the collected ones.
	m.mu.Lock()
	m.retireLocked()
	by := make(map[string]cache.Stats, len(m.names))
	for name, st := range m.retired {
		by[name] = st
	}
	for _, c := range m.caches {
		by[c.name] = add(by[c.name], c.counters.Stats())
	}
	names := m.names
	m.mu.Unlock()
	for _, name := range names {
		s := by[name]
		ch <- prometheus.MustNewConstMetric(m.cacheHits, prometheus.CounterValue, float64(s.Hits), name)
		ch <- prometheus.MustNewConstMetric(m.cacheMisses, prometheus.CounterValue, float64(s.Misses), name)
		ch <- prometheus.MustNewConstMetric(m.cacheEvictions, prometheus.CounterValue, float64(s.Evictions), name)
		ch <- prometheus.MustNewConstMetric(m.cacheExpired, prometheus.CounterValue, float64(s.Expired), name)
		ch <- prometheus.MustNewConstMetric(m.cacheEntries, prometheus.GaugeValue, float64(s.Entries), name)
		ch <- prometheus.MustNewConstMetric(m.coalesced, prometheus.CounterValue, float64(s.Coalesced), name)
	}
}

// retireLocked moves the final counts of collected caches into the retired
// totals and forgets the caches. A cache found live is reported live; once
// it is not, nothing can change its counts any more.
func (m *Recorder) retireLocked() {
	kept := m.caches[:0]
	for _, c := range m.caches {
		if c.counters.Live() {
			kept = append(kept, c)
			continue
		}
		st := c.counters.Stats()
		st.Entries = 0
		if m.retired == nil {
			m.retired = make(map[string]cache.Stats)
		}
		m.retired[c.name] = add(m.retired[c.name], st)
	}
	clear(m.caches[len(kept):])
	m.caches = kept
}

func add(a, b cache.Stats) cache.Stats {
	return cache.Stats{
		Hits: a.Hits + b.Hits, Misses: a.Misses + b.Misses, Evictions: a.Evictions + b.Evictions,
		Expired: a.Expired + b.Expired, Entries: a.Entries + b.Entries, Coalesced: a.Coalesced + b.Coalesced,
	}
}

// AddCache makes a cache's counters visible under the cache label name
// (token, token_rejected, sar). They are read at scrape time. A Recorder keeps
// c but not its cache: once the cache is garbage collected, its final
// counts join name's retired totals and it leaves the entries gauge. A nil
// c is ignored.
func (m *Recorder) AddCache(name string, c *cache.Counters) {
	if m == nil || c == nil {
		return
	}
	m.mu.Lock()
	m.retireLocked()
	m.caches = append(m.caches, namedCache{name: name, counters: c})
	if !slices.Contains(m.names, name) {
		m.names = append(slices.Clip(m.names), name)
	}
	m.mu.Unlock()
}

// CredentialRefusal records a review the API server refused to perform for
// this service: HTTP 401 (its credentials are invalid or expired) or 403
// (they lack the system:auth-delegator ClusterRole).
func (m *Recorder) CredentialRefusal(review string) {
	if m == nil {
		return
	}
	m.refusals.WithLabelValues(review).Inc()
}

// ReviewAttempt records one request to the API server: its HTTP code (0 for
// no answer) and its latency.
func (m *Recorder) ReviewAttempt(review string, code int, d time.Duration) {
	if m == nil {
		return
	}
	m.reviews.WithLabelValues(review, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(review).Observe(d.Seconds())
}

// ReviewRetry records a retry.
func (m *Recorder) ReviewRetry(review string) {
	if m == nil {
		return
	}
	m.retries.WithLabelValues(review).Inc()
}

// ReviewInFlight adds delta to the number of requests in flight.
func (m *Recorder) ReviewInFlight(review string, delta int) {
	if m == nil {
		return
	}
	m.inFlight.WithLabelValues(review).Add(float64(delta))
}

// Decision records one request decided by a transport adapter.
func (m *Recorder) Decision(transport, outcome string) {
	if m == nil {
		return
	}
	if c, ok := m.decided[[2]string{transport, outcome}]; ok {
		c.Inc()
		return
	}
	m.decisions.WithLabelValues(transport, outcome).Inc()
}

// StaleServe records an allowed result served past its TTL during an outage.
func (m *Recorder) StaleServe(cacheName string) {
	if m == nil {
		return
	}
	m.staleServes.WithLabelValues(cacheName).Inc()
}

// Connections adds delta to the connections in state ("admitted",
// "waiting", "parked").
func (m *Recorder) Connections(state string, delta int) {
	if m == nil {
		return
	}
	m.conns.WithLabelValues(state).Add(float64(delta))
}

// ConnectionClosed records a connection a server closed for reason, in
// stage.
func (m *Recorder) ConnectionClosed(reason, stage string) {
	if m == nil {
		return
	}
	m.connsClosed.WithLabelValues(reason, stage).Inc()
}

// JWKSAvailable records whether the last read of the cluster's key set for
// pre-verification succeeded.
func (m *Recorder) JWKSAvailable(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.jwks.Set(1)
	} else {
		m.jwks.Set(0)
	}
	m.jwksSet.Store(true)
}

// RevocationSynced records whether the revoker is in sync.
func (m *Recorder) RevocationSynced(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.revSynced.Set(1)
	} else {
		m.revSynced.Set(0)
	}
	m.revSyncedSet.Store(true)
}

// Revoked records n UIDs revoked on the deletion of resource.
func (m *Recorder) Revoked(resource string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.revocations.WithLabelValues(resource).Add(float64(n))
}

// DecisionsFlushed records a flush of cached decisions, of scope "user"
// (n users) or "all" (n is 1).
func (m *Recorder) DecisionsFlushed(scope string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.revFlushes.WithLabelValues(scope).Add(float64(n))
}

// RevocationResync records a relist of resource after its first list
// (reason "relist"), or a stalled watch given up (reason "stalled").
func (m *Recorder) RevocationResync(resource, reason string) {
	if m == nil {
		return
	}
	m.revResyncs.WithLabelValues(resource, reason).Inc()
}

// recorderOf is the accessor package metrics installs.
var recorderOf func(any) *Recorder

// Install sets the function [Of] uses to find the Recorder of a
// *metrics.Metrics. Package metrics calls it from its init; nothing else
// may.
func Install(of func(any) *Recorder) { recorderOf = of }

// Of returns the Recorder of m, a *metrics.Metrics, or nil (which records
// nothing) for a nil one.
func Of(m any) *Recorder {
	if recorderOf == nil || m == nil {
		return nil
	}
	return recorderOf(m)
}
