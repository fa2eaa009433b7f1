// Package check is the one implementation of "is every attribute set
// allowed?": authz.Check, and the transports httpauth and grpcauth, which
// use it without importing authz (and the review client behind it).
package check

import (
	"context"
	"errors"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth"
)

// Check asks az about every attribute set in attrs, in order, and returns nil
// only if every one of them is allowed (All semantics: a CSI delta call must be
// allowed for both of its snapshots). It stops at the first set that is not
// allowed.
//
// The result is one of:
//   - nil: every set was allowed;
//   - an error matching reviewauth.ErrDenied (a *reviewauth.DeniedError
//     with the authorizer's reason): a set was denied, or no authorizer had an
//     opinion;
//   - an error matching reviewauth.ErrUnavailable: the authorizer could not
//     decide. An error returned by az that does not already match
//     ErrUnavailable is wrapped so that it does: whatever az's decision was,
//     an error never allows.
//
// Check with no attribute sets returns a denial: a request with nothing to
// authorize is a configuration mistake, and it fails closed. A nil az gives
// an error matching ErrUnavailable. Check is safe for concurrent use if az
// is.
func Check(ctx context.Context, az authorizer.UnconditionalAuthorizer, attrs ...authorizer.Attributes) error {
	if az == nil {
		return &reviewauth.ReviewError{Review: "authorization", Err: errors.New("authz: nil authorizer")}
	}
	if len(attrs) == 0 {
		return &reviewauth.DeniedError{Reason: "no attributes to authorize"}
	}
	for _, a := range attrs {
		decision, reason, err := az.Authorize(ctx, a)
		if err != nil {
			if errors.Is(err, reviewauth.ErrUnavailable) {
				return err
			}
			return &reviewauth.ReviewError{Review: "authorization", Err: err}
		}
		if decision != authorizer.DecisionAllow {
			return &reviewauth.DeniedError{Reason: reason}
		}
	}
	return nil
}
