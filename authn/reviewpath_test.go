package authn_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/metrics"
)

// metricValue returns the value of the series name{labels} in reg, or -1.
func metricValue(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
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

// TestHTTP2StreamResetsAreRetried (issue #11 item 16): over HTTP/2, what
// client-go speaks to a real API server, a reset stream is retried as a
// reset HTTP/1.1 connection is.
func TestHTTP2StreamResetsAreRetried(t *testing.T) {
	t.Parallel()
	for _, h2 := range []bool{false, true} {
		var opts []authtest.Option
		if h2 {
			opts = append(opts, authtest.WithHTTP2())
		}
		srv := authtest.Start(t, opts...)
		a := newAuth(t, srv, authn.Options{Audiences: []string{aud}, Backoff: wait.Backoff{Duration: time.Nanosecond, Steps: 4}})
		tok := srv.MintToken(backup, []string{aud}, time.Time{})
		srv.InjectFault(authtest.TokenReviews, authtest.Fault{DropConnection: true, Times: 2})
		if _, ok, err := a.AuthenticateToken(context.Background(), tok); !ok || err != nil {
			t.Fatalf("HTTP/2=%v: AuthenticateToken() after 2 resets = (%v, %v); want success", h2, ok, err)
		}
		if n := srv.Count(authtest.TokenReviews); n != 3 {
			t.Errorf("HTTP/2=%v: TokenReviews = %d; want 3 (2 reset, 1 answered)", h2, n)
		}
	}
}

// TestAttemptTimeout (issue #11 item 10): a request that is accepted and
// never answered costs its attempt's timeout, not the review's budget; the
// retries get their share. Over HTTP/2 with a warm connection, so that
// every attempt reaches the server within its timeout on a loaded machine
// (a cut attempt resets only its stream).
func TestAttemptTimeout(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t, authtest.WithHTTP2())
	clk := clocktesting.NewFakeClock(time.Now())
	const attemptTimeout = 250 * time.Millisecond
	a := newAuth(t, srv, authn.Options{Audiences: []string{aud}, Clock: clk, AttemptTimeout: attemptTimeout,
		Backoff: wait.Backoff{Duration: time.Second, Factor: 1, Steps: 2}})
	a.AuthenticateToken(context.Background(), srv.MintToken(backup, []string{aud}, time.Time{})) // warm-up
	srv.Reset()
	release := srv.Block(authtest.TokenReviews) // accepted, never answered
	defer release()
	tok := srv.MintToken(backup, []string{aud}, time.Time{})
	stop := stepper(clk, time.Second) // the backoff waits on the fake clock
	start := time.Now()
	_, ok, err := a.AuthenticateToken(context.Background(), tok)
	elapsed := time.Since(start)
	stop()
	var re *reviewauth.ReviewError
	if ok || !errors.As(err, &re) || re.Attempts != 3 {
		t.Fatalf("AuthenticateToken() = (%v, %v); want a ReviewError after 3 attempts", ok, err)
	}
	// Each attempt was sent; on a loaded machine one may be cut before
	// the server's handler starts, so the server may count fewer.
	if n := srv.Count(authtest.TokenReviews); n < 1 || n > 3 {
		t.Errorf("TokenReviews = %d; want 1 to 3", n)
	}
	if elapsed >= authn.DefaultTimeout/2 {
		t.Errorf("AuthenticateToken() took %v; want about 3 x %v", elapsed, attemptTimeout)
	}
	if authn.DefaultAttemptTimeout != 3*time.Second {
		t.Errorf("DefaultAttemptTimeout = %v; want 3s", authn.DefaultAttemptTimeout)
	}
}

