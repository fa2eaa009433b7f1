package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
)

// envAttack carries an [AttackSpec] to the attacker process.
const envAttack = "REVIEWAUTH_ATTACK"

// attackerNice is the attacker process's nice value: the server it attacks
// is scheduled first, as one attacked from other machines would be; the
// attack still takes whatever CPU the server leaves.
const attackerNice = 10

// AttackSpec is an attack run by [StartAttack] in a process of its own.
type AttackSpec struct {
	// Addr is the server's host:port; URL its URL, for JunkHTTP.
	Addr, URL string
	// Kind is a connection attack ([Flood]), or "junk-http" (JunkHTTP of
	// URL) or "junk-grpc" (calls of Method, each with a junk token both
	// in the authorization metadata and as field 1 of the request, as the
	// CSI SnapshotMetadata API carries it).
	Kind Attack
	// N is the number of attackers.
	N int
	// Path is the HTTP path or gRPC method.
	Path string
	// Genuine is a token of the cluster, for [JunkTokens].
	Genuine string
	// PerConn is the number of calls a junk-grpc attacker runs at a time
	// on its connection.
	PerConn int
	// Run names this attack's junk tokens (distinct from every other
	// run's); empty means a random name.
	Run string
	// Namespace and Name are a junk-grpc request's fields 2 and 3 (the
	// namespace and snapshot_name of the CSI SnapshotMetadata API), so
	// that the request is well formed and a server that checks its
	// arguments before the token (as external-snapshot-metadata's
	// sidecar does, refusing a request without them with
	// InvalidArgument and no TokenReview) must still check the token.
	Namespace, Name string
	// Sources spreads the attackers over this many loopback source
	// addresses ([SourceAddr]); 0 or 1 means the legitimate clients' own.
	Sources int
}

// The junk attacks of AttackSpec.Kind.
const (
	JunkHTTPAttack Attack = "junk-http"
	JunkGRPCAttack Attack = "junk-grpc"
)

// AttackResult is what an attack process reports when it stops.
type AttackResult struct {
	Conns, Streams, Sent int64
}

// MaybeAttack runs the attack the test binary was started for by
// [StartAttack] and exits. Call it first in TestMain.
func MaybeAttack() {
	v := os.Getenv(envAttack)
	if v == "" {
		return
	}
	var spec AttackSpec
	if err := json.Unmarshal([]byte(v), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "attack:", err)
		os.Exit(2)
	}
	// The signals stay registered until the process exits: Finish sends
	// SIGTERM and then closes stdin, and had the stdin reader's stop
	// unregistered them before the (asynchronous) signal arrived, the
	// runtime would have ended the process by SIGTERM with no result
	// ("attack process: signal: terminated", seen on a loaded machine).
	sigCtx, _ := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	ctx, cancel := context.WithCancel(sigCtx)
	// The test closes stdin when it goes away: stop then too.
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	var out sync.Mutex
	res := runAttack(ctx, spec, func() {
		out.Lock()
		defer out.Unlock()
		fmt.Fprintln(os.Stdout, readyLine)
	})
	out.Lock()
	_ = json.NewEncoder(os.Stdout).Encode(res)
	os.Exit(0)
}

// readyLine is what an attack process prints once every attacker has
// made its first attempt.
const readyLine = "ready"

func runAttack(ctx context.Context, spec AttackSpec, ready func()) AttackResult {
	o := FloodOptions{Path: spec.Path, Sources: spec.Sources, Ready: ready}
	switch spec.Kind {
	case JunkHTTPAttack:
		return AttackResult{Sent: JunkHTTP(ctx, spec.URL, spec.N, JunkTokens(spec.Genuine, spec.Run), o)}
	case JunkGRPCAttack:
		junk := JunkTokens(spec.Genuine, spec.Run)
		creds := grpc.WithTransportCredentials(credentials.NewTLS(attackerTLS("h2")))
		sent := JunkGRPC(ctx, spec.N, max(spec.PerConn, 1), func(a int) (*grpc.ClientConn, error) {
			d := o.dialer(a)
			return grpc.NewClient(spec.Addr, creds, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return d.DialContext(ctx, "tcp", addr)
			}))
		}, func(ctx context.Context, cc *grpc.ClientConn, i int) error {
			return junkCall(ctx, cc, spec.Path, junk(i), spec.Namespace, spec.Name)
		}, ready)
		return AttackResult{Sent: sent}
	}
	st := Flood(ctx, spec.Addr, spec.Kind, spec.N, o)
	return AttackResult{Conns: st.Conns.Load(), Streams: st.Streams.Load()}
}

