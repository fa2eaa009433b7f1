// Package review sends one review (TokenReview or SubjectAccessReview) with
// bounded retries, a bound on reviews in flight, and the classification of
// failures into the reviewauth error contract. authn and authz share it so
// that both retry and fail the same way.
package review

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth"
)

// DefaultBackoff is used when a Retrier's Backoff is zero: the first retry
// after about 100ms, doubling, with 20% jitter, at most 4 retries and never
// more than 2s apart. A review that fails 5 times in a row has spent about
// 1.5s, well inside the default 10s budget, so the caller learns quickly that
// the API server is unavailable instead of hanging.
var DefaultBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 4, Cap: 2 * time.Second}

// DefaultMaxInFlight bounds concurrent reviews of one kind per process when
// MaxInFlight is zero.
const DefaultMaxInFlight = 16

// Retrier sends reviews. It is safe for concurrent use once built with New.
type Retrier struct {
	kind    string
	backoff wait.Backoff
	clock   clock.Clock
	sem     chan struct{}
	obs     Observer

	mu       sync.Mutex
	inFlight int
	maxSeen  int
}

// Observer is told about every attempt. All methods must be cheap and safe
// for concurrent use. Nil fields are skipped.
type Observer struct {
	// Attempt is called after each request with its HTTP code (0 when no
	// response arrived) and duration.
	Attempt func(kind string, code int, d time.Duration)
	// Retry is called before each retry.
	Retry func(kind string)
	// InFlight is called with +1 and -1 as requests start and end.
	InFlight func(kind string, delta int)
}

// New returns a Retrier for reviews of kind ("TokenReview" or
// "SubjectAccessReview"). Zero values mean the defaults above; a negative
// Steps in b means no retries.
func New(kind string, b wait.Backoff, clk clock.Clock, maxInFlight int, obs Observer) *Retrier {
	if b.Duration == 0 && b.Steps == 0 {
		b = DefaultBackoff
	}
	if b.Steps < 0 {
		b.Steps = 0
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	if maxInFlight <= 0 {
		maxInFlight = DefaultMaxInFlight
	}
	return &Retrier{kind: kind, backoff: b, clock: clk, sem: make(chan struct{}, maxInFlight), obs: obs}
}

// MaxInFlightSeen returns the largest number of concurrent requests seen.
func (r *Retrier) MaxInFlightSeen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxSeen
}

// Do calls attempt until it succeeds, fails with an error that is not worth
// retrying, or the retry budget runs out: the backoff's steps, or ctx's
// deadline (a retry whose wait would end past the deadline is not tried).
// Every failure is returned as a *reviewauth.ReviewError, which matches
// reviewauth.ErrUnavailable. redact is applied to every error message before
// it is stored, so that a token never reaches an error string.
func (r *Retrier) Do(ctx context.Context, redact func(string) string, attempt func(ctx context.Context) error) error {
	// wait.Backoff.Step zeroes Steps once Cap is reached; count retries
	// here and apply Cap ourselves, so that Steps alone bounds them.
	b := r.backoff
	maxWait := b.Cap
	b.Cap = 0
	retries := r.backoff.Steps
	attempts := 0
	for {
		if err := r.acquire(ctx); err != nil {
			return r.fail(attempts, 0, 0, err, redact)
		}
		ctx, retryAfterHeader := withRetryAfterRecorder(ctx)
		start := r.clock.Now()
		err := attempt(quiet(ctx))
		r.release()
		attempts++
		code := statusCode(err)
		if err == nil {
			code = http.StatusCreated // reviews are created
		}
		if r.obs.Attempt != nil {
			r.obs.Attempt(r.kind, code, r.clock.Since(start))
		}
		if err == nil {
			return nil
		}
		retryAfter := retryAfter(err, retryAfterHeader)
		if !retryable(err) || attempts > retries || ctx.Err() != nil {
			return r.fail(attempts, code, retryAfter, err, redact)
		}
		wait := b.Step()
		if maxWait > 0 && wait > maxWait {
			wait = maxWait
		}
		if retryAfter > wait {
			wait = retryAfter
		}
		// Context deadlines are in real time, whatever r.clock is.
		if dl, ok := ctx.Deadline(); ok && wait > time.Until(dl) {
			return r.fail(attempts, code, retryAfter, err, redact)
		}
		if r.obs.Retry != nil {
			r.obs.Retry(r.kind)
		}
		t := r.clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return r.fail(attempts, code, retryAfter, err, redact)
		}
	}
}