// TestCacheCountsEachLookupOnce (issue #11 item 12): one lookup is one hit
// or one miss, not a miss before the coalescing group and another inside.
func TestCacheCountsEachLookupOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		tokenAud string
		want     map[string][2]float64 // cache -> {hits, misses}
	}{
		{"accepted token: miss then hit", aud, map[string][2]float64{"token": {1, 1}, "token_rejected": {0, 1}}},
		{"rejected token: miss then hit", "other", map[string][2]float64{"token": {0, 2}, "token_rejected": {1, 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := authtest.Start(t)
			m := metrics.New()
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(m)
			a := newAuth(t, srv, authn.Options{Audiences: []string{aud}, Metrics: m})
			tok := srv.MintToken(backup, []string{tt.tokenAud}, time.Time{})
			for range 2 {
				a.AuthenticateToken(context.Background(), tok)
			}
			for cache, want := range tt.want {
				hits := metricValue(t, reg, "reviewauth_cache_hits_total", map[string]string{"cache": cache})
				misses := metricValue(t, reg, "reviewauth_cache_misses_total", map[string]string{"cache": cache})
				if hits != want[0] || misses != want[1] {
					t.Errorf("cache %s: hits %v, misses %v; want %v, %v", cache, hits, misses, want[0], want[1])
				}
			}
			if n := srv.Count(authtest.TokenReviews); n != 1 {
				t.Errorf("TokenReviews = %d; want 1", n)
			}
		})
	}
}

// TestMetricsLetGoOfDroppedAuthenticators (issue #13 item 13): an
// Authenticator that is no longer used (rebuilt on a reload) is collected
// with its caches although its metrics are registered; its counts stay in
// the counters, and its entries leave the gauge.
func TestMetricsLetGoOfDroppedAuthenticators(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	m := metrics.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	tok := srv.MintToken(backup, []string{aud}, time.Time{})
	use := func() *authn.Authenticator {
		a := newAuth(t, srv, authn.Options{Audiences: []string{aud}, Metrics: m})
		a.AuthenticateToken(context.Background(), tok) // miss
		a.AuthenticateToken(context.Background(), tok) // hit
		return a
	}
	tokenSeries := func(name string) float64 {
		return metricValue(t, reg, name, map[string]string{"cache": "token"})
	}
	a := use()
	if e := tokenSeries("reviewauth_cache_entries"); e != 1 {
		t.Fatalf("entries while in use = %v; want 1", e)
	}
	wp := weak.Make(a)
	runtime.KeepAlive(a) // a is not used past this point
	// Bounded: the goroutine that ran the shared review may still have to
	// be scheduled to return on a loaded machine.
	for i := 0; wp.Value() != nil; i++ {
		if i == 1000 {
			buf := make([]byte, 1<<20)
			t.Fatalf("the Authenticator is still reachable after 1000 GCs: metrics keep it alive\n%s", buf[:runtime.Stack(buf, true)])
		}
		runtime.GC()
		runtime.Gosched()
	}
	if h, mi, e := tokenSeries("reviewauth_cache_hits_total"), tokenSeries("reviewauth_cache_misses_total"), tokenSeries("reviewauth_cache_entries"); h != 1 || mi != 1 || e != 0 {
		t.Errorf("after collection: hits %v, misses %v, entries %v; want 1, 1, 0 (counts kept, entries gone)", h, mi, e)
	}
	// Its replacement adds to the same series: the counters never go back.
	a2 := use()
	if h, mi, e := tokenSeries("reviewauth_cache_hits_total"), tokenSeries("reviewauth_cache_misses_total"), tokenSeries("reviewauth_cache_entries"); h != 2 || mi != 2 || e != 1 {
		t.Errorf("with a replacement: hits %v, misses %v, entries %v; want 2, 2, 1", h, mi, e)
	}
	runtime.KeepAlive(a2)
}

// refusingPolicy is an administrator without system:auth-delegator.
func refusingPolicy(spec authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
	return false, false, "", ""
}