// junkCall calls method with token in the authorization metadata and as
// field 1 of the request (a length-delimited field: a string), fields, if
// not empty, as fields 2, 3, ..., and reads the answer until the call
// ends.
func junkCall(ctx context.Context, cc *grpc.ClientConn, method, token string, fields ...string) error {
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	s, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}
	msg := JunkRequest(token, fields...)
	if err := s.SendMsg(&msg); err != nil {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	for {
		var resp []byte
		if err := s.RecvMsg(&resp); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// JunkRequest is a request message in protobuf's wire format with token as
// field 1 and fields, if not empty, as fields 2, 3, ... (all strings).
func JunkRequest(token string, fields ...string) []byte {
	var msg []byte
	for i, f := range append([]string{token}, fields...) {
		if f == "" {
			continue
		}
		msg = appendVarint(msg, uint64(i+1)<<3|2) // field i+1, length-delimited
		msg = appendVarint(msg, uint64(len(f)))
		msg = append(msg, f...)
	}
	return msg
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// Attacker is an attack running in a process of its own.
type Attacker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *readyWriter

	mu     sync.Mutex
	done   bool
	result AttackResult
	err    error
}

// Spawn runs spec in a new process of this program (whose main, or
// TestMain, calls [MaybeAttack] first), niced, so that the attackers' own
// work (their TLS handshakes, HTTP/2 framing) competes with the server as
// little as an attack from other machines would. Finish stops it.
func Spawn(spec AttackSpec) (*Attacker, error) {
	if spec.Run == "" {
		spec.Run = strconv.FormatUint(rand.Uint64(), 36)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	a := &Attacker{cmd: exec.Command(os.Args[0], "-test.run=^$"), out: &readyWriter{ready: make(chan struct{})}}
	a.cmd.Env = append(os.Environ(), envAttack+"="+string(b))
	a.cmd.Stdout = a.out
	a.cmd.Stderr = os.Stderr
	if a.stdin, err = a.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := a.cmd.Start(); err != nil {
		return nil, err
	}
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, a.cmd.Process.Pid, attackerNice)
	return a, nil
}

// StartAttack is [Spawn] for a test binary (whose TestMain calls
// [MaybeAttack]): the attack is stopped when the test ends, if Stop was
// not called.
func StartAttack(t testing.TB, spec AttackSpec) *Attacker {
	t.Helper()
	a, err := Spawn(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop(t) })
	return a
}

// Ready is closed once every attacker has made its first attempt.
func (a *Attacker) Ready() <-chan struct{} { return a.out.ready }

// Pid is the attack process's id.
func (a *Attacker) Pid() int { return a.cmd.Process.Pid }

// Finish ends the attack and returns what it reported; calling it again
// returns the same.
func (a *Attacker) Finish() (AttackResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done {
		return a.result, a.err
	}
	a.done = true
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	a.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			a.err = fmt.Errorf("attack process: %w", err)
		}
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		<-done
		a.err = errors.New("the attack process did not stop within 30s")
	}
	if err := json.Unmarshal(a.out.last(), &a.result); err != nil && a.err == nil {
		a.err = fmt.Errorf("attack process output %q: %w", a.out.String(), err)
	}
	return a.result, a.err
}

// Stop ends the attack and returns what it reported.
func (a *Attacker) Stop(t testing.TB) AttackResult {
	t.Helper()
	res, err := a.Finish()
	if err != nil {
		t.Error(err)
	}
	return res
}

// readyWriter keeps an attack process's output and closes ready when it
// prints readyLine.
type readyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan struct{}
	seen  bool
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.seen && bytes.Contains(w.buf.Bytes(), []byte(readyLine+"\n")) {
		w.seen = true
		close(w.ready)
	}
	return len(p), nil
}

func (w *readyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// last is the output's last line.
func (w *readyWriter) last() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := bytes.Split(bytes.TrimSpace(w.buf.Bytes()), []byte("\n"))
	return lines[len(lines)-1]
}

// rawCodec passes messages as bytes, for calls whose request the attacker
// encodes itself.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// AttackFunc returns an attack for [Measure] that runs spec with
// [StartAttack] until its context is done, and stores what it reported in
// res.
func AttackFunc(t testing.TB, spec AttackSpec, res *AttackResult) func(ctx context.Context) {
	return func(ctx context.Context) {
		a := StartAttack(t, spec)
		<-ctx.Done()
		*res = a.Stop(t)
	}
}
