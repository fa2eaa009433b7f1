package authz_test

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
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/metrics"
)

// until spins until cond holds. It fails the test if early delivers a
// result first (the caller it watches gave up too soon for the test to
// prove anything) or after a minute, so that it never spins forever.
func until(t *testing.T, cond func() bool, early <-chan result) {
	t.Helper()
	limit := time.Now().Add(time.Minute)
	for !cond() {
		select {
		case r := <-early:
			t.Fatalf("the first caller returned (%v, %v) before the test could set up; the machine is too slow for its deadline", r.d, r.err)
		default:
		}
		if time.Now().After(limit) {
			t.Fatal("gave up waiting after a minute")
		}
		waitABit()
	}
}

// TestSharedReviewOutlivesFirstCallersDeadline (issue #11 item 9): the
// shared SAR is not bounded by the deadline of the caller that started it.
// A starts it with a short deadline, B joins with a long one; A's deadline
// passes (A gets 503); the API server answers later; B gets the answer,
// from the one SAR sent.
func TestSharedReviewOutlivesFirstCallersDeadline(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	f := newFixture(t, allowBackupPods, authz.Options{Metrics: m})
	release := f.srv.Block(authtest.SubjectAccessReviews)
	defer release()
	attrs := getPods(backup())

	short, cancelShort := context.WithTimeout(context.Background(), time.Second)
	defer cancelShort()
	a := make(chan result, 1)
	go func() {
		d, r, err := f.az.Authorize(short, attrs)
		a <- result{d, r, err}
	}()
	until(t, func() bool { return f.srv.InFlight(authtest.SubjectAccessReviews) > 0 }, a)
	long, cancelLong := context.WithTimeout(context.Background(), time.Minute)
	defer cancelLong()
	b := make(chan result, 1)
	go func() {
		d, r, err := f.az.Authorize(long, attrs)
		b <- result{d, r, err}
	}()
	until(t, func() bool {
		return metricValue(t, reg, "reviewauth_cache_coalesced_total", map[string]string{"cache": "sar"}) >= 1
	}, a)
	ra := <-a
	if ra.d == authorizer.DecisionAllow || !errors.Is(ra.err, reviewauth.ErrUnavailable) || !errors.Is(ra.err, context.DeadlineExceeded) {
		t.Fatalf("A (deadline passed) = %v, %v; want Deny and ErrUnavailable wrapping DeadlineExceeded", ra.d, ra.err)
	}
	release()
	rb := <-b
	if rb.d != authorizer.DecisionAllow || rb.err != nil {
		t.Fatalf("B (joined, longer deadline) = %v, %v; want Allow: the shared SAR must outlive A's deadline", rb.d, rb.err)
	}
	if n := f.sars(); n != 1 {
		t.Errorf("SARs = %d; want 1", n)
	}
}

// TestRetryAfterReleasesOnlyEarlyCallers: when the shared SAR must wait
// for a Retry-After, a caller whose deadline comes first leaves at once
// with the Retry-After, while a caller with a later deadline gets the
// answer of the retry.
func TestRetryAfterReleasesOnlyEarlyCallers(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	f := newFixture(t, allowBackupPods, authz.Options{Metrics: m})
	f.srv.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{Status: http.StatusTooManyRequests, RetryAfter: 5 * time.Second, Times: 1})
	release := f.srv.Block(authtest.SubjectAccessReviews)
	attrs := getPods(backup())

	short, cancelShort := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancelShort()
	a := make(chan result, 1)
	go func() {
		d, r, err := f.az.Authorize(short, attrs)
		a <- result{d, r, err}
	}()
	until(t, func() bool { return f.srv.InFlight(authtest.SubjectAccessReviews) > 0 }, a)
	b := make(chan result, 1)
	go func() {
		d, r, err := f.az.Authorize(context.Background(), attrs)
		b <- result{d, r, err}
	}()
	until(t, func() bool {
		return metricValue(t, reg, "reviewauth_cache_coalesced_total", map[string]string{"cache": "sar"}) >= 1
	}, a)
	release() // the 429, asking for 5s: after A's deadline
	ra := <-a
	if d, ok := reviewauth.RetryAfter(ra.err); ra.d == authorizer.DecisionAllow || !ok || d != 5*time.Second || errors.Is(ra.err, context.DeadlineExceeded) {
		t.Fatalf("A (deadline before the retry) = %v, %v; want at once a ReviewError with Retry-After 5s", ra.d, ra.err)
	}
	// The retry waits on the fake clock.
	var rb result
	for waiting := true; waiting; {
		select {
		case rb = <-b:
			waiting = false
		default:
			if f.clock.HasWaiters() {
				f.clock.Step(5 * time.Second)
			}
			waitABit()
		}
	}
	if rb.d != authorizer.DecisionAllow || rb.err != nil {
		t.Fatalf("B (no deadline) = %v, %v; want Allow after the retry", rb.d, rb.err)
	}
	if n := f.sars(); n != 2 {
		t.Errorf("SARs = %d; want 2", n)
	}
}

