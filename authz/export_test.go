package authz

import (
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/internal/cache"
)

// KeyEncoding exposes the canonical encoding of a review, from which the
// Authorizer's cache keys are derived, to the external tests (fuzzing its
// injectivity). It leaves out the extras named in ignored (nil:
// CredentialIDExtra), as an Authorizer does.
func KeyEncoding(a authorizer.Attributes, ignored []string) string {
	if ignored == nil {
		ignored = []string{CredentialIDExtra}
	}
	e := cache.AttributeEncoder{Ignored: ignored, SubjectAccessReview: true}
	return e.Encode(a)
}

// AttributeBytes is the size of a's caller-controlled attributes, as the
// Authorizer's cache counts them.
func AttributeBytes(a authorizer.Attributes) int { return cache.AttributeBytes(a, true) }

// SARSpec exposes sarSpec to the external tests.
var SARSpec = sarSpec

// NodeNameKey and NodeUIDKey are the node extras NodeLocal and NodeScope
// read.
const (
	NodeNameKey = nodeNameKey
	NodeUIDKey  = nodeUIDKey
)
