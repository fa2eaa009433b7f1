package reliability_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/metrics"
)

// serveThing calls h in process for GET /things/<name> with token, and
// returns the status code.
func serveThing(h http.Handler, token, name string) int {
	r := httptest.NewRequest(http.MethodGet, "/things/"+name, nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// staleServes reads reviewauth_stale_serves_total{cache="token"} from reg.
func staleServes(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	return staleServesOf(t, reg, "token")
}

// staleServesOf reads reviewauth_stale_serves_total{cache=cache} from reg.
func staleServesOf(t *testing.T, reg *prometheus.Registry, cache string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() = %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "reviewauth_stale_serves_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cache" && l.GetValue() == cache {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestStaleIfErrorThroughMiddleware drives authn's opt-in stale-if-error
// end to end through the HTTP middleware, on a fake clock, during an outage
// of both reviews:
//
//   - a token allowed before the outage is served past its SuccessTTL for
//     less than StaleIfError, and counted as a stale serve;
//   - at exactly SuccessTTL+StaleIfError it is 503: the grace is bounded;
//   - a token that was rejected before the outage (revoked) is never served:
//     401 while its rejection is cached, then 503, never 200;
//   - a token never seen before is 503;
//   - once the API server is back, the stale token is reviewed again.
//
// The SubjectAccessReview of the pair stays cached (AllowedTTL is longer than
// the whole outage here); TestStaleIfErrorPairs covers authz's own
// stale-if-error.
func TestStaleIfErrorThroughMiddleware(t *testing.T) {
	t.Parallel()
	const ttl, grace = time.Minute, 30 * time.Second
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	s := authtest.Start(t, authtest.WithClock(clk))
	s.SetPolicy(policy)
	m := metrics.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	st := newStack(t, s,
		authn.Options{SuccessTTL: ttl, StaleIfError: grace, Clock: clk, Metrics: m, Backoff: noRetries},
		authz.Options{AllowedTTL: time.Hour, Clock: clk, Backoff: noRetries})
	var handled atomic.Int64
	h := st.handler(t, &handled)
	exp := start.Add(24 * time.Hour)
	kept := s.MintToken(clientSA, []string{audience}, exp)
	revoked := s.MintToken(clientSA, []string{audience}, exp)

	for _, tok := range []string{kept, revoked} {
		if code := serveThing(h, tok, "thing-1"); code != http.StatusOK {
			t.Fatalf("before the outage: code = %d; want 200", code)
		}
	}
	// The second token is revoked, and the rejection is seen once its
	// identity is stale: it is 401 and its stale identity is dropped.
	s.RevokeToken(revoked)
	clk.SetTime(start.Add(ttl + time.Second))
	if code := serveThing(h, revoked, "thing-1"); code != http.StatusUnauthorized {
		t.Fatalf("revoked token after its TTL: code = %d; want 401", code)
	}

	s.InjectFault(authtest.TokenReviews, authtest.Fault{Status: 503})
	s.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{Status: 503})
	never := s.MintToken(clientSA, []string{audience}, exp)
	steps := []struct {
		name    string
		at      time.Duration
		token   string
		want    int
		wantNew float64 // stale serves this step adds
	}{
		{"allowed token, stale, in the grace", ttl + time.Second, kept, http.StatusOK, 1},
		{"rejected token, rejection cached", ttl + time.Second, revoked, http.StatusUnauthorized, 0},
		{"token never seen", ttl + time.Second, never, http.StatusServiceUnavailable, 0},
		{"allowed token, 1ns before the grace ends", ttl + grace - time.Nanosecond, kept, http.StatusOK, 1},
		{"rejected token, rejection expired: not extended", ttl + grace - time.Nanosecond, revoked, http.StatusServiceUnavailable, 0},
		{"allowed token, at the grace's end", ttl + grace, kept, http.StatusServiceUnavailable, 0},
		{"allowed token, past the grace", ttl + grace + time.Hour/2, kept, http.StatusServiceUnavailable, 0},
		{"rejected token, past the grace", ttl + grace + time.Hour/2, revoked, http.StatusServiceUnavailable, 0},
	}
	var total float64
	for _, tt := range steps {
		clk.SetTime(start.Add(tt.at))
		before := handled.Load()
		code := serveThing(h, tt.token, "thing-1")
		if code != tt.want {
			t.Errorf("%s (+%v): code = %d; want %d", tt.name, tt.at, code, tt.want)
		}
		if ran := handled.Load() - before; (ran == 1) != (tt.want == http.StatusOK) {
			t.Errorf("%s: handler ran %d times for code %d", tt.name, ran, code)
		}
		total += tt.wantNew
		if got := staleServes(t, reg); got != total {
			t.Errorf("%s: stale serves = %v; want %v", tt.name, got, total)
		}
	}

	// The API server is back: the token is reviewed again, not served stale.
	s.ClearFaults()
	s.Reset()
	if code := serveThing(h, kept, "thing-1"); code != http.StatusOK {
		t.Errorf("after the outage: code = %d; want 200", code)
	}
	if n := s.Count(authtest.TokenReviews); n != 1 {
		t.Errorf("TokenReviews after the outage = %d; want 1", n)
	}
	if got := staleServes(t, reg); got != total {
		t.Errorf("stale serves after the outage = %v; want %v", got, total)
	}
	checkLogs(t)
}

// TestStaleIfErrorPairs drives stale-if-error of (token, attributes) pairs
// through the HTTP middleware, with authn and authz both opted in, on a fake
// clock: during an outage of both reviews, an Allow is served for less than
// authz's StaleIfError past its AllowedTTL and not at its end; a denial is
// never extended (503 once its DeniedTTL ends); and an Allow that a fresh
// answer turned into a denial before the outage is never served again.
func TestStaleIfErrorPairs(t *testing.T) {
	t.Parallel()
	const ttl, grace, deniedTTL = time.Minute, 30 * time.Second, 10 * time.Second
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	s := authtest.Start(t, authtest.WithClock(clk))
	var revokeThing2 atomic.Bool // a RoleBinding edit: thing-2 is denied from now on
	s.SetPolicy(func(spec authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
		if revokeThing2.Load() && spec.ResourceAttributes != nil && spec.ResourceAttributes.Name == "thing-2" {
			return false, true, "reliability: thing-2 revoked", ""
		}
		return policy(spec)
	})
	m := metrics.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	st := newStack(t, s,
		authn.Options{SuccessTTL: ttl, StaleIfError: grace, Clock: clk, Metrics: m, Backoff: noRetries},
		authz.Options{AllowedTTL: ttl, DeniedTTL: deniedTTL, StaleIfError: grace, Clock: clk, Metrics: m, Backoff: noRetries})
	var handled atomic.Int64
	h := st.handler(t, &handled)
	tok := s.MintToken(clientSA, []string{audience}, start.Add(24*time.Hour))
	for _, tt := range []struct {
		name string
		want int
	}{{"thing-1", http.StatusOK}, {"thing-2", http.StatusOK}, {"deny-1", http.StatusForbidden}} {
		if code := serveThing(h, tok, tt.name); code != tt.want {
			t.Fatalf("before the outage, %s: code = %d; want %d", tt.name, code, tt.want)
		}
	}
	// Past the TTLs, with the API server up: thing-2 is asked again and
	// now denied (the token is reviewed again too).
	clk.SetTime(start.Add(ttl + time.Second))
	revokeThing2.Store(true)
	if code := serveThing(h, tok, "thing-2"); code != http.StatusForbidden {
		t.Fatalf("thing-2 after the RoleBinding edit: code = %d; want 403", code)
	}

	s.InjectFault(authtest.TokenReviews, authtest.Fault{Status: 503})
	s.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{Status: 503})
	steps := []struct {
		name    string
		at      time.Duration
		thing   string
		want    int
		wantSAR float64 // stale SAR serves so far
	}{
		{"stale Allow in the grace", ttl + 2*time.Second, "thing-1", http.StatusOK, 1},
		{"fresh denial replaced the Allow: cached denial", ttl + 2*time.Second, "thing-2", http.StatusForbidden, 1},
		{"expired denial: not extended", ttl + 2*time.Second, "deny-1", http.StatusServiceUnavailable, 1},
		{"replaced Allow, denial expired: not served", ttl + time.Second + deniedTTL, "thing-2", http.StatusServiceUnavailable, 1},
		{"stale Allow 1ns before the grace ends", ttl + grace - time.Nanosecond, "thing-1", http.StatusOK, 2},
		{"stale Allow at the grace's end", ttl + grace, "thing-1", http.StatusServiceUnavailable, 2},
	}
	for _, tt := range steps {
		clk.SetTime(start.Add(tt.at))
		if code := serveThing(h, tok, tt.thing); code != tt.want {
			t.Errorf("%s (%s at +%v): code = %d; want %d", tt.name, tt.thing, tt.at, code, tt.want)
		}
		if got := staleServesOf(t, reg, "sar"); got != tt.wantSAR {
			t.Errorf("%s: SAR stale serves = %v; want %v", tt.name, got, tt.wantSAR)
		}
	}
	// The identity itself was fresh throughout (reviewed again at +61s).
	if got := staleServesOf(t, reg, "token"); got != 0 {
		t.Errorf("token stale serves = %v; want 0", got)
	}
	checkLogs(t)
}

// noRetries turns retries off: with a fake clock, a retry would wait for a
// clock that never moves.
var noRetries = wait.Backoff{Steps: -1}