// TestSARHTTP2StreamResetsAreRetried (issue #11 item 16).
func TestSARHTTP2StreamResetsAreRetried(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t, authtest.WithHTTP2())
	srv.SetPolicy(allowBackupPods)
	az, err := authz.NewForConfig(srv.Config(), authz.Options{Backoff: wait.Backoff{Duration: time.Nanosecond, Steps: 4}})
	if err != nil {
		t.Fatal(err)
	}
	srv.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{DropConnection: true, Times: 2})
	if d, _, err := az.Authorize(context.Background(), getPods(backup())); d != authorizer.DecisionAllow || err != nil {
		t.Fatalf("Authorize() after 2 stream resets = %v, %v; want Allow", d, err)
	}
	if n := srv.Count(authtest.SubjectAccessReviews); n != 3 {
		t.Errorf("SARs = %d; want 3", n)
	}
}

// TestSARAttemptTimeout (issue #11 item 10). Over HTTP/2 with a warm
// connection, so that every attempt reaches the server within its timeout
// on a loaded machine (a cut attempt resets only its stream).
func TestSARAttemptTimeout(t *testing.T) {
	t.Parallel()
	const attemptTimeout = 250 * time.Millisecond
	srv := authtest.Start(t, authtest.WithHTTP2())
	srv.SetPolicy(allowBackupPods)
	clk := clocktesting.NewFakeClock(time.Now())
	az, err := authz.NewForConfig(srv.Config(), authz.Options{Clock: clk, AttemptTimeout: attemptTimeout, Backoff: wait.Backoff{Duration: time.Second, Factor: 1, Steps: 2}})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv, clock: clk, az: az}
	f.az.Authorize(context.Background(), withName(getPods(backup()), "warm-up"))
	srv.Reset()
	release := f.srv.Block(authtest.SubjectAccessReviews)
	defer release()
	start := time.Now()
	r := f.authorizeStepping(context.Background(), getPods(backup()), time.Second)
	var re *reviewauth.ReviewError
	if r.d == authorizer.DecisionAllow || !errors.As(r.err, &re) || re.Attempts != 3 {
		t.Fatalf("Authorize() = %v, %v; want Deny and a ReviewError after 3 attempts", r.d, r.err)
	}
	// Each attempt was sent; on a loaded machine one may be cut before
	// the server's handler starts, so the server may count fewer.
	if n := f.sars(); n < 1 || n > 3 {
		t.Errorf("SARs = %d; want 1 to 3", n)
	}
	if elapsed := time.Since(start); elapsed >= authz.DefaultTimeout/2 {
		t.Errorf("Authorize() took %v; want about 3 x %v", elapsed, attemptTimeout)
	}
}

// TestSARCacheCountsEachLookupOnce (issue #11 item 12).
func TestSARCacheCountsEachLookupOnce(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	f := newFixture(t, allowBackupPods, authz.Options{Metrics: m})
	for range 2 {
		f.az.Authorize(context.Background(), getPods(backup()))
	}
	sar := map[string]string{"cache": "sar"}
	if h, mi := metricValue(t, reg, "reviewauth_cache_hits_total", sar), metricValue(t, reg, "reviewauth_cache_misses_total", sar); h != 1 || mi != 1 {
		t.Errorf("sar cache: hits %v, misses %v after a miss and a hit; want 1, 1", h, mi)
	}
}

