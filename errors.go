package reviewauth

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// The sentinel errors below classify every failure the library reports.
// Transport adapters map them to status codes at the edge and nowhere else:
//
//	errors.Is(err, ErrUnavailable)     -> 503 Service Unavailable / codes.Unavailable
//	errors.Is(err, ErrUnauthenticated) -> 401 Unauthorized        / codes.Unauthenticated
//	errors.Is(err, ErrDenied)          -> 403 Forbidden           / codes.PermissionDenied
//
// An error that matches none of them is treated as [ErrUnavailable] by the
// adapters: the library fails closed, and "could not decide" is never
// reported as a rejection or a denial. The exception is an authenticator's
// error, in httpauth and grpcauth alike, which is a rejection (401,
// codes.Unauthenticated) unless it matches ErrUnavailable:
// k8s.io/apiserver's own authenticators (x509, bearertoken, union, the token
// cache) report a bad credential with a plain error, so an authenticator
// that cannot reach its backend must wrap ErrUnavailable to be answered 503
// (codes.Unavailable).
//
// The errors and the error types below are values: safe to share between
// goroutines, never modified after they are returned.
var (
	// ErrUnauthenticated reports that a credential was presented and
	// rejected: by the API server (TokenReview said no, or said yes for the
	// wrong audience) or locally (empty, oversized or malformed token).
	ErrUnauthenticated = errors.New("reviewauth: unauthenticated")

	// ErrDenied reports that an authenticated identity is not allowed to
	// perform the request.
	ErrDenied = errors.New("reviewauth: permission denied")

	// ErrUnavailable reports that the library could not reach a decision:
	// the API server could not be asked, answered with a server error, was
	// throttling, or did not answer before the deadline. Callers may retry.
	ErrUnavailable = errors.New("reviewauth: review unavailable")

	// ErrRefused matches a review that the API server refused to perform
	// for this service (HTTP 401: its credentials are invalid or expired;
	// 403: they lack the system:auth-delegator ClusterRole), and a
	// self-check (authn.SelfCheck, authz.SelfCheck) that found so. At run
	// time such a review is still "could not check" for the caller: a
	// *[ReviewError] matching [ErrUnavailable] too, with Code 401 or 403. A
	// self-check's refusal matches ErrRefused only.
	ErrRefused = errors.New("reviewauth: the API server refused this service's own credentials")
)

// ReviewError describes a TokenReview or SubjectAccessReview that could not be
// completed. It always matches [ErrUnavailable] with [errors.Is]; it never
// carries a token, and its message never contains one.
type ReviewError struct {
	// Review is the kind of review: "TokenReview" or "SubjectAccessReview".
	Review string
	// Code is the HTTP status code the API server answered with on the
	// last attempt, or 0 when no response arrived (connection refused or
	// reset, timeout).
	Code int
	// Attempts is how many requests were sent, retries included.
	Attempts int
	// RetryAfter is the delay the API server asked for with Retry-After,
	// if any. HTTP adapters forward it in their own Retry-After header.
	RetryAfter time.Duration
	// Err is the underlying error, with any token redacted.
	Err error
}

// Error implements error.
func (e *ReviewError) Error() string {
	code := "no response"
	if e.Code != 0 {
		code = fmt.Sprintf("HTTP %d %s", e.Code, http.StatusText(e.Code))
	}
	if e.Err == nil {
		return fmt.Sprintf("reviewauth: %s unavailable after %d attempt(s): %s", e.Review, e.Attempts, code)
	}
	return fmt.Sprintf("reviewauth: %s unavailable after %d attempt(s): %s: %v", e.Review, e.Attempts, code, e.Err)
}

// Unwrap returns [ErrUnavailable] and the underlying error, so that both
// errors.Is(err, ErrUnavailable) and errors.Is(err, context.DeadlineExceeded)
// work.
func (e *ReviewError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrUnavailable}
	}
	return []error{ErrUnavailable, e.Err}
}

// RejectedError is the error returned for a credential that was rejected. It
// matches [ErrUnauthenticated]. Reason is safe to log and to return to the
// caller: it never contains the token.
type RejectedError struct {
	Reason string
}

// Error implements error.
func (e *RejectedError) Error() string { return "reviewauth: unauthenticated: " + e.Reason }

// Is reports whether target is [ErrUnauthenticated].
func (e *RejectedError) Is(target error) bool { return target == ErrUnauthenticated }

// DeniedError is the error form of an authorization denial, for APIs that
// return errors rather than an [k8s.io/apiserver/pkg/authorization/authorizer.Decision].
// It matches [ErrDenied]. Reason is the authorizer's reason, safe to return to
// the caller.
type DeniedError struct {
	Reason string
}

// Error implements error.
func (e *DeniedError) Error() string {
	if e.Reason == "" {
		return "reviewauth: permission denied"
	}
	return "reviewauth: permission denied: " + e.Reason
}

// Is reports whether target is [ErrDenied].
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// RetryAfter returns the delay the API server asked for, found anywhere in
// err's chain, and whether there was one; a nil err has none. Adapters use
// it for the Retry-After header of a 503.
func RetryAfter(err error) (time.Duration, bool) {
	var re *ReviewError
	if errors.As(err, &re) && re.RetryAfter > 0 {
		return re.RetryAfter, true
	}
	return 0, false
}
