package authn

// The JWKS verifier's limits, for tests at their edges.
const (
	MaxJWSHeader = maxJWSHeader
	MaxJWKSSize  = maxJWKSSize
	MaxJWKSKeys  = maxJWKSKeys
)

// ParseJWKS parses raw as a JWKSVerifier does, and returns the number of
// usable keys and whether any entry was skipped.
func ParseJWKS(raw []byte) (usable int, skipped bool, err error) {
	set, err := parseJWKS(raw)
	if err != nil {
		return 0, false, err
	}
	return len(set.all), set.partial, nil
}