// TestMetricsLetGoOfDroppedAuthorizers (issue #11 item 13).
func TestMetricsLetGoOfDroppedAuthorizers(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	srv.SetPolicy(allowBackupPods)
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	wp := func() weak.Pointer[authz.Authorizer] {
		az, err := authz.NewForConfig(srv.Config(), authz.Options{Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		az.Authorize(context.Background(), getPods(backup()))
		return weak.Make(az)
	}()
	// Bounded: the goroutine that ran the shared review may still have to
	// be scheduled to return on a loaded machine.
	for i := 0; wp.Value() != nil; i++ {
		if i == 1000 {
			buf := make([]byte, 1<<20)
			t.Fatalf("the Authorizer is still reachable after 1000 GCs: metrics keep it alive\n%s", buf[:runtime.Stack(buf, true)])
		}
		runtime.GC()
		runtime.Gosched()
	}
	sar := map[string]string{"cache": "sar"}
	if mi, e := metricValue(t, reg, "reviewauth_cache_misses_total", sar), metricValue(t, reg, "reviewauth_cache_entries", sar); mi != 1 || e != 0 {
		t.Errorf("after collection: misses %v, entries %v; want 1, 0", mi, e)
	}
}

// TestSARCredentialRefusal (issue #11 item 8).
func TestSARCredentialRefusal(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t, authtest.WithAdminUser("system:serviceaccount:kube-system:metrics-proxy"))
	srv.SetPolicy(allowBackupPods)
	srv.SetAdminPolicy(authtest.Rules())
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	az, err := authz.NewForConfig(srv.Config(), authz.Options{Metrics: m, Clock: clocktesting.NewFakeClock(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []string
	ctx := klog.NewContext(context.Background(), funcr.New(func(_, args string) {
		mu.Lock()
		lines = append(lines, args)
		mu.Unlock()
	}, funcr.Options{}))
	for range 2 {
		d, _, err := az.Authorize(ctx, getPods(backup()))
		var re *reviewauth.ReviewError
		if d == authorizer.DecisionAllow || !errors.As(err, &re) || re.Code != http.StatusForbidden || !errors.Is(err, reviewauth.ErrRefused) {
			t.Fatalf("Authorize() = %v, %v; want Deny and a 403 ReviewError matching ErrRefused", d, err)
		}
	}
	if n := srv.Count(authtest.SubjectAccessReviews); n != 2 {
		t.Errorf("SARs = %d; want 2 (neither retried nor cached)", n)
	}
	if got := metricValue(t, reg, "reviewauth_review_credential_refusals_total", map[string]string{"review": "SubjectAccessReview"}); got != 2 {
		t.Errorf("reviewauth_review_credential_refusals_total = %v; want 2", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 1 || !strings.Contains(lines[0], "system:auth-delegator") || !strings.Contains(lines[0], "metrics-proxy") {
		t.Errorf("log lines = %q; want one naming system:auth-delegator and the identity", lines)
	}
}

// TestSAROversizedAnswer (issue #11 item 17): at the limit accepted, one
// byte more (or 20 MB) is "could not check", not retried, not cached.
func TestSAROversizedAnswer(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		extra int
		ok    bool
	}{{"at the limit", 0, true}, {"one byte over", 1, false}, {"20 MB", -1, false}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, allowBackupPods, authz.Options{})
			attrs := getPods(backup())
			// Learn the exact review sent, as the client encodes it.
			f.az.Authorize(context.Background(), withName(attrs, "learn"))
			spec := f.srv.SubjectAccessReviews()[0].Spec
			spec.ResourceAttributes.Name = attrs.Name
			sent, err := json.Marshal(&authorizationv1.SubjectAccessReview{
				TypeMeta: metav1.TypeMeta{Kind: "SubjectAccessReview", APIVersion: "authorization.k8s.io/v1"}, Spec: spec})
			if err != nil {
				t.Fatal(err)
			}
			size := len(sent) + reviewauth.MaxAnswerBytes + tt.extra
			if tt.extra < 0 {
				size = 20 << 20
			}
			f.srv.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{BodyBytes: size, Times: 1})
			d, _, err := f.az.Authorize(context.Background(), attrs)
			if tt.ok {
				if d != authorizer.DecisionAllow || err != nil {
					t.Fatalf("Authorize() with a %d-byte answer = %v, %v; want Allow", size, d, err)
				}
				return
			}
			var re *reviewauth.ReviewError
			if d == authorizer.DecisionAllow || !errors.As(err, &re) || re.Attempts != 1 {
				t.Fatalf("Authorize() with a %d-byte answer = %v, %v; want Deny and a ReviewError after 1 attempt", size, d, err)
			}
			if d, _, err := f.az.Authorize(context.Background(), attrs); d != authorizer.DecisionAllow || err != nil {
				t.Errorf("Authorize() after the oversized answer = %v, %v; want Allow (nothing cached)", d, err)
			}
		})
	}
}

func withName(a authorizer.AttributesRecord, name string) authorizer.AttributesRecord {
	a.Name = name
	return a
}

// TestSelfCheck (issue #11 item 8).
func TestSelfCheck(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t, authtest.WithAdminUser("system:serviceaccount:kube-system:metrics-proxy"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := authz.SelfCheck(ctx, srv.Config()); err != nil {
		t.Fatalf("SelfCheck() = %v; want nil", err)
	}
	// May create TokenReviews only.
	srv.SetAdminPolicy(func(spec authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
		return spec.ResourceAttributes.Resource == "tokenreviews", false, "", ""
	})
	err := authz.SelfCheck(ctx, srv.Config())
	const want = `authz: self-check: user "system:serviceaccount:kube-system:metrics-proxy" may not create subjectaccessreviews.authorization.k8s.io; it needs the system:auth-delegator ClusterRole`
	if !errors.Is(err, reviewauth.ErrRefused) || errors.Is(err, reviewauth.ErrUnavailable) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("SelfCheck() = %v; want ErrRefused: %q", err, want)
	}
	srv.Close()
	if err := authz.SelfCheck(ctx, srv.Config()); !errors.Is(err, reviewauth.ErrUnavailable) || errors.Is(err, reviewauth.ErrRefused) {
		t.Fatalf("SelfCheck() with the API server gone = %v; want ErrUnavailable", err)
	}
}
