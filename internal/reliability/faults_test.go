package reliability_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
)

// retries is the Steps of the fault matrix: at most retries+1 attempts.
const retries = 2

// matrixBackoff retries at once, so that the matrix is fast; the schedule of
// backoffs itself is tested in authn and authz.
var matrixBackoff = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: retries}

// shortTimeout is the review budget of the cases whose answer never comes
// in time. authtest ends its delay as soon as the client goes away, so these
// cases take shortTimeout, not the delay.
const shortTimeout = 200 * time.Millisecond

// TestFaultMatrix injects every fault authtest knows into TokenReviews and
// SubjectAccessReviews, calls the protected operation through the HTTP
// middleware (loopback httptest server, real client) and the gRPC interceptor
// (bufconn), and checks that:
//
//   - the handler never runs (nothing is allowed or authenticated);
//   - the caller gets the code the library documents: 503 / Unavailable for
//     every failure to get a usable answer;
//   - the reviews sent are counted by the server and stay within the retry
//     bound (retries+1), exactly as the retry policy says for each fault;
//   - no error is cached: once the fault is cleared, the very same token
//     and attributes are allowed, and the review is asked again;
//   - the status never carries the token.
func TestFaultMatrix(t *testing.T) {
	t.Parallel()
	t.Cleanup(func() {
		checkLogs(t)
		if logs.lines.Load() == 0 {
			t.Errorf("no log line reached the leak detector; want the outages logged")
		}
	})
	type fault struct {
		name  string
		fault authtest.Fault
		// timeout is the review budget; zero means 10s.
		timeout time.Duration
		// only restricts the fault to one review kind ("" = both).
		only authtest.Endpoint
		// want is the outcome of a TokenReview fault and of a SAR fault.
		wantTR, wantSAR outcome
		// attempts is the exact number of requests the review sends.
		attempts int
		// retryAfter is the Retry-After of the HTTP 503.
		retryAfter string
		// answer: the SAR fault reads as a real answer (NoOpinion) and is
		// cached for DeniedTTL like one.
		answer bool
	}
	faults := []fault{
		// Retry-After (1s) is longer than what is left of the 500ms
		// budget: the library gives up at once instead of retrying early,
		// and forwards the server's Retry-After.
		{name: "429-retry-after", fault: authtest.Fault{Status: 429, RetryAfter: time.Second}, timeout: 500 * time.Millisecond,
			wantTR: unavailable, wantSAR: unavailable, attempts: 1, retryAfter: "1"},
		{name: "429", fault: authtest.Fault{Status: 429}, wantTR: unavailable, wantSAR: unavailable, attempts: retries + 1, retryAfter: "1"},
		{name: "500", fault: authtest.Fault{Status: 500}, wantTR: unavailable, wantSAR: unavailable, attempts: retries + 1, retryAfter: "1"},
		{name: "502", fault: authtest.Fault{Status: 502}, wantTR: unavailable, wantSAR: unavailable, attempts: retries + 1, retryAfter: "1"},
		{name: "503", fault: authtest.Fault{Status: 503}, wantTR: unavailable, wantSAR: unavailable, attempts: retries + 1, retryAfter: "1"},
		// The server holds the request past the budget, then would
		// answer 504: the budget ends the one attempt.
		{name: "timeout", fault: authtest.Fault{Delay: time.Minute, Status: 504}, timeout: shortTimeout,
			wantTR: unavailable, wantSAR: unavailable, attempts: 1, retryAfter: "1"},
		{name: "connection-reset", fault: authtest.Fault{DropConnection: true}, wantTR: unavailable, wantSAR: unavailable, attempts: retries + 1, retryAfter: "1"},
		// The server would answer correctly (allow), but too late: the
		// late answer must not be used.
		{name: "slow-past-deadline", fault: authtest.Fault{Delay: time.Minute}, timeout: shortTimeout,
			wantTR: unavailable, wantSAR: unavailable, attempts: 1, retryAfter: "1"},
		{name: "malformed-json", fault: authtest.Fault{MalformedBody: true}, wantTR: unavailable, wantSAR: unavailable, attempts: 1, retryAfter: "1"},
		{name: "wrong-kind", fault: authtest.Fault{WrongKind: true}, wantTR: unavailable, wantSAR: unavailable, attempts: 1, retryAfter: "1"},
		// An empty TokenReview status is not authenticated and says no
		// more: a rejection, as k8s.io/apiserver's webhook reads it, but
		// not cached, since a real server always explains a rejection
		// (issue #23: client-go's fake clientset answers so). An empty
		// SubjectAccessReview status is exactly what RBAC answers when no
		// rule matches (NoOpinion), so it is a denial, cached as one.
		{name: "empty-status", fault: authtest.Fault{EmptyStatus: true}, wantTR: unauthenticated, wantSAR: denied, attempts: 1, retryAfter: "1", answer: true},
		{name: "both-allowed-and-denied", fault: authtest.Fault{BothAllowedAndDenied: true}, only: authtest.SubjectAccessReviews,
			wantSAR: unavailable, attempts: 1, retryAfter: "1"},
	}
	reviews := []struct {
		name     string
		endpoint authtest.Endpoint
	}{
		{"TokenReview", authtest.TokenReviews},
		{"SAR", authtest.SubjectAccessReviews},
	}
	for _, rv := range reviews {
		for _, tp := range transports {
			for _, f := range faults {
				if f.only != "" && f.only != rv.endpoint {
					continue
				}
				t.Run(rv.name+"/"+tp.name+"/"+f.name, func(t *testing.T) {
					t.Parallel()
					want := f.wantTR
					if rv.endpoint == authtest.SubjectAccessReviews {
						want = f.wantSAR
					}
					timeout := f.timeout
					if timeout == 0 {
						timeout = 10 * time.Second
					}
					s := authtest.Start(t)
					s.SetPolicy(policy)
					st := newStack(t, s,
						authn.Options{Timeout: timeout, Backoff: matrixBackoff},
						authz.Options{Timeout: timeout, Backoff: matrixBackoff})
					tr := tp.new(t, st)
					token := s.MintToken(clientSA, []string{audience}, time.Now().Add(time.Hour))
					const thing = "thing-1"
					ctx := callCtx(t)

					s.InjectFault(rv.endpoint, f.fault) // until ClearFaults
					got := tr.call(ctx, token, thing)
					if got.code != want {
						t.Errorf("call(%s) with a %s fault = %s (%q); want %s", thing, f.name, got.code, got.message, want)
					}
					if n := tr.handled(); n != 0 {
						t.Fatalf("handler ran %d times under a %s fault; want 0 (result %s)", n, f.name, got.code)
					}
					if strings.Contains(got.message, token) {
						t.Errorf("status message %q contains the token", got.message)
					}
					if n := s.Count(rv.endpoint); n != f.attempts {
						t.Errorf("%s requests under a %s fault = %d; want %d (retry bound %d)", rv.name, f.name, n, f.attempts, retries+1)
					}
					if rv.endpoint == authtest.TokenReviews {
						if n := s.Count(authtest.SubjectAccessReviews); n != 0 {
							t.Errorf("SubjectAccessReviews after a failed TokenReview = %d; want 0", n)
						}
					}
					if tp.name == "http" && want == unavailable && got.retryAfter != f.retryAfter {
						t.Errorf("Retry-After of the 503 = %q; want %q", got.retryAfter, f.retryAfter)
					}

					// The fault clears: the same token and the same
					// attributes are asked again, not answered from a cache.
					s.ClearFaults()
					s.Reset()
					again := tr.call(ctx, token, thing)
					if f.answer && rv.endpoint == authtest.SubjectAccessReviews {
						// A NoOpinion is an answer, cached for DeniedTTL;
						// other attributes are asked and allowed.
						if again.code != denied || s.Count(rv.endpoint) != 0 {
							t.Errorf("same call after the fault cleared = %s with %d SARs; want the cached %s and 0", again.code, s.Count(rv.endpoint), denied)
						}
						again = tr.call(ctx, token, "thing-2")
					}
					if again.code != allowed || again.user != clientSA.Name {
						t.Fatalf("call after the fault cleared = %s as %q (%q); want %s as %q", again.code, again.user, again.message, allowed, clientSA.Name)
					}
					if n := s.Count(rv.endpoint); n != 1 {
						t.Errorf("%s requests after the fault cleared = %d; want 1 (the error was not cached)", rv.name, n)
					}
					if n := tr.handled(); n != 1 {
						t.Errorf("handler ran %d times; want once, after the fault cleared", n)
					}
				})
			}
		}
	}
}
