package cache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/reviewauth/reviewauth"
	icache "github.com/reviewauth/reviewauth/internal/cache"
)

// The one rule for TTLs, disabled caching and stale-if-error, which both
// decorators follow (TestStaleIfErrorRule checks it against both):
//
//   - a positive TTL caches a result for that long; zero means the
//     default; a negative TTL disables caching of that kind of result:
//     nothing is stored, and storing nothing also drops what an earlier
//     result left under the key;
//   - an error is never cached, nor is anything a call answers after its
//     context ended (Timeout, or every caller left);
//   - TTL sums saturate: a TTL plus StaleIfError past the longest
//     Duration keeps the success for the longest Duration;
//   - StaleIfError keeps a success (an identity, an Allow) for
//     StaleIfError past its TTL, to be served only when the wrapped
//     authenticator or authorizer could not check (its error matches
//     reviewauth.ErrUnavailable), never past the token's exp. A success
//     whose caching is disabled is not kept at all, so nothing is ever
//     served stale with caching disabled. Rejections, denials and
//     NoOpinions are never extended, and any answer but "could not check"
//     (a rejection, a denial, an error that does not match
//     ErrUnavailable, an answer not cached) replaces or removes the stale
//     success;
//   - a caller that leaves (its context ends while it waits) gets "could
//     not check", never a stale result.

// retention returns how long to keep a success cached for ttl, with stale
// for StaleIfError: 0 (keep nothing) when caching is disabled; ttl, or ttl
// plus stale when stale is positive, saturating at the longest Duration
// rather than overflowing to a negative one (which would keep nothing).
func retention(ttl, stale time.Duration) time.Duration {
	switch {
	case ttl <= 0:
		return 0
	case stale > 0:
		if ttl > math.MaxInt64-stale {
			return math.MaxInt64
		}
		return ttl + stale
	}
	return ttl
}

// couldNotCheck reports whether err, returned by a call of a wrapped
// authenticator or authorizer made under ctx, means that it could not
// check: it matches reviewauth.ErrUnavailable, or the call's context ended
// (Timeout), which makes any answer it gave unreliable.
func couldNotCheck(ctx context.Context, err error) bool {
	return err != nil && (errors.Is(err, reviewauth.ErrUnavailable) || ctx.Err() != nil)
}

// asUnavailable returns err, returned by a call made under ctx for which
// couldNotCheck holds, as an error that matches reviewauth.ErrUnavailable:
// err itself if it does; otherwise a *reviewauth.ReviewError of kind review
// that wraps ctx's error, not err, whose message may quote what it was
// asked about.
func asUnavailable(ctx context.Context, err error, review string) error {
	if errors.Is(err, reviewauth.ErrUnavailable) {
		return err
	}
	return &reviewauth.ReviewError{Review: review, Err: context.Cause(ctx)}
}

// fromWait returns the error for a caller whose Group.Do returned err
// without the call's own answer: the caller's ctx ended while it waited, or
// the call panicked. It is a *reviewauth.ReviewError of kind review, which
// matches reviewauth.ErrUnavailable, and ok is true. For any other err
// (the call's answer) ok is false. secret, if not empty, is removed from a
// panic's message, which may quote it.
func fromWait(ctx context.Context, err error, review, secret string) (_ error, ok bool) {
	var pe *icache.PanicError
	switch {
	case errors.As(err, &pe):
		msg := fmt.Sprint(pe.Value)
		if secret != "" {
			msg = strings.ReplaceAll(msg, secret, "[REDACTED]")
		}
		return &reviewauth.ReviewError{Review: review, Err: errors.New("cache: the call panicked: " + msg)}, true
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return &reviewauth.ReviewError{Review: review, Err: err}, true
	}
	return nil, false
}
