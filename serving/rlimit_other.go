//go:build !unix

package serving

// openFileLimit is unknown here.
func openFileLimit() uint64 { return 0 }

// processFiles is unknown here: no more than the budget's worth wait.
func processFiles() *fileGauge { return nil }
