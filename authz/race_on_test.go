//go:build race

package authz_test

// raceEnabled reports whether the race detector is on; it changes
// allocation counts.
const raceEnabled = true
