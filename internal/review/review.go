// Package review sends one review (TokenReview or SubjectAccessReview) with
// bounded retries, a bound on reviews in flight, and the classification of
// failures into the reviewauth error contract. authn and authz share it so
// that both retry and fail the same way.
package review

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/internal/cache"
	"github.com/reviewauth/reviewauth/internal/observe"
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

// DefaultAttemptTimeout bounds each request of a review when
// Options.AttemptTimeout is zero. A healthy API server answers a review in
// milliseconds; a request still unanswered after 3s is stuck (a dead
// connection, a server that accepted and hung), and waiting longer only
// spends the 10s budget that its retries need: with 3s, a review whose
// first request hangs still gets at least two more full attempts, on a
// new stream or connection.
const DefaultAttemptTimeout = 3 * time.Second

// RefusalLogInterval is the least time between two log lines about the
// API server refusing the service's own credentials, per Retrier.
const RefusalLogInterval = time.Minute

// Options configures a [Retrier]. Zero values mean the defaults above.
type Options struct {
	// Backoff spaces retries; Steps is the number of retries, and a
	// negative Steps means none.
	Backoff wait.Backoff
	// Clock spaces retries and rate-limits logging. Nil is the real clock.
	Clock clock.Clock
	// MaxInFlight bounds concurrent requests. Reviews past it wait their
	// turn in a fair queue: see [Retrier.Do].
	MaxInFlight int
	// AttemptTimeout bounds each request, in real time like context
	// deadlines; negative means no bound of its own.
	AttemptTimeout time.Duration
	// Observer is told about every attempt.
	Observer Observer
}

// Retrier sends reviews. It is safe for concurrent use once built with New.
type Retrier struct {
	kind           string
	backoff        wait.Backoff
	clock          clock.Clock
	attemptTimeout time.Duration
	queue          *Queue // the MaxInFlight bound, shared fairly
	obs            Observer

	mu          sync.Mutex
	inFlight    int
	maxSeen     int
	lastRefusal time.Time // last logged
	suppressed  int       // refusals not logged since

	noRefusalLog bool // SelfCheck returns refusals instead
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
	// Refused is called for each request the API server refused with 401
	// or 403: the service's own credentials are invalid or not allowed to
	// create the review.
	Refused func(kind string)
}

// ObserverOf returns the Observer that records into rec (nothing for nil).
func ObserverOf(rec *observe.Recorder) Observer {
	if rec == nil {
		return Observer{}
	}
	return Observer{Attempt: rec.ReviewAttempt, Retry: rec.ReviewRetry, InFlight: rec.ReviewInFlight, Refused: rec.CredentialRefusal}
}

// New returns a Retrier for reviews of kind ("TokenReview" or
// "SubjectAccessReview"), configured by o.
func New(kind string, o Options) *Retrier {
	b := o.Backoff
	if b.Duration == 0 && b.Steps == 0 {
		b = DefaultBackoff
	}
	if b.Steps < 0 {
		b.Steps = 0
	}
	clk := o.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	maxInFlight := o.MaxInFlight
	if maxInFlight <= 0 {
		maxInFlight = DefaultMaxInFlight
	}
	at := o.AttemptTimeout
	if at == 0 {
		at = DefaultAttemptTimeout
	}
	return &Retrier{kind: kind, backoff: b, clock: clk, attemptTimeout: at, queue: NewQueue(maxInFlight), obs: o.Observer}
}

// MaxInFlightSeen returns the largest number of concurrent requests seen.
func (r *Retrier) MaxInFlightSeen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxSeen
}

// Waiting returns the number of reviews waiting for one of the MaxInFlight
// slots.
func (r *Retrier) Waiting() int { return r.queue.Waiting() }

// errAttemptTimeout is the cause of an attempt cut by the attempt timeout.
var errAttemptTimeout = errors.New("attempt timed out")

// Do calls attempt until it succeeds, fails with an error that is not worth
// retrying, or the retry budget runs out: the backoff's steps, or ctx's
// deadline (a retry whose wait would end past the deadline is not tried).
// Each attempt runs under its own timeout (Options.AttemptTimeout), and an
// attempt that times out is retried. An attempt waits for one of the
// MaxInFlight slots in a fair queue ([Queue]): reviews of tokens verified
// locally ([WithVerified]) take up to [VerifiedShare] turns in a row, the
// others at least one in every VerifiedShare+1; within each, the [Source]
// addresses of ctx take turns, and the connections of one address, each
// first come, first served. Before each wait, Do tells the callers
// sharing the review ([cache.Postpone]) when the next attempt is due, so
// that those whose deadline comes first leave at once with the error so
// far.
//
// Every failure is returned as a *reviewauth.ReviewError, which matches
// reviewauth.ErrUnavailable; a 401 or 403 answer (the service's own
// credentials refused) also matches [ErrRefused], is logged at the default
// level at most once per [RefusalLogInterval], and is not retried. redact
// is applied to every error message before it is stored or logged, so that
// a token never reaches an error string.
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
		start := r.clock.Now()
		err := r.try(ctx, attempt)
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
		retryAfter := retryAfter(err)
		if code == http.StatusUnauthorized || code == http.StatusForbidden {
			failed := r.fail(attempts, code, retryAfter, err, redact)
			r.refused(ctx, failed)
			return failed
		}
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
		cache.Postpone(ctx, time.Now().Add(wait), r.fail(attempts, code, retryAfter, err, redact))
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

