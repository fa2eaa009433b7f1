package reliability

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// ExclusiveFile is the lock file [Exclusive] holds, in the system's
// temporary directory.
const ExclusiveFile = "reviewauth-floods.lock"

// Exclusive makes t wait until no other test that called it, in any
// process of this machine, is running, and holds the machine until t
// ends. The flood tests judge timings on a 2-core machine: run beside
// another flood test (go test runs the packages of a module in parallel),
// the sidecar's TestFloods answered 83-87% of new connections within 1 s
// in all three attempts where it answers 100% alone, and what it then
// measures is the other test's attack, not its own.
func Exclusive(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), ExclusiveFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("flood lock: %v", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		t.Fatalf("flood lock: %v", err)
	}
	// Closing the file releases the lock, also if the process dies.
	t.Cleanup(func() { f.Close() })
}
