package authz

// KeyEncoding exposes the canonical encoding of a review, from which cache
// keys are derived, to the external tests (fuzzing its injectivity). It
// leaves out the extras named in ignored (nil: CredentialIDExtra).
var KeyEncoding = encodeKey

// AttributeBytes exposes attributeBytes to the external tests.
var AttributeBytes = attributeBytes

// SARSpec exposes sarSpec to the external tests.
var SARSpec = sarSpec

// CollideLookupKeys makes every review share one lookup key in a, so that
// tests can check that a hit compares the full encoding.
func CollideLookupKeys(a *Authorizer) { a.keys.collide = true }

// NodeNameKey and NodeUIDKey are the node extras NodeLocal and NodeScope
// read.
const (
	NodeNameKey = nodeNameKey
	NodeUIDKey  = nodeUIDKey
)
