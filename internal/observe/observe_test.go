package observe_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/reviewauth/reviewauth/internal/cache"
	"github.com/reviewauth/reviewauth/internal/observe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNilIsANoOp: a nil *Recorder records nothing and never panics, so that
// packages can call it unconditionally.
func TestNilIsANoOp(t *testing.T) {
	var m *observe.Recorder
	m.ReviewAttempt("TokenReview", 201, time.Millisecond)
	m.ReviewRetry("TokenReview")
	m.ReviewInFlight("TokenReview", 1)
	m.Decision("http", observe.OutcomeAllowed)
	m.StaleServe("token")
	m.AddCache("token", cache.New[int](cache.Options{}).Counters())
	m.CredentialRefusal("TokenReview")
	m.RevocationSynced(true)
	m.Revoked("pods", 1)
	m.DecisionsFlushed("all", 1)
	m.RevocationResync("pods", "relist")
}

// TestNamesFollowConventions lints every metric with Prometheus' own linter
// and registers on a pedantic registry.
func TestNamesFollowConventions(t *testing.T) {
	m := observe.NewRecorder()
	m.ReviewAttempt("TokenReview", 201, 3*time.Millisecond)
	m.CredentialRefusal("TokenReview")
	m.JWKSAvailable(false)
	m.Connections("admitted", 1)
	m.ConnectionClosed("evicted", "silent")
	m.RevocationSynced(false)
	m.Revoked("pods", 2)
	m.DecisionsFlushed("user", 3)
	m.RevocationResync("clusterroles", "stalled")
	c := cache.New[int](cache.Options{})
	c.Get(cache.Key{1})
	c.Counters().AddCoalesced(2)
	m.AddCache("token", c.Counters())
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

// TestCachesWithOneNameAreSummed: two authenticators report one series.
func TestCachesWithOneNameAreSummed(t *testing.T) {
	m := observe.NewRecorder()
	// The first: 2 hits, 1 miss, 3 entries, 1 coalesced.
	a := cache.New[int](cache.Options{MaxEntries: 8})
	for i := range 3 {
		a.Set(cache.Key{byte(i)}, i, time.Hour)
	}
	a.Get(cache.Key{0})
	a.Get(cache.Key{1})
	a.Get(cache.Key{9})
	a.Counters().AddCoalesced(1)
	// The second: 5 hits, 4 evictions, 1 entry, 2 coalesced.
	b := cache.New[int](cache.Options{MaxEntries: 1})
	for i := range 5 {
		b.Set(cache.Key{byte(i)}, i, time.Hour)
	}
	for range 5 {
		b.Get(cache.Key{4})
	}
	b.Counters().AddCoalesced(2)
	m.AddCache("token", a.Counters())
	m.AddCache("token", b.Counters())
	want := `
# HELP reviewauth_cache_hits_total Lookups that found a live entry, by cache. Includes the final counts of collected caches.
# TYPE reviewauth_cache_hits_total counter
reviewauth_cache_hits_total{cache="token"} 7
# HELP reviewauth_cache_evictions_total Live entries dropped to make room, by cache. Includes the final counts of collected caches.
# TYPE reviewauth_cache_evictions_total counter
reviewauth_cache_evictions_total{cache="token"} 4
# HELP reviewauth_cache_entries Entries held now, by cache, in caches still in use.
# TYPE reviewauth_cache_entries gauge
reviewauth_cache_entries{cache="token"} 4
# HELP reviewauth_cache_coalesced_total Lookups that waited for a review another caller had started instead of sending their own, by cache. Includes the final counts of collected caches.
# TYPE reviewauth_cache_coalesced_total counter
reviewauth_cache_coalesced_total{cache="token"} 3
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "reviewauth_cache_hits_total", "reviewauth_cache_evictions_total", "reviewauth_cache_entries", "reviewauth_cache_coalesced_total"); err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
}

func TestLatencyBucketsStartAt1ms(t *testing.T) {
	if observe.Buckets[0] != 0.001 {
		t.Fatalf("first bucket = %v; want 0.001 (1 ms)", observe.Buckets[0])
	}
}
