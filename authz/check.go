package authz

import (
	"context"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/internal/check"
)

// Check asks az about every attribute set in attrs, in order, and returns nil
// only if every one of them is allowed (All semantics: a CSI delta call must be
// allowed for both of its snapshots). It stops at the first set that is not
// allowed.
//
// The result is one of:
//   - nil: every set was allowed;
//   - an error matching [reviewauth.ErrDenied] (a *[reviewauth.DeniedError]
//     with the authorizer's reason): a set was denied, or no authorizer had an
//     opinion;
//   - an error matching [reviewauth.ErrUnavailable]: the authorizer could not
//     decide. An error returned by az that does not already match
//     ErrUnavailable is wrapped so that it does: whatever az's decision was,
//     an error never allows.
//
// Check with no attribute sets returns a denial: a request with nothing to
// authorize is a configuration mistake, and it fails closed. A nil az gives
// an error matching ErrUnavailable. Check is safe for concurrent use if az
// is.
//
// The transports use Check: httpauth and grpcauth authorize each request
// with Check over the attribute sets it maps to, so a request is allowed only
// if every set is. az itself is typically [First] of local rules and an
// [Authorizer], or [All] of [NodeLocal] and an [Authorizer].
func Check(ctx context.Context, az authorizer.UnconditionalAuthorizer, attrs ...authorizer.Attributes) error {
	return check.Check(ctx, az, attrs...)
}
