//go:build !unix

package serving

// openFileLimit is unknown here.
func openFileLimit() uint64 { return 0 }
