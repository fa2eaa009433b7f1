package authz

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/reviewauth/reviewauth"
)

const reviewName = "SubjectAccessReview"

// create posts sar with bounded retries. It returns the API server's answer,
// or a *reviewauth.ReviewError. deadline, when not zero, is the time (on the
// Authorizer's clock) past which no wait may end: if the next wait would pass
// it, create stops at once and reports the wait it would have needed.
func (a *Authorizer) create(ctx context.Context, sar *authorizationv1.SubjectAccessReview, deadline time.Time) (_ *authorizationv1.SubjectAccessReview, attempts int, _ error) {
	// Steps is the number of attempts; Step() gives the waits (it keeps
	// returning Cap, jittered, once Cap is reached).
	backoff := a.backoff // a copy: Step mutates it
	for {
		if err := a.acquire(ctx); err != nil {
			return nil, attempts, &reviewauth.ReviewError{Review: reviewName, Attempts: attempts, Err: err}
		}
		attempts++
		out, err := a.reviewer.Create(ctx, sar, metav1.CreateOptions{})
		a.release()
		if err == nil {
			if out == nil {
				return nil, attempts, &reviewauth.ReviewError{Review: reviewName, Code: http.StatusCreated, Attempts: attempts,
					Err: errors.New("authz: empty SubjectAccessReview response")}
			}
			return out, attempts, nil
		}
		code, retry, retryAfter := classify(err)
		rerr := &reviewauth.ReviewError{Review: reviewName, Code: code, Attempts: attempts, RetryAfter: retryAfter, Err: err}
		if ctx.Err() != nil {
			rerr.Err = errors.Join(ctx.Err(), err)
			return nil, attempts, rerr
		}
		if !retry || attempts >= a.backoff.Steps {
			return nil, attempts, rerr
		}
		wait := backoff.Step()
		if retryAfter > wait {
			wait = retryAfter
		}
		if !deadline.IsZero() && a.clock.Now().Add(wait).After(deadline) {
			// Waiting would end past the budget or the caller's deadline:
			// stop now, and tell the caller how long the server wanted.
			if rerr.RetryAfter == 0 {
				rerr.RetryAfter = wait
			}
			return nil, attempts, rerr
		}
		t := a.clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			rerr.Err = errors.Join(ctx.Err(), err)
			return nil, attempts, rerr
		}
	}
}

// acquire takes one of the MaxInFlight slots, waiting subject to ctx.
func (a *Authorizer) acquire(ctx context.Context) error {
	select {
	case a.inflight <- struct{}{}:
		return nil
	default:
	}
	select {
	case a.inflight <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *Authorizer) release() { <-a.inflight }

// classify reports the HTTP status of a failed request (0 when none
// arrived), whether it is worth retrying, and the delay the server asked
// for. Retried: 429, every 5xx, connection refused or reset, timeouts and
// unexpected EOF. Not retried: any other 4xx, and errors the client made
// before or after the exchange (encoding, decoding, TLS verification).
func classify(err error) (code int, retry bool, retryAfter time.Duration) {
	if secs, ok := apierrors.SuggestsClientDelay(err); ok && secs > 0 {
		retryAfter = time.Duration(secs) * time.Second
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code = int(status.Status().Code)
	}
	switch {
	case code == http.StatusTooManyRequests, code >= 500:
		return code, true, retryAfter
	case code != 0:
		// A 4xx the request caused (401, 403 for our own credentials, 404,
		// 422...): asking again gives the same answer.
		return code, false, retryAfter
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The caller's or the load's own deadline: the loop decides.
		return 0, true, retryAfter
	case utilnet.IsConnectionRefused(err), utilnet.IsConnectionReset(err),
		utilnet.IsTimeout(err), utilnet.IsProbableEOF(err),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return 0, true, retryAfter
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return 0, true, retryAfter
	}
	return 0, false, retryAfter
}