func (r *Retrier) acquire(ctx context.Context) error {
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	r.mu.Lock()
	r.inFlight++
	if r.inFlight > r.maxSeen {
		r.maxSeen = r.inFlight
	}
	r.mu.Unlock()
	if r.obs.InFlight != nil {
		r.obs.InFlight(r.kind, 1)
	}
	return nil
}

func (r *Retrier) release() {
	r.mu.Lock()
	r.inFlight--
	r.mu.Unlock()
	<-r.sem
	if r.obs.InFlight != nil {
		r.obs.InFlight(r.kind, -1)
	}
}

func (r *Retrier) fail(attempts, code int, retryAfter time.Duration, err error, redact func(string) string) error {
	return &reviewauth.ReviewError{Review: r.kind, Code: code, Attempts: attempts, RetryAfter: retryAfter, Err: Redacted(err, redact)}
}

// Redacted returns err with redact applied to its message, keeping errors.Is
// for context errors. A nil redact returns err as it is.
func Redacted(err error, redact func(string) string) error {
	if err == nil || redact == nil {
		return err
	}
	msg := err.Error()
	clean := redact(msg)
	if clean == msg {
		return err
	}
	return &redactedError{msg: clean, ctxErr: ctxErr(err)}
}

type redactedError struct {
	msg    string
	ctxErr error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.ctxErr }

func ctxErr(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return context.Canceled
	}
	return nil
}

// RedactToken returns a redact function that replaces token everywhere.
func RedactToken(token string) func(string) string {
	if token == "" {
		return nil
	}
	return func(s string) string { return strings.ReplaceAll(s, token, "[REDACTED]") }
}

func statusCode(err error) int {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return int(st.Status().Code)
	}
	return 0
}

// retryable reports whether a failed attempt is worth repeating: throttling
// (429), server errors (5xx), and failures to get any answer (connection
// refused or reset, EOF, timeouts). Other 4xx answers are not retried.
func retryable(err error) bool {
	if code := statusCode(err); code != 0 {
		return code == http.StatusTooManyRequests || code >= 500
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	var netErr net.Error
	return utilnet.IsConnectionReset(err) || utilnet.IsConnectionRefused(err) || utilnet.IsProbableEOF(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) ||
		utilnet.IsTimeout(err) || (errors.As(err, &netErr) && netErr.Timeout())
}

func retryAfter(err error, header *retryAfterRecorder) time.Duration {
	if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
		return time.Duration(s) * time.Second
	}
	if d := header.get(); d > 0 {
		return d
	}
	return 0
}

type recorderKey struct{}

type retryAfterRecorder struct {
	mu sync.Mutex
	d  time.Duration
}

func (r *retryAfterRecorder) get() time.Duration {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.d
}

func withRetryAfterRecorder(ctx context.Context) (context.Context, *retryAfterRecorder) {
	rec := &retryAfterRecorder{}
	return context.WithValue(ctx, recorderKey{}, rec), rec
}

// WrapTransport records the Retry-After header of 429 and 5xx answers for
// Do, which cannot see headers through client-go's typed results. Use it as a
// rest.Config WrapTransport.
func WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || resp == nil {
			return resp, err
		}
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			if rec, ok := req.Context().Value(recorderKey{}).(*retryAfterRecorder); ok {
				if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s > 0 {
					rec.mu.Lock()
					rec.d = time.Duration(s) * time.Second
					rec.mu.Unlock()
				}
			}
		}
		return resp, nil
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
