package reliability_test

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/reviewauth/reviewauth/internal/reliability"
)

// TestExclusive: a second process that asks for the machine waits until
// the first test's end releases it, and gets it then.
func TestExclusive(t *testing.T) {
	if os.Getenv("RELIABILITY_EXCLUSIVE_CHILD") != "" {
		reliability.Exclusive(t)
		return
	}
	held := make(chan struct{})
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.Run("holder", func(t *testing.T) {
			reliability.Exclusive(t)
			close(held)
			<-release
		})
	}()
	<-held
	cmd := exec.Command(os.Args[0], "-test.run=^TestExclusive$")
	cmd.Env = append(os.Environ(), "RELIABILITY_EXCLUSIVE_CHILD=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("the second process got the machine while the first test held it (exit %v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	close(release)
	<-done
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the second process, once the machine was released: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second process did not get the machine after it was released")
	}
}
