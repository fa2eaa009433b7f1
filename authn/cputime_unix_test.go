//go:build unix

package authn_test

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time this process has used. Benchmarks report
// it per op next to ns/op, which counts wall time and so also the time the
// process waited for a CPU on a busy machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
