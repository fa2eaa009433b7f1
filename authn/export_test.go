package authn

// The JWKS verifier's limits, for tests at their edges.
const (
	MaxJWKSSize = maxJWKSSize
	MaxJWKSKeys = maxJWKSKeys
)

// ParseJWKS parses raw as a JWKSVerifier does, and returns the number of
// usable keys and whether any entry was skipped.
func ParseJWKS(raw []byte) (usable int, skipped bool, err error) {
	set, err := parseJWKS(raw)
	if err != nil {
		return 0, false, err
	}
	return len(set.all), len(set.unusable) > 0, nil
}

// Waiting returns the number of TokenReviews waiting for one of the
// MaxInFlight slots.
func (a *Authenticator) Waiting() int { return a.client.retrier.Waiting() }