// TestCredentialRefusal (issue #11 item 8): the API server answering 403
// to the service's own TokenReview (no system:auth-delegator) is "could
// not check" for the caller, never cached, counted, and logged at the
// default level, naming what the service needs, once per interval.
func TestCredentialRefusal(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t, authtest.WithAdminUser("system:serviceaccount:csi:sidecar"))
	srv.SetAdminPolicy(refusingPolicy)
	m := metrics.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	clk := clocktesting.NewFakeClock(time.Now())
	a := newAuth(t, srv, authn.Options{Audiences: []string{aud}, Metrics: m, Clock: clk})
	var mu sync.Mutex
	var lines []string
	ctx := klog.NewContext(context.Background(), funcr.New(func(prefix, args string) {
		mu.Lock()
		lines = append(lines, args)
		mu.Unlock()
	}, funcr.Options{Verbosity: 0}))
	tok := srv.MintToken(backup, []string{aud}, time.Time{})
	for i := range 3 {
		_, ok, err := a.AuthenticateToken(ctx, tok)
		var re *reviewauth.ReviewError
		if ok || !errors.As(err, &re) || re.Code != http.StatusForbidden || !errors.Is(err, reviewauth.ErrRefused) || errors.Is(err, reviewauth.ErrUnauthenticated) {
			t.Fatalf("AuthenticateToken() #%d = (%v, %v); want a 403 ReviewError matching ErrRefused, not ErrUnauthenticated", i+1, ok, err)
		}
	}
	if n := srv.Count(authtest.TokenReviews); n != 3 {
		t.Errorf("TokenReviews = %d; want 3: a refusal is neither retried nor cached", n)
	}
	if got := metricValue(t, reg, "reviewauth_review_credential_refusals_total", map[string]string{"review": "TokenReview"}); got != 3 {
		t.Errorf("reviewauth_review_credential_refusals_total = %v; want 3", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 1 {
		t.Fatalf("log lines at V(0) = %d; want 1 (rate-limited):\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, want := range []string{"system:auth-delegator", "create tokenreviews.authentication.k8s.io", `User \"system:serviceaccount:csi:sidecar\" cannot create resource \"tokenreviews\"`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line lacks %q:\n%s", want, lines[0])
		}
	}
	// Fixed: reviews work again at once (nothing was cached).
	srv.SetAdminPolicy(nil)
	if _, ok, err := a.AuthenticateToken(ctx, tok); !ok || err != nil {
		t.Errorf("AuthenticateToken() once allowed = (%v, %v); want success", ok, err)
	}
}

// TestOversizedAnswer (issue #11 item 17): an answer is read up to
// MaxAnswerBytes past the size of the review sent; exactly that is
// accepted, one byte more (or 20 MB) is "could not check", not retried and
// not cached.
func TestOversizedAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		extra int // bytes past the limit; -1: none (20 MB)
		ok    bool
	}{
		{"at the limit", 0, true},
		{"one byte over", 1, false},
		{"20 MB", -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := authtest.Start(t)
			a := newAuth(t, srv, authn.Options{Audiences: []string{aud}})
			tok := srv.MintToken(backup, []string{aud}, time.Time{})
			// The review the client sends, as it encodes it.
			sent, err := json.Marshal(&authenticationv1.TokenReview{
				TypeMeta: metav1.TypeMeta{Kind: "TokenReview", APIVersion: "authentication.k8s.io/v1"},
				Spec:     authenticationv1.TokenReviewSpec{Token: tok, Audiences: []string{aud}},
			})
			if err != nil {
				t.Fatal(err)
			}
			size := len(sent) + reviewauth.MaxAnswerBytes + tt.extra
			if tt.extra < 0 {
				size = 20 << 20
			}
			srv.InjectFault(authtest.TokenReviews, authtest.Fault{BodyBytes: size, Times: 1})
			_, ok, err := a.AuthenticateToken(context.Background(), tok)
			if tt.ok {
				if !ok || err != nil {
					t.Fatalf("AuthenticateToken() with a %d-byte answer = (%v, %v); want success", size, ok, err)
				}
				if got := srv.TokenReviews()[0]; got.Spec.Token != tok {
					t.Fatal("the review sent differs from the one measured")
				}
				return
			}
			var re *reviewauth.ReviewError
			if ok || !errors.As(err, &re) || re.Attempts != 1 || errors.Is(err, reviewauth.ErrUnauthenticated) {
				t.Fatalf("AuthenticateToken() with a %d-byte answer = (%v, %v); want a ReviewError after 1 attempt", size, ok, err)
			}
			if _, ok, err := a.AuthenticateToken(context.Background(), tok); !ok || err != nil {
				t.Errorf("AuthenticateToken() after the oversized answer = (%v, %v); want success (nothing cached)", ok, err)
			}
		})
	}
}
