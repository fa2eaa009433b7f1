package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is one child binary run in its own process group, with its output
// appended to a log file. Starting it again after stop reuses the same
// arguments and log file. Methods are safe for concurrent use.
type process struct {
	name    string
	path    string
	args    []string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited; nil when never started
	err  error         // cmd.Wait's result, valid after done is closed
}

// start launches the process. The goroutine started here only waits for the
// child and ends when it exits; stop always waits for it.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("cluster: %s already running", p.name)
		}
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("cluster: open %s log: %w", p.name, err)
	}
	defer f.Close() // the child keeps its own descriptor
	fmt.Fprintf(f, "=== cluster: starting %s at %s\n", p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Own process group so stop reaches any children; SIGKILL if the test
	// binary dies (for example on a go test -timeout panic) so nothing is left behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cluster: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// exited returns a channel closed when the current run has exited, or nil
// when the process was never started.
func (p *process) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// running reports whether the process is started and has not exited.
func (p *process) running() bool {
	d := p.exited()
	if d == nil {
		return false
	}
	select {
	case <-d:
		return false
	default:
		return true
	}
}

// exitErr returns how the last run ended; valid once exited() is closed.
func (p *process) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// stop sends SIGTERM to the process group, waits up to grace, then sends
// SIGKILL and waits for the exit. A zero grace kills at once. Stopping a
// process that is not running is a no-op.
func (p *process) stop(grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if done == nil {
		return
	}
	pgid := -cmd.Process.Pid
	if grace > 0 {
		_ = syscall.Kill(pgid, syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		}
	}
	// The group may still hold children even after the leader exited.
	_ = syscall.Kill(pgid, syscall.SIGKILL)
	<-done
}

// tail returns the last n lines of the log file.
func (p *process) tail(n int) string {
	if n <= 0 {
		return ""
	}
	f, err := os.Open(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s log: %v)", p.name, err)
	}
	defer f.Close()
	// Read at most the last 1 MiB: plenty for a tail of klog lines.
	const max = 1 << 20
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(-max, io.SeekEnd)
	}
	b, err := io.ReadAll(f)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(cannot read %s log: %v)", p.name, err)
	}
	b = bytes.TrimRight(b, "\n")
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n--
			if n == 0 {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}
