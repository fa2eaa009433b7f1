package reliability_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/reviewauth/reviewauth/internal/reliability"
)

// TestExclusive: while a test holds the machine, another holder (any open
// of the lock file, as another process's) cannot take it; once the test
// ends it can, and a later Exclusive gets it without waiting.
func TestExclusive(t *testing.T) {
	probe := func() error {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), reliability.ExclusiveFile), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close() // releases the probe's lock, if it got it
		return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	t.Run("holder", func(t *testing.T) {
		reliability.Exclusive(t)
		if err := probe(); !errors.Is(err, unix.EWOULDBLOCK) {
			t.Fatalf("taking the lock while a test holds it = %v; want EWOULDBLOCK", err)
		}
	})
	if err := probe(); err != nil {
		t.Fatalf("taking the lock once the holder ended = %v; want it free", err)
	}
	t.Run("next", func(t *testing.T) { reliability.Exclusive(t) }) // would hang if still held
}
