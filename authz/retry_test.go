package authz_test

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
)

// waitABit yields to other goroutines while a test polls for a condition
// another goroutine will make true. It never waits for time to pass.
func waitABit() { runtime.Gosched() }

func TestRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		fault        authtest.Fault
		wantDecision authorizer.Decision
		wantSARs     int
		wantCode     int // of the ReviewError, when the check fails
	}{
		{name: "429 then success", fault: authtest.Fault{Status: http.StatusTooManyRequests, Times: 2}, wantDecision: authorizer.DecisionAllow, wantSARs: 3},
		{name: "500 then success", fault: authtest.Fault{Status: http.StatusInternalServerError, Times: 3}, wantDecision: authorizer.DecisionAllow, wantSARs: 4},
		{name: "502 then success", fault: authtest.Fault{Status: http.StatusBadGateway, Times: 1}, wantDecision: authorizer.DecisionAllow, wantSARs: 2},
		{name: "503 then success", fault: authtest.Fault{Status: http.StatusServiceUnavailable, Times: 1}, wantDecision: authorizer.DecisionAllow, wantSARs: 2},
		{name: "504 then success", fault: authtest.Fault{Status: http.StatusGatewayTimeout, Times: 1}, wantDecision: authorizer.DecisionAllow, wantSARs: 2},
		{name: "connection reset then success", fault: authtest.Fault{DropConnection: true, Times: 2}, wantDecision: authorizer.DecisionAllow, wantSARs: 3},
		{name: "503 exhausts 1+4 attempts", fault: authtest.Fault{Status: http.StatusServiceUnavailable}, wantDecision: authorizer.DecisionDeny, wantSARs: 5, wantCode: 503},
		{name: "400 is not retried", fault: authtest.Fault{Status: http.StatusBadRequest}, wantDecision: authorizer.DecisionDeny, wantSARs: 1, wantCode: 400},
		{name: "401 is not retried", fault: authtest.Fault{Status: http.StatusUnauthorized}, wantDecision: authorizer.DecisionDeny, wantSARs: 1, wantCode: 401},
		{name: "403 is not retried", fault: authtest.Fault{Status: http.StatusForbidden}, wantDecision: authorizer.DecisionDeny, wantSARs: 1, wantCode: 403},
		{name: "404 is not retried", fault: authtest.Fault{Status: http.StatusNotFound}, wantDecision: authorizer.DecisionDeny, wantSARs: 1, wantCode: 404},
		{name: "malformed body is not retried", fault: authtest.Fault{MalformedBody: true}, wantDecision: authorizer.DecisionDeny, wantSARs: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, allowBackupPods, authz.Options{})
			f.srv.InjectFault(authtest.SubjectAccessReviews, tt.fault)
			// The longest default wait is 800ms+20%: one step of 2s always
			// fires the pending timer.
			r := f.authorizeStepping(context.Background(), getPods(backup()), 2*time.Second)
			if r.d != tt.wantDecision {
				t.Errorf("Authorize() = %v, %q, %v; want %v", r.d, r.reason, r.err, tt.wantDecision)
			}
			if got := f.sars(); got != tt.wantSARs {
				t.Errorf("SARs = %d; want %d", got, tt.wantSARs)
			}
			if tt.wantDecision == authorizer.DecisionAllow {
				if r.err != nil {
					t.Errorf("Authorize() error = %v; want nil", r.err)
				}
				return
			}
			var re *reviewauth.ReviewError
			if !errors.As(r.err, &re) {
				t.Fatalf("Authorize() error = %v; want a *reviewauth.ReviewError", r.err)
			}
			if re.Code != tt.wantCode || re.Attempts != tt.wantSARs || re.Review != "SubjectAccessReview" {
				t.Errorf("ReviewError = {Review %q, Code %d, Attempts %d}; want {SubjectAccessReview, %d, %d}", re.Review, re.Code, re.Attempts, tt.wantCode, tt.wantSARs)
			}
			if errors.Is(r.err, reviewauth.ErrDenied) {
				t.Errorf("Authorize() error = %v matches ErrDenied; could-not-check must not look like a denial", r.err)
			}
		})
	}
}