// try runs one attempt under the attempt timeout, with client-go's logging
// capped (see [MaxClientVerbosity]). An attempt under way is not cut short
// when ctx is cancelled (every caller of a shared review gave up, or their
// streams were reset): its request has reached the API server, which
// counts it either way, and its answer, once stored, spares the next
// caller with the same question a second review (a junk token sent again
// costs one review, not two). It still ends at ctx's deadline, and Do
// makes no further attempt once ctx is done.
func (r *Retrier) try(ctx context.Context, attempt func(ctx context.Context) error) error {
	actx := quiet(context.WithoutCancel(ctx))
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		actx, cancel = context.WithDeadline(actx, dl)
		defer cancel()
	}
	if r.attemptTimeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeoutCause(actx, r.attemptTimeout, errAttemptTimeout)
		defer cancel()
	}
	err := attempt(actx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), errAttemptTimeout) {
		return &attemptTimeoutError{d: r.attemptTimeout, err: err}
	}
	return err
}

// attemptTimeoutError is an attempt cut by the attempt timeout; retryable.
type attemptTimeoutError struct {
	d   time.Duration
	err error
}

func (e *attemptTimeoutError) Error() string {
	return fmt.Sprintf("no answer within the attempt timeout (%v): %v", e.d, e.err)
}

func (e *attemptTimeoutError) Unwrap() error { return e.err }

// ErrRefused is reviewauth.ErrRefused.
var ErrRefused = reviewauth.ErrRefused

// RBACHint names what a service that reviews tokens and access needs.
const RBACHint = "it needs the system:auth-delegator ClusterRole (create tokenreviews.authentication.k8s.io, create subjectaccessreviews.authorization.k8s.io)"

// refused logs a refusal at the default level, at most once per
// RefusalLogInterval, and counts it.
func (r *Retrier) refused(ctx context.Context, err error) {
	if r.obs.Refused != nil {
		r.obs.Refused(r.kind)
	}
	if r.noRefusalLog {
		return
	}
	now := r.clock.Now()
	r.mu.Lock()
	if !r.lastRefusal.IsZero() && now.Sub(r.lastRefusal) < RefusalLogInterval {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	suppressed := r.suppressed
	r.lastRefusal, r.suppressed = now, 0
	r.mu.Unlock()
	klog.FromContext(ctx).Error(err, "The API server refused this service's own "+r.kind+": its credentials are invalid (401) or not allowed to create it (403); "+RBACHint+". Every review is reported as unavailable until this is fixed",
		"review", r.kind, "sameSinceLastLog", suppressed)
}

// acquire takes one of the MaxInFlight slots. When none is free, the
// caller waits its turn in the fair queue (see [Queue]): most turns to
// verified tokens ([WithVerified]), a guaranteed share to the others, and
// within each round robin over the [Source] addresses and their
// connections, so that one client's flood of reviews never holds another's
// behind it.
func (r *Retrier) acquire(ctx context.Context) error {
	if err := r.queue.Acquire(ctx); err != nil {
		return err
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
	r.queue.Release()
	if r.obs.InFlight != nil {
		r.obs.InFlight(r.kind, -1)
	}
}

func (r *Retrier) fail(attempts, code int, retryAfter time.Duration, err error, redact func(string) string) error {
	err = Redacted(err, redact)
	if code == http.StatusUnauthorized || code == http.StatusForbidden {
		err = refusedError{err}
	}
	return &reviewauth.ReviewError{Review: r.kind, Code: code, Attempts: attempts, RetryAfter: retryAfter, Err: err}
}

// refusedError matches ErrRefused and keeps the API server's message.
type refusedError struct{ err error }

func (e refusedError) Error() string   { return e.err.Error() }
func (e refusedError) Unwrap() []error { return []error{ErrRefused, e.err} }

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
// refused or reset, an HTTP/2 stream reset or GOAWAY, EOF, timeouts, an
// attempt cut by the attempt timeout). Other 4xx answers, oversized and
// malformed answers are not retried.
func retryable(err error) bool {
	if code := statusCode(err); code != 0 {
		return code == http.StatusTooManyRequests || code >= 500
	}
	if errors.Is(err, context.Canceled) && !errors.As(err, new(*attemptTimeoutError)) {
		return false
	}
	var netErr net.Error
	return utilnet.IsConnectionReset(err) || utilnet.IsConnectionRefused(err) || utilnet.IsProbableEOF(err) ||
		isHTTP2Reset(err) || errors.As(err, new(*attemptTimeoutError)) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) ||
		utilnet.IsTimeout(err) || (errors.As(err, &netErr) && netErr.Timeout())
}

// isHTTP2Reset reports whether err is an HTTP/2 stream reset (RST_STREAM),
// a GOAWAY or a lost HTTP/2 connection. client-go speaks HTTP/2 to the API
// server through golang.org/x/net/http2, whose RST_STREAM error is a
// StreamError (also when reading the body); net/http's bundled copy, used
// when x/net/http2 delegates to it, has the same messages but unexported
// types.
func isHTTP2Reset(err error) bool {
	var se http2.StreamError
	var ga http2.GoAwayError
	var ce http2.ConnectionError
	if errors.As(err, &se) || errors.As(err, &ga) || errors.As(err, &ce) || utilnet.IsHTTP2ConnectionLost(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "stream error: stream ID ") || strings.Contains(msg, "http2: server sent GOAWAY") ||
		strings.Contains(msg, "http2: client connection force closed")
}

func retryAfter(err error) time.Duration {
	if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}
