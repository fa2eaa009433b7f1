// Package clitest runs the example programs' main functions as real
// processes from their own test binaries, for tests of what only a
// process shows (the logging flags, klog's global output), and attacks
// their servers the way the issue describes, for tests of the hardening.
package clitest

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const envMain = "REVIEWAUTH_EXAMPLE_MAIN"

// MaybeRunMain runs main and exits when the test binary was started by
// [Start] as the example program. Call it first in TestMain.
func MaybeRunMain(main func()) {
	if os.Getenv(envMain) == "1" {
		main()
		os.Exit(0)
	}
}

// Buffer is a bytes buffer safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Proc is an example program running as a process.
type Proc struct {
	// Addr is what the program printed after "listening on ".
	Addr           string
	Stdout, Stderr *Buffer
	cmd            *exec.Cmd
	exited         chan error
}

// Start runs the test binary as the example program with args (see
// MaybeRunMain) and returns once it prints "listening on ADDR". The
// process is stopped when the test ends.
func Start(t testing.TB, args ...string) *Proc {
	t.Helper()
	p := &Proc{Stdout: &Buffer{}, Stderr: &Buffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(os.Args[0], args...)
	p.cmd.Env = append(os.Environ(), envMain+"=1")
	pr, pw := io.Pipe()
	p.cmd.Stdout = io.MultiWriter(p.Stdout, pw)
	p.cmd.Stderr = p.Stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait(); pw.Close() }()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				select {
				case ready <- a:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	t.Cleanup(func() { p.Stop(t) })
	select {
	case p.Addr = <-ready:
	case err := <-p.exited:
		p.exited <- err
		t.Fatalf("%q exited before listening: %v\nstderr:\n%s", args, err, p.Stderr)
	case <-time.After(60 * time.Second):
		t.Fatalf("%q did not listen within 60s\nstderr:\n%s", args, p.Stderr)
	}
	return p
}

// Stop sends SIGTERM and waits for the program to exit; it fails the test
// if the program does not exit cleanly within 30s. Calling it again does
// nothing.
func (p *Proc) Stop(t testing.TB) { p.Terminate(t) }

// Terminate is Stop, and returns how long the program took to exit after
// SIGTERM (zero if it had exited already).
func (p *Proc) Terminate(t testing.TB) time.Duration {
	t.Helper()
	if p.cmd.ProcessState != nil {
		return 0
	}
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			t.Errorf("program exited with %v after SIGTERM\nstderr:\n%s", err, p.Stderr)
		}
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Errorf("program did not exit within 30s of SIGTERM")
	}
	return time.Since(start)
}

// Pid is the program's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Output is what the program wrote, standard output then standard error.
func (p *Proc) Output() string { return p.Stdout.String() + p.Stderr.String() }

var insecure = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}

// HoldRefused makes n connections to the TLS server at addr, each with an
// unauthenticated request that is refused: half POST path announcing a
// 100,000-byte body they never send, half keep-alive GETs of path. It
// checks that each is answered with want and closed by the server, all
// within 60s, and returns an error describing the first that was not.
func HoldRefused(addr, path string, n, want int) error {
	type result struct{ err error }
	results := make(chan result, n)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for i := range n {
		c, err := tls.Dial("tcp", addr, insecure)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: proxy\r\nConnection: keep-alive\r\n\r\n", path)
		if i%2 == 0 {
			req = fmt.Sprintf("POST %s HTTP/1.1\r\nHost: proxy\r\nContent-Length: 100000\r\n\r\n", path)
		}
		if _, err := io.WriteString(c, req); err != nil {
			return err
		}
		go func() {
			_ = c.SetReadDeadline(deadline)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				results <- result{fmt.Errorf("connection %d (%q): no answer: %w", i, req, err)}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				results <- result{fmt.Errorf("connection %d: %d; want %d", i, resp.StatusCode, want)}
				return
			}
			if _, err := br.ReadByte(); err != io.EOF {
				results <- result{fmt.Errorf("connection %d (%q): answered, then read %v; want the connection closed", i, req, err)}
				return
			}
			results <- result{}
		}()
	}
	var first error
	for range n {
		if r := <-results; r.err != nil && first == nil {
			first = r.err
		}
	}
	return first
}

// Run runs the test binary as the example program with args (see
// MaybeRunMain) until it exits, within 60s, and returns its exit code and
// what it wrote, standard output then standard error.
func Run(t testing.TB, args ...string) (code int, output string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envMain+"=1")
	out := &Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%q did not exit within 60s\noutput:\n%s", args, out)
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// rawVersion is the shape of --version=raw: k8s.io/component-base's
// verflag prints "%#v" of a version.Info (kube-rbac-proxy v0.21.0 too).
var rawVersion = regexp.MustCompile(`^version\.Info\{Major:"", Minor:"", EmulationMajor:"", EmulationMinor:"", MinCompatibilityMajor:"", MinCompatibilityMinor:"", ` +
	`GitVersion:"(v[^"]+|\(devel\))", GitCommit:"([0-9a-f]+(-dirty)?)?", GitTreeState:"(clean|dirty|)", BuildDate:"[0-9TZ:.+-]*", ` +
	`GoVersion:"go1\.[^"]+", Compiler:"gc", Platform:"[a-z0-9]+/[a-z0-9]+"\}\n$`)

// CheckExits checks how the program named name exits, as cli.Main makes
// every example exit: --help and -h print the usage and exit 0 (as
// kube-rbac-proxy, cobra and Go's flag package do), an unknown flag is
// logged as "NAME failed" naming the flag and exits 1, --version prints
// the version and exits 0, --version=raw prints component-base's
// version.Info (rawVersion) alone and exits 0.
func CheckExits(t *testing.T, name string) {
	t.Helper()
	for _, tt := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--help"}, 0, []string{"Usage of " + name, "--kubeconfig"}},
		{[]string{"-h"}, 0, []string{"Usage of " + name, "--kubeconfig"}},
		{[]string{"--no-such-flag"}, 1, []string{`"` + name + ` failed"`, "unknown flag: --no-such-flag"}},
		{[]string{"--version"}, 0, []string{name + " "}},
		{[]string{"--version=raw"}, 0, []string{"version.Info{"}},
	} {
		code, out := Run(t, tt.args...)
		if code != tt.code {
			t.Errorf("%s %q exited %d; want %d\noutput:\n%s", name, tt.args, code, tt.code, out)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s %q output lacks %q:\n%s", name, tt.args, w, out)
			}
		}
		if tt.args[0] == "--version=raw" && !rawVersion.MatchString(out) {
			t.Errorf("%s --version=raw = %q; want the shape %s", name, out, rawVersion)
		}
	}
}