func TestRetryBackoffSchedule(t *testing.T) {
	t.Parallel()
	// No jitter, so the waits are exact: 100ms, 200ms, 400ms.
	f := newFixture(t, allowBackupPods, authz.Options{Backoff: wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Steps: 3, Cap: 2 * time.Second}})
	f.srv.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{Status: http.StatusServiceUnavailable, Times: 3})
	done := make(chan result, 1)
	go func() {
		d, r, err := f.az.Authorize(context.Background(), getPods(backup()))
		done <- result{d, r, err}
	}()
	for i, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		for !f.clock.HasWaiters() {
			waitABit()
		}
		f.clock.Step(want - time.Nanosecond)
		if !f.clock.HasWaiters() {
			t.Fatalf("wait #%d ended before %v", i+1, want)
		}
		if got := f.sars(); got != i+1 {
			t.Fatalf("SARs during wait #%d = %d; want %d", i+1, got, i+1)
		}
		f.clock.Step(time.Nanosecond)
	}
	r := <-done
	if r.d != authorizer.DecisionAllow || r.err != nil {
		t.Errorf("Authorize() = %v, %v; want Allow", r.d, r.err)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, allowBackupPods, authz.Options{})
	f.srv.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{Status: http.StatusTooManyRequests, RetryAfter: time.Second, Times: 1})
	done := make(chan result, 1)
	go func() {
		d, r, err := f.az.Authorize(context.Background(), getPods(backup()))
		done <- result{d, r, err}
	}()
	for !f.clock.HasWaiters() {
		waitABit()
	}
	f.clock.Step(time.Second - time.Nanosecond)
	if !f.clock.HasWaiters() || f.sars() != 1 {
		t.Fatalf("retried before the 1s Retry-After (SARs = %d)", f.sars())
	}
	f.clock.Step(time.Nanosecond)
	r := <-done
	if r.d != authorizer.DecisionAllow || r.err != nil || f.sars() != 2 {
		t.Errorf("Authorize() = %v, %v with %d SARs; want Allow after 2", r.d, r.err, f.sars())
	}
}

func TestRetryNeverWaitsPastDeadline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		opts       authz.Options
		retryAfter time.Duration
		deadline   time.Duration // caller's, 0 for none
	}{
		{name: "Retry-After past the budget", retryAfter: 30 * time.Second},
		{name: "Retry-After past a custom budget", opts: authz.Options{Timeout: 2 * time.Second}, retryAfter: 3 * time.Second},
		{name: "Retry-After past the caller's deadline", retryAfter: 2 * time.Second, deadline: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, allowBackupPods, tt.opts)
			f.srv.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{Status: http.StatusTooManyRequests, RetryAfter: tt.retryAfter})
			ctx := context.Background()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, f.clock.Now().Add(tt.deadline))
				defer cancel()
			}
			d, _, err := f.az.Authorize(ctx, getPods(backup()))
			var re *reviewauth.ReviewError
			if d == authorizer.DecisionAllow || !errors.As(err, &re) {
				t.Fatalf("Authorize() = %v, %v; want Deny and a *ReviewError", d, err)
			}
			if re.Code != http.StatusTooManyRequests || re.Attempts != 1 || re.RetryAfter != tt.retryAfter {
				t.Errorf("ReviewError = {Code %d, Attempts %d, RetryAfter %v}; want {429, 1, %v}", re.Code, re.Attempts, re.RetryAfter, tt.retryAfter)
			}
			if got, ok := reviewauth.RetryAfter(err); !ok || got != tt.retryAfter {
				t.Errorf("RetryAfter(err) = %v, %v; want %v, true", got, ok, tt.retryAfter)
			}
		})
	}
}

func TestErrorIsNeverAllow(t *testing.T) {
	t.Parallel()
	// The policy allows everything; every fault must still fail closed.
	allowAll := policyOf(true, false, "", "")
	tests := []struct {
		name  string
		fault authtest.Fault
	}{
		{name: "429", fault: authtest.Fault{Status: http.StatusTooManyRequests}},
		{name: "429 with Retry-After", fault: authtest.Fault{Status: http.StatusTooManyRequests, RetryAfter: time.Minute}},
		{name: "500", fault: authtest.Fault{Status: http.StatusInternalServerError}},
		{name: "503", fault: authtest.Fault{Status: http.StatusServiceUnavailable}},
		{name: "400", fault: authtest.Fault{Status: http.StatusBadRequest}},
		{name: "401", fault: authtest.Fault{Status: http.StatusUnauthorized}},
		{name: "403", fault: authtest.Fault{Status: http.StatusForbidden}},
		{name: "422", fault: authtest.Fault{Status: http.StatusUnprocessableEntity}},
		{name: "connection reset", fault: authtest.Fault{DropConnection: true}},
		{name: "malformed body", fault: authtest.Fault{MalformedBody: true}},
		{name: "wrong kind", fault: authtest.Fault{WrongKind: true}},
		{name: "both allowed and denied", fault: authtest.Fault{BothAllowedAndDenied: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, allowAll, authz.Options{Backoff: wait.Backoff{Steps: -1}})
			f.srv.InjectFault(authtest.SubjectAccessReviews, tt.fault)
			a := getPods(backup())
			d, _, err := f.az.Authorize(context.Background(), a)
			if d == authorizer.DecisionAllow || err == nil {
				t.Errorf("Authorize() = %v, %v; want not Allow, with an error", d, err)
			}
			if !errors.Is(err, reviewauth.ErrUnavailable) {
				t.Errorf("Authorize() error = %v; want one matching ErrUnavailable", err)
			}
			if cerr := authz.Check(context.Background(), f.az, a); !errors.Is(cerr, reviewauth.ErrUnavailable) || errors.Is(cerr, reviewauth.ErrDenied) {
				t.Errorf("Check() = %v; want ErrUnavailable, not ErrDenied", cerr)
			}
		})
	}
}
