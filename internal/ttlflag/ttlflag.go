// Package ttlflag is the command-line form of a cache TTL, with the meaning
// k8s.io/apiserver gives its cache TTL flags: 0 disables the cache.
//
// The Options of authn and authz keep Go's zero-means-default (0 is the
// default TTL, a negative TTL disables the cache), so that a zero Options is
// safe. A flag cannot work that way: apiserver's
// --authentication-token-webhook-cache-ttl=0 and
// --authorization-webhook-cache-authorized-ttl=0 mean "do not cache", and a
// user who asks for no revocation window must not silently get the default
// one. [Value] maps between the two at parse time.
package ttlflag

import (
	"errors"
	"time"
)

// Value is a pflag.Value over an Options TTL field. Set parses a
// non-negative duration: 0 stores a negative duration (the Options' "cache
// disabled"), anything else stores itself. String shows a disabled cache as
// "0s". Value is not safe for concurrent use; flags are parsed once.
type Value struct{ p *time.Duration }

// New returns the Value over p. A zero *p is first set to def, so that the
// flag's default, shown in the help, is the Options' default.
func New(p *time.Duration, def time.Duration) *Value {
	if *p == 0 {
		*p = def
	}
	return &Value{p: p}
}

// Set implements pflag.Value.
func (v *Value) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	switch {
	case d < 0:
		return errors.New("must not be negative; 0 disables the cache")
	case d == 0:
		*v.p = -1
	default:
		*v.p = d
	}
	return nil
}

// String implements pflag.Value.
func (v *Value) String() string {
	if v.p == nil {
		return ""
	}
	if *v.p < 0 {
		return "0s"
	}
	return v.p.String()
}

// Type implements pflag.Value.
func (v *Value) Type() string { return "duration" }
