//go:build unix

package serving

import (
	"math"
	"os"
	"syscall"
)

// openFileLimit is the process's soft limit of open files, or 0 if unknown.
func openFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return rl.Cur
}

// processFiles counts the process's open files against its open-file
// limit, or is nil if either is unknown.
func processFiles() *fileGauge {
	limit := openFileLimit()
	if limit == 0 || limit > math.MaxInt32 {
		return nil
	}
	if _, err := openFiles(); err != nil {
		return nil
	}
	return &fileGauge{limit: int(limit), open: openFiles}
}

// openFiles counts the process's open files: the size of /proc/self/fd
// (Linux 6.2 and later), else its entries.
func openFiles() (int, error) {
	if fi, err := os.Stat("/proc/self/fd"); err == nil && fi.Size() > 0 {
		return int(fi.Size()), nil
	}
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, err
	}
	return len(names) - 1, nil // less d itself
}
