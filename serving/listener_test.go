package serving_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/serving"
)

// chanListener accepts the connections pushed to it.
type chanListener struct {
	conns  chan net.Conn
	closed chan struct{}
	port   atomic.Int32
}

func newChanListener() *chanListener {
	return &chanListener{conns: make(chan net.Conn, 1), closed: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}
func (l *chanListener) Close() error   { close(l.closed); return nil }
func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// push queues a connection from 127.0.0.1 and returns the client's end.
func (l *chanListener) push() net.Conn { return l.pushFrom("127.0.0.1") }

// pushFrom queues a connection from ip and returns the client's end.
func (l *chanListener) pushFrom(ip string) net.Conn {
	a, b := net.Pipe()
	l.conns <- addrConn{a, &net.TCPAddr{IP: net.ParseIP(ip), Port: int(l.port.Add(1))}}
	return b
}

// addrConn is a pipe with a TCP remote address.
type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }

// isClosed reports whether the server closed the connection whose client
// end is peer, without waiting: net.Pipe reports the other end's close
// before a deadline that has passed.
func isClosed(t testing.TB, peer net.Conn) bool {
	t.Helper()
	_ = peer.SetReadDeadline(time.Unix(1, 0))
	_, err := peer.Read(make([]byte, 1))
	switch {
	case errors.Is(err, io.EOF):
		return true
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false
	}
	t.Fatalf("reading a client end: %v", err)
	return false
}

// sendByte makes the server's end c read one byte from the client end
// peer (a net.Pipe write waits for the read).
func sendByte(t testing.TB, c, peer net.Conn) {
	t.Helper()
	go func() { _, _ = peer.Write([]byte{'x'}) }()
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
}

// admitted is a connection the listener accepted: the server's end and
// the client's.
type admitted struct{ c, peer net.Conn }

func accept(t testing.TB, inner *chanListener, ln net.Listener, ip string) admitted {
	t.Helper()
	peer := inner.pushFrom(ip)
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return admitted{c, peer}
}

const testGrace = serving.DefaultEvictionGrace

// TestLimitListenerEvictionOrder: with the budget full of connections in
// every stage, each new connection is admitted at once by closing one, in
// the documented order: silent, refused, waiting, handshake, idle, first
// request, busy.
func TestLimitListenerEvictionOrder(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	inner := newChanListener()
	var logs lines
	ln := serving.AdmissionListener(inner, 7, serving.LimitOptions{Logger: logs.logger(), Clock: clk}, serving.AdmissionTestConfig{TLS: true})
	defer ln.Close()
	// Made in the reverse of the order they go, so that age alone would
	// choose the opposite.
	busy := accept(t, inner, ln, "127.0.0.1")
	serving.WorkStart(busy.c)
	serving.WorkEnd(busy.c, true)
	serving.WorkStart(busy.c)
	first := accept(t, inner, ln, "127.0.0.1")
	serving.WorkStart(first.c)
	idle := accept(t, inner, ln, "127.0.0.1")
	serving.WorkStart(idle.c)
	serving.WorkEnd(idle.c, true)
	handshake := accept(t, inner, ln, "127.0.0.1")
	sendByte(t, handshake.c, handshake.peer)
	waiting := accept(t, inner, ln, "127.0.0.1")
	sendByte(t, waiting.c, waiting.peer)
	serving.HandshakeDone(waiting.c)
	refused := accept(t, inner, ln, "127.0.0.1")
	serving.WorkStart(refused.c)
	serving.WorkEnd(refused.c, false)
	serving.WorkStart(refused.c) // junk, again: still refused
	silent := accept(t, inner, ln, "127.0.0.1")
	for _, tt := range []struct {
		conn  admitted
		stage string
	}{{silent, "silent"}, {refused, "refused"}, {waiting, "waiting"}, {handshake, "handshake"}, {idle, "idle"}, {first, "first-request"}, {busy, "busy"}} {
		if got := serving.StageOf(tt.conn.c); got != tt.stage {
			t.Fatalf("stage = %q; want %q", got, tt.stage)
		}
	}
	clk.Step(serving.DefaultProgressWindow) // past every grace, and no progress within the window
	order := []admitted{silent, refused, waiting, handshake, idle, first, busy}
	for i := range order {
		if i > 0 {
			clk.Step(serving.DefaultEvictionInterval) // one closed to make room per interval
		}
		// From an address of its own: one from the address whose
		// connection was just closed would be taken for its
		// reconnection, which no connection is closed for.
		n := accept(t, inner, ln, fmt.Sprintf("127.0.1.%d", i+1))
		// Busy, and newer than the busy one: the last to go.
		serving.WorkStart(n.c)
		serving.WorkEnd(n.c, true)
		serving.WorkStart(n.c)
		for j, c := range order {
			if got, want := isClosed(t, c.peer), j <= i; got != want {
				t.Fatalf("after %d new connections, connection %d closed = %v; want %v", i+1, j, got, want)
			}
		}
	}
	found := false
	for _, l := range logs.snapshot() {
		if strings.Contains(l, "connection budget full") && strings.Contains(l, `"evicted.silent"=1`) {
			found = true
		}
	}
	if !found {
		t.Errorf("no log line saying a silent connection was closed:\n%s", strings.Join(logs.snapshot(), "\n"))
	}
}

// serverWrite writes one byte from the server's end c to the client end
// peer.
func serverWrite(t testing.TB, c, peer net.Conn) {
	t.Helper()
	_ = peer.SetReadDeadline(time.Time{}) // isClosed leaves one in the past
	go func() { _, _ = io.ReadFull(peer, make([]byte, 1)) }()
	if _, err := c.Write([]byte{'e'}); err != nil {
		t.Fatal(err)
	}
}

// waitAccept admits the next connection in a goroutine; the channel
// receives it (nil if Accept failed).
func waitAccept(ln net.Listener) chan net.Conn {
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			c = nil
		}
		accepted <- c
	}()
	return accepted
}

// fakeLimitListener is a LimitListener of max on a fake clock, closed
// when the test ends.
func fakeLimitListener(t *testing.T, max int) (*clocktesting.FakeClock, *chanListener, net.Listener) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	inner := newChanListener()
	ln := serving.LimitListener(inner, max, serving.LimitOptions{Clock: clk})
	t.Cleanup(func() { ln.Close() })
	return clk, inner, ln
}

// TestLimitListenerProgress (issue #32): a connection that moved bytes for
// a request in progress within the progress window (a watch sending
// events, an upload) or served a request is never closed to make room
// while a connection that did neither is admitted, even one in its grace:
// the newcomer waits for that one. Among equals the youngest goes first.
// A refused request's bytes are no progress; a watch that stops moving for
// the window is judged by its stage again.
func TestLimitListenerProgress(t *testing.T) {
	t.Parallel()
	// Among equals the youngest goes first, but of silent connections the
	// oldest (the youngest may be a newcomer whose bytes are not read yet).
	for _, tt := range []struct {
		name    string
		waiting bool // a byte received: the waiting stage, else silent
		closed  int  // which of the three, oldest first, is closed
	}{
		{"youngest first among equals", true, 2},
		{"oldest first among silent ones", false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk, inner, ln := fakeLimitListener(t, 3)
			var conns []admitted
			for range 3 {
				c := accept(t, inner, ln, "127.0.0.1")
				if tt.waiting {
					sendByte(t, c.c, c.peer)
				}
				conns = append(conns, c)
				clk.Step(time.Second)
			}
			clk.Step(testGrace)
			accept(t, inner, ln, "127.0.0.1")
			for i, c := range conns {
				if got := isClosed(t, c.peer); got != (i == tt.closed) {
					t.Fatalf("connection %d of 3 (oldest first) closed = %v; want only connection %d closed", i, got, tt.closed)
				}
			}
		})
	}
	t.Run("a moving watch outlives young attackers", func(t *testing.T) {
		t.Parallel()
		clk, inner, ln := fakeLimitListener(t, 2)
		watch := accept(t, inner, ln, "127.0.0.1")
		sendByte(t, watch.c, watch.peer)
		serving.WorkStart(watch.c)
		clk.Step(10 * time.Second) // long past its grace
		serverWrite(t, watch.c, watch.peer)
		attacker := accept(t, inner, ln, "127.0.0.1") // in its grace
		inner.push()
		accepted := waitAccept(ln)
		waitFor(t, 10*time.Second, "Accept to wait for the attacker's grace", clk.HasWaiters)
		if isClosed(t, watch.peer) || isClosed(t, attacker.peer) {
			t.Fatal("closed a connection while the only one without progress was in its grace")
		}
		select {
		case <-accepted:
			t.Fatal("admitted a newcomer by closing the moving watch")
		default:
		}
		serverWrite(t, watch.c, watch.peer)
		clk.Step(testGrace)
		if c := <-accepted; c == nil {
			t.Fatal("Accept failed")
		}
		if !isClosed(t, attacker.peer) || isClosed(t, watch.peer) {
			t.Fatal("want the attacker closed at its grace, the watch kept")
		}
	})
	t.Run("an upload's reads are progress", func(t *testing.T) {
		t.Parallel()
		clk, inner, ln := fakeLimitListener(t, 2)
		upload := accept(t, inner, ln, "127.0.0.1")
		sendByte(t, upload.c, upload.peer)
		serving.WorkStart(upload.c)
		clk.Step(time.Second)
		other := accept(t, inner, ln, "127.0.0.1")
		sendByte(t, other.c, other.peer) // waiting: a later stage than silent, earlier than first request
		clk.Step(serving.DefaultProgressWindow)
		sendByte(t, upload.c, upload.peer) // the body, within the window
		accept(t, inner, ln, "127.0.0.1")
		if !isClosed(t, other.peer) || isClosed(t, upload.peer) {
			t.Fatal("want the waiting connection closed, the upload kept")
		}
	})
	t.Run("refused requests are no progress", func(t *testing.T) {
		t.Parallel()
		clk, inner, ln := fakeLimitListener(t, 2)
		junk := accept(t, inner, ln, "127.0.0.1")
		sendByte(t, junk.c, junk.peer)
		serving.WorkStart(junk.c)
		sendByte(t, junk.c, junk.peer)
		serverWrite(t, junk.c, junk.peer) // the 401
		serving.WorkEnd(junk.c, false)
		clk.Step(time.Second)
		// A silent connection in its grace: had the junk counted as
		// progress, the newcomer would wait for this one's grace.
		silent := accept(t, inner, ln, "127.0.0.1")
		inner.push()
		select {
		case c := <-waitAccept(ln):
			if c == nil {
				t.Fatal("Accept failed")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the newcomer waited: the refused connection's bytes counted as progress")
		}
		if !isClosed(t, junk.peer) || isClosed(t, silent.peer) {
			t.Fatal("want the refused connection closed, the silent one in its grace kept")
		}
	})
	t.Run("a watch that stops moving is judged by its stage", func(t *testing.T) {
		t.Parallel()
		clk, inner, ln := fakeLimitListener(t, 2)
		watch := accept(t, inner, ln, "127.0.0.1")
		sendByte(t, watch.c, watch.peer)
		serving.WorkStart(watch.c)
		serverWrite(t, watch.c, watch.peer)
		idle := accept(t, inner, ln, "127.0.0.1")
		serving.WorkStart(idle.c)
		serving.WorkEnd(idle.c, true) // served: progress for the window
		clk.Step(serving.DefaultProgressWindow)
		// Neither moved within the window: idle goes before first request.
		accept(t, inner, ln, "127.0.0.1")
		if !isClosed(t, idle.peer) || isClosed(t, watch.peer) {
			t.Fatal("want the idle connection closed, the quiet watch kept (stage order)")
		}
	})
}

// TestLimitListenerGrace: a connection is not closed to make room before
// it has spent EvictionGrace in its stage (at grace-1ns it is kept, and
// the new connection waits); at the grace it is.
// A connection entering a new stage starts its grace again. Closing the
// listener releases a waiting Accept.
func TestLimitListenerGrace(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	inner := newChanListener()
	ln := serving.LimitListener(inner, 2, serving.LimitOptions{Clock: clk})
	a := accept(t, inner, ln, "127.0.0.1")
	b := accept(t, inner, ln, "127.0.0.1")
	clk.Step(testGrace - time.Nanosecond)
	sendByte(t, b.c, b.peer) // b: waiting, its grace starts again
	inner.push()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			c = nil
		}
		accepted <- c
	}()
	waitFor(t, 10*time.Second, "Accept to wait for a grace to pass", clk.HasWaiters)
	if isClosed(t, a.peer) || isClosed(t, b.peer) {
		t.Fatal("a connection younger than the grace was closed")
	}
	select {
	case <-accepted:
		t.Fatal("a connection was admitted while every one was younger than the grace")
	default:
	}
	clk.Step(time.Nanosecond) // a (silent) reaches the grace
	if c := <-accepted; c == nil {
		t.Fatal("Accept failed")
	}
	if !isClosed(t, a.peer) || isClosed(t, b.peer) {
		t.Fatal("want the silent connection closed at its grace, the waiting one kept")
	}
	// Full again, every connection young: Close releases Accept.
	inner.push()
	go func() {
		_, err := ln.Accept()
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept() after Close = %v; want net.ErrClosed", err)
		}
		accepted <- nil
	}()
	waitFor(t, 10*time.Second, "Accept to wait", clk.HasWaiters)
	ln.Close()
	<-accepted
}

// acceptAll admits connections from ln in a goroutine until ln closes.
func acceptAll(ln net.Listener) chan net.Conn {
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	return accepted
}

// TestLimitListenerNewestFirst: connections waiting for room are admitted
// newest first, from the source with the fewest connections admitted
// first.
func TestLimitListenerNewestFirst(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		sources []string // of the waiting connections, in arrival order
		want    []int    // their admission order
	}{
		{"newest first", []string{"10.0.0.1", "10.0.0.1"}, []int{1, 0}},
		{"a source with none admitted first", []string{"10.0.0.2", "10.0.0.1"}, []int{0, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			inner := newChanListener()
			ln := serving.LimitListener(inner, 2, serving.LimitOptions{Clock: clk})
			defer ln.Close()
			accept(t, inner, ln, "10.0.0.1")
			accept(t, inner, ln, "10.0.0.1")
			accepted := acceptAll(ln)
			ports := map[int]int{}
			for i, src := range tt.sources {
				inner.pushFrom(src)
				ports[int(inner.port.Load())] = i
				waitFor(t, 10*time.Second, "the connection to wait", func() bool { return serving.Pending(ln) == i+1 })
			}
			clk.Step(testGrace)
			for i, want := range tt.want {
				if i > 0 {
					waitFor(t, 10*time.Second, "the next eviction to wait for its turn", clk.HasWaiters)
					clk.Step(serving.DefaultEvictionInterval)
				}
				c := <-accepted
				if got := ports[c.RemoteAddr().(*net.TCPAddr).Port]; got != want {
					t.Fatalf("admitted waiting connection %d; want %d", got, want)
				}
			}
		})
	}
}

// TestLimitListenerEvictionInterval: with the budget full, connections
// are closed to make room at most once per EvictionInterval: a second
// newcomer waits until the interval has passed since the first (kept at
// the interval less 1ns, admitted at it).
func TestLimitListenerEvictionInterval(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	inner := newChanListener()
	ln := serving.LimitListener(inner, 2, serving.LimitOptions{Clock: clk})
	defer ln.Close()
	a := accept(t, inner, ln, "10.0.0.1")
	b := accept(t, inner, ln, "10.0.0.1")
	sendByte(t, a.c, a.peer) // waiting, where the youngest goes first
	sendByte(t, b.c, b.peer)
	clk.Step(testGrace)
	accept(t, inner, ln, "10.0.0.1") // closes b, the youngest
	if !isClosed(t, b.peer) || isClosed(t, a.peer) {
		t.Fatal("want the youngest connection closed for the first newcomer")
	}
	accepted := acceptAll(ln)
	inner.push()
	waitFor(t, 10*time.Second, "the second newcomer to wait", func() bool { return serving.Pending(ln) == 1 && clk.HasWaiters() })
	clk.Step(serving.DefaultEvictionInterval - time.Nanosecond)
	if isClosed(t, a.peer) {
		t.Fatal("a second connection was closed to make room within the interval")
	}
	clk.Step(time.Nanosecond)
	<-accepted
	if !isClosed(t, a.peer) {
		t.Fatal("the second newcomer was admitted without closing a (the first newcomer is in its grace)")
	}
}

// TestLimitListenerReconnectPassedOver: newest first, but a connection
// arriving from a source one of whose connections just closed (presumably
// its reconnection) is passed over in the admission turn it arrived in,
// and no connection is closed for it until it has waited two eviction
// intervals: a newcomer that arrived just before a reconnection, and was
// taken for it, is admitted then, not overtaken by reconnection after
// reconnection.
func TestLimitListenerReconnectPassedOver(t *testing.T) {
	t.Parallel()
	const grace, interval = 10 * time.Millisecond, 200 * time.Millisecond
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	inner := newChanListener()
	// A budget of two (two may wait), one of them busy: never the victim.
	ln := serving.LimitListener(inner, 2, serving.LimitOptions{Clock: clk,
		AdmissionOptions: serving.AdmissionOptions{EvictionGrace: grace, EvictionInterval: interval}})
	defer ln.Close()
	busy := accept(t, inner, ln, "10.0.0.1")
	serving.WorkStart(busy.c)
	serving.WorkEnd(busy.c, true)
	serving.WorkStart(busy.c)
	a := accept(t, inner, ln, "10.0.0.1")
	accepted := acceptAll(ln)
	admitOne := func(what string, step time.Duration) net.Conn {
		t.Helper()
		waitFor(t, 10*time.Second, what, clk.HasWaiters)
		clk.Step(step)
		return <-accepted
	}
	clk.Step(grace)
	inner.pushFrom("10.0.0.1")
	n1 := <-accepted // closes a
	if !isClosed(t, a.peer) {
		t.Fatal("a was not closed for the first newcomer")
	}
	// The newcomer arrives first, then a's reconnection.
	clk.Step(time.Millisecond)
	inner.pushFrom("10.0.0.1")
	newcomer := int(inner.port.Load())
	waitFor(t, 10*time.Second, "the newcomer to wait", func() bool { return serving.Pending(ln) == 1 })
	inner.pushFrom("10.0.0.1")
	waitFor(t, 10*time.Second, "the reconnection to wait", func() bool { return serving.Pending(ln) == 2 })
	second := admitOne("the second admission", interval-time.Millisecond) // closes n1
	if got := second.RemoteAddr().(*net.TCPAddr).Port; got == newcomer {
		t.Fatalf("the newcomer, the first arrival after a close, was admitted at once; want it passed over once")
	}
	_ = n1
	inner.pushFrom("10.0.0.1") // n1's reconnection: newest, passed over
	waitFor(t, 10*time.Second, "n1's reconnection to wait", func() bool { return serving.Pending(ln) == 2 })
	// The newcomer has now waited two intervals: it is perhaps a newcomer
	// taken for a reconnection, and a connection is closed for it (but
	// for no presumed reconnection that has waited less).
	third := admitOne("the third admission", interval+time.Millisecond)
	if got := third.RemoteAddr().(*net.TCPAddr).Port; got != newcomer {
		t.Fatalf("third admitted port %d; want the newcomer (%d), not the newest reconnection", got, newcomer)
	}
}

// TestLimitListenerNewcomersFirst: an admission turn takes the newest
// newcomer waiting (an arrival of the last second that is not a presumed
// reconnection) before any presumed reconnection, even one of an earlier
// turn that arrived after it: under a flood that reconnects faster than
// turns come, such reconnections pile up newer than a client's newcomer,
// and newest first it could wait until it was no longer in reach.
func TestLimitListenerNewcomersFirst(t *testing.T) {
	t.Parallel()
	const src = "10.0.0.1"
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	inner := newChanListener()
	ln := serving.LimitListener(inner, 4, serving.LimitOptions{Clock: clk})
	defer ln.Close()
	var held []admitted
	for range 4 {
		held = append(held, accept(t, inner, ln, src)) // in their grace: none is evicted
	}
	accepted := acceptAll(ln)
	port := func(c net.Conn) int { return c.RemoteAddr().(*net.TCPAddr).Port }
	arrive := func(what string) int {
		t.Helper()
		n := serving.Pending(ln)
		inner.pushFrom(src)
		waitFor(t, 10*time.Second, what+" to wait", func() bool { return serving.Pending(ln) == n+1 })
		return int(inner.port.Load())
	}
	// freeOne closes the next held connection, which served nothing (its
	// client may reconnect: the next arrival is presumed to be that), and
	// returns the port admitted in its place.
	freeOne := func() int {
		t.Helper()
		held[0].c.Close()
		held = held[1:]
		return port(<-accepted)
	}
	newcomer := arrive("the newcomer")
	var x []int
	for range 3 {
		x = append(x, arrive("a later newcomer"))
	}
	// Two turns take the two newest newcomers; the two closes that made
	// room await two reconnections.
	for _, want := range []int{x[2], x[1]} {
		if got := freeOne(); got != want {
			t.Fatalf("admitted port %d; want the newest newcomer, %d", got, want)
		}
	}
	r1, r2 := arrive("a reconnection"), arrive("a reconnection")
	// The next turn passes over the reconnections of its interval (they
	// arrived since the last admission) and takes the newest newcomer.
	if got := freeOne(); got != x[0] {
		t.Fatalf("admitted port %d; want the newest newcomer, %d (not the reconnections %d, %d)", got, x[0], r1, r2)
	}
	// The reconnections are now of an earlier turn, and newer than the
	// newcomer: it goes first all the same.
	if got := freeOne(); got != newcomer {
		t.Fatalf("admitted port %d; want the newcomer, %d (not the reconnections of an earlier turn, %d, %d)", got, newcomer, r1, r2)
	}
}

// TestLimitListenerDemand: a connection is closed to make room only for a
// newcomer (an arrival of the last second that is not a presumed
// reconnection), or for a presumed reconnection that has waited two
// eviction intervals; an arrival within a second of a close of a
// connection that served nothing, from the same source, is presumed to be
// its reconnection, one per close; a client's close of a connection it
// was served on awaits none. Each edge is exact.
func TestLimitListenerDemand(t *testing.T) {
	t.Parallel()
	const src = "10.0.0.1"
	twoIntervals := 2 * serving.DefaultEvictionInterval
	for _, tt := range []struct {
		name string
		// served: the admitted connection served a request; closed: it
		// closes, after before; then arrivals come from these sources,
		// after after.
		served, closed bool
		before, after  time.Duration
		arrivals       []string
		// admit: connections then admitted (the budget has room for one
		// more than the held one).
		admit int
		want  string
	}{
		{name: "none waiting", want: "none"},
		{name: "newcomer", arrivals: []string{src}, want: "newcomer"},
		{name: "newcomer, waited WaitedMax less 1ns", arrivals: []string{src}, after: serving.WaitedMax - 1, want: "newcomer"},
		{name: "newcomer, waited WaitedMax", arrivals: []string{src}, after: serving.WaitedMax, want: "none"},
		{name: "after a close of one that served nothing", closed: true, arrivals: []string{src}, want: "none"},
		{name: "its reconnection, waited two intervals less 1ns", closed: true, arrivals: []string{src}, after: twoIntervals - 1, want: "none"},
		{name: "its reconnection, waited two intervals", closed: true, arrivals: []string{src}, after: twoIntervals, want: "passed-over"},
		{name: "its reconnection, waited WaitedMax", closed: true, arrivals: []string{src}, after: serving.WaitedMax, want: "none"},
		{name: "one reconnection per close", closed: true, arrivals: []string{src, src}, want: "newcomer"},
		{name: "from another source", closed: true, arrivals: []string{"10.0.0.2"}, want: "newcomer"},
		{name: "a second after the close", closed: true, before: serving.ReconnectWindow, arrivals: []string{src}, want: "none"},
		{name: "a second and 1ns after the close", closed: true, before: serving.ReconnectWindow + 1, arrivals: []string{src}, want: "newcomer"},
		{name: "after the client's close of one it was served on", served: true, closed: true, arrivals: []string{src}, want: "newcomer"},
		{name: "a newcomer admitted", arrivals: []string{src}, admit: 1, want: "none"},
		{name: "the newer of two newcomers admitted", arrivals: []string{src, src}, admit: 1, want: "newcomer"},
		{name: "a reconnection that waited, admitted", closed: true, arrivals: []string{src}, after: twoIntervals, admit: 1, want: "none"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A budget of two, so that two may wait.
			clk, inner, ln := fakeLimitListener(t, 2)
			held := accept(t, inner, ln, src)
			defer held.c.Close()
			if tt.served {
				serving.WorkStart(held.c)
				serving.WorkEnd(held.c, true)
			}
			if tt.closed {
				held.c.Close()
			}
			clk.Step(tt.before)
			for i, ip := range tt.arrivals {
				peer := inner.pushFrom(ip)
				defer peer.Close()
				waitFor(t, 10*time.Second, "the arrival to wait", func() bool { return serving.Pending(ln) == i+1 })
			}
			clk.Step(tt.after)
			for range tt.admit {
				c, err := ln.Accept()
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
			}
			if got := serving.Demand(ln); got != tt.want {
				t.Errorf("demand = %q; want %q", got, tt.want)
			}
		})
	}
}

// TestLimitListenerAwaitedWhileClosed: a source closed at least once per
// ReconnectWindow keeps every close not yet answered by an arrival
// awaited, however long ago it was made (clients that come back seconds
// after a close, loaded, are still taken for reconnections); once
// ReconnectWindow passes after its last close, none. Each edge is exact.
func TestLimitListenerAwaitedWhileClosed(t *testing.T) {
	t.Parallel()
	const src = "10.0.0.1"
	for _, tt := range []struct {
		name string
		// The first held connection closes, then the second gap later;
		// after after, arrivals come from src.
		gap, after time.Duration
		arrivals   int
		want       string
	}{
		{name: "two closes, two arrivals", gap: 0, after: serving.ReconnectWindow, arrivals: 2, want: "none"},
		{name: "two closes, three arrivals", gap: 0, after: serving.ReconnectWindow, arrivals: 3, want: "newcomer"},
		{name: "the first close long ago, the second within the window", gap: serving.ReconnectWindow, after: serving.ReconnectWindow, arrivals: 2, want: "none"},
		{name: "past the window after the last close", gap: serving.ReconnectWindow, after: serving.ReconnectWindow + 1, arrivals: 1, want: "newcomer"},
		{name: "the source not closed within the window between its closes", gap: serving.ReconnectWindow + 1, after: 0, arrivals: 2, want: "newcomer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A budget of four: two held, the rest may wait.
			clk, inner, ln := fakeLimitListener(t, 4)
			first, second := accept(t, inner, ln, src), accept(t, inner, ln, src)
			defer first.c.Close()
			defer second.c.Close()
			first.c.Close()
			clk.Step(tt.gap)
			second.c.Close()
			clk.Step(tt.after)
			for i := range tt.arrivals {
				peer := inner.pushFrom(src)
				defer peer.Close()
				waitFor(t, 10*time.Second, "the arrival to wait", func() bool { return serving.Pending(ln) == i+1 })
			}
			if got := serving.Demand(ln); got != tt.want {
				t.Errorf("demand = %q; want %q", got, tt.want)
			}
		})
	}
}

// TestLimitListenerArrivalsQueued: what demand is asked of keeps WaitedMax
// of arrivals at most, and what the turns that take the one that waited
// longest are asked of TurnWaitedMax, however many wait: the older ones
// leave as the next one arrives, and the ones admitted as they reach the
// front.
func TestLimitListenerArrivalsQueued(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	inner := newChanListener()
	// A budget of 300, full; then 150 close (their sources' next arrivals
	// are presumed reconnections) and 200 arrive from 200 sources.
	const budget, arrivals = 300, 200
	ln := serving.LimitListener(inner, budget, serving.LimitOptions{Clock: clk})
	defer ln.Close()
	source := func(i int) string { return fmt.Sprintf("10.0.%d.%d", i/200, i%200) }
	var held []admitted
	for i := range budget {
		held = append(held, accept(t, inner, ln, source(i)))
	}
	defer func() {
		for _, h := range held {
			h.c.Close()
		}
	}()
	for _, h := range held[:budget/2] {
		h.c.Close()
	}
	push := func(n int) {
		for i := range n {
			peer := inner.pushFrom(source(i))
			t.Cleanup(func() { peer.Close() })
		}
	}
	wantPending := func(n int) {
		t.Helper()
		waitFor(t, 10*time.Second, "the arrivals to wait", func() bool { return serving.Pending(ln) == n })
	}
	push(arrivals)
	wantPending(arrivals)
	if serving.TurnWaitedMax >= serving.WaitedMax {
		t.Fatalf("TurnWaitedMax %v is not shorter than WaitedMax %v", serving.TurnWaitedMax, serving.WaitedMax)
	}
	// At each step (the time since the first arrivals), one more
	// arrives; the arrivals kept for demand are those of the last
	// WaitedMax, and for the turns those of the last TurnWaitedMax (the
	// bounds excluded).
	at := make([]time.Duration, arrivals)
	kept := func(now, bound time.Duration) int {
		n := 0
		for _, a := range at {
			if a > now-bound {
				n++
			}
		}
		return n
	}
	var now time.Duration
	for i, step := range []struct {
		name string
		at   time.Duration
	}{
		{"at once", 0},
		{"TurnWaitedMax less 1ns later", serving.TurnWaitedMax - 1},
		{"TurnWaitedMax later", serving.TurnWaitedMax},
		{"WaitedMax less 1ns later", serving.WaitedMax - 1},
		{"WaitedMax later", serving.WaitedMax},
	} {
		if i > 0 {
			clk.Step(step.at - now)
			now = step.at
			push(1)
			at = append(at, now)
			wantPending(arrivals + i)
		}
		wantDemand, wantTurns := kept(now, serving.WaitedMax), kept(now, serving.TurnWaitedMax)
		if d, tu := serving.ArrivalsQueued(ln); d != wantDemand || tu != wantTurns {
			t.Errorf("%s: queued %d arrivals for demand, %d for the turns; want %d and %d", step.name, d, tu, wantDemand, wantTurns)
		}
	}
	if got := serving.Demand(ln); got != "newcomer" {
		t.Errorf("demand = %q; want newcomer", got)
	}
}

// TestLimitListenerRescues: a connection is closed for a presumed
// reconnection that has waited two eviction intervals (perhaps a newcomer
// taken for one) once per PassedOverInterval, and sooner only for as
// many as connections served have earned, or as the listener starts with
// (MaxRescues): a flood's reconnections, never served, cannot keep the
// churn going.
func TestLimitListenerRescues(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		// served: the first rescued connection is served a request.
		served bool
		// spent: the rescues the listener starts with are spent first.
		spent bool
	}{
		{"rescued one served", true, true},
		{"rescued one not served", false, true},
		{"not served, allowance of a new listener", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const grace = 10 * time.Millisecond
			interval := serving.DefaultEvictionInterval
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			inner := newChanListener()
			ln := serving.LimitListener(inner, 3, serving.LimitOptions{Clock: clk,
				AdmissionOptions: serving.AdmissionOptions{EvictionGrace: grace}})
			defer ln.Close()
			if tt.spent {
				serving.SpendRescues(ln)
			}
			x := accept(t, inner, ln, "10.0.0.2")
			a1 := accept(t, inner, ln, "10.0.0.1")
			a2 := accept(t, inner, ln, "10.0.0.1")
			// Two closes of connections that served nothing: the next two
			// arrivals from 10.0.0.1 are presumed reconnections.
			a1.c.Close()
			a2.c.Close()
			f1 := accept(t, inner, ln, "10.0.0.3")
			f2 := accept(t, inner, ln, "10.0.0.4")
			defer func() {
				for _, c := range []admitted{x, f1, f2} {
					c.c.Close()
				}
			}()
			accepted := acceptAll(ln)
			inner.pushFrom("10.0.0.1")
			r1 := int(inner.port.Load())
			inner.pushFrom("10.0.0.1")
			r2 := int(inner.port.Load())
			waitFor(t, 10*time.Second, "both to wait", func() bool { return serving.Pending(ln) == 2 })
			if got := serving.Demand(ln); got != "none" {
				t.Fatalf("demand on arrival = %q; want none", got)
			}
			// Two intervals on, both ask; the first rescue is free.
			waitFor(t, 10*time.Second, "Accept to wait", clk.HasWaiters)
			clk.Step(2 * interval)
			first := <-accepted
			if got := first.RemoteAddr().(*net.TCPAddr).Port; got != r1 {
				t.Fatalf("first rescue admitted port %d; want %d, the longest waiting", got, r1)
			}
			if !isClosed(t, x.peer) {
				t.Fatal("no connection was closed for the first rescue")
			}
			if tt.served {
				serving.WorkStart(first)
				serving.WorkEnd(first, true)
			}
			// An interval on: the second only if the first was served,
			// or a rescue of the listener's first ones is left.
			waitFor(t, 10*time.Second, "Accept to wait", clk.HasWaiters)
			clk.Step(interval)
			if tt.served || !tt.spent {
				// The serve woke the admission loop, which closes one for
				// r2 now or when its timer, at most an interval on, fires.
				select {
				case c := <-accepted:
					if got := c.RemoteAddr().(*net.TCPAddr).Port; got != r2 {
						t.Fatalf("second rescue admitted port %d; want %d", got, r2)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("no second rescue an interval after the first (served %v, rescues spent %v; demand %q, waiting %d)", tt.served, tt.spent, serving.Demand(ln), serving.Pending(ln))
				}
				return
			}
			// Not served: the loop sleeps until PassedOverInterval after
			// the first rescue. Had it woken at the interval, it would have
			// admitted r2 before waiting again.
			waitFor(t, 10*time.Second, "Accept to wait again", clk.HasWaiters)
			select {
			case c := <-accepted:
				t.Fatalf("admitted port %d an interval after an unserved rescue; want none before %v", c.RemoteAddr().(*net.TCPAddr).Port, serving.PassedOverInterval)
			default:
			}
			if got := serving.Pending(ln); got != 1 {
				t.Fatalf("waiting = %d; want 1", got)
			}
		})
	}
}

// TestLimitListenerWaitedTurn: every other admission takes the connection
// that has waited longest among those that waited more than two eviction
// intervals and less than TurnWaitedMax: one overtaken by newer arrivals gets
// its turn; one waiting longer than that does not.
func TestLimitListenerWaitedTurn(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	inner := newChanListener()
	ln := serving.LimitListener(inner, 3, serving.LimitOptions{Clock: clk})
	defer ln.Close()
	for range 3 {
		c := accept(t, inner, ln, "10.0.0.2")
		serving.WorkStart(c.c)
		serving.WorkEnd(c.c, false) // refused: the first to go
	}
	arrive := func(after time.Duration) int {
		t.Helper()
		clk.Step(after)
		n := serving.Pending(ln)
		inner.pushFrom("10.0.0.1")
		waitFor(t, 10*time.Second, "the arrival to wait", func() bool { return serving.Pending(ln) == n+1 })
		return int(inner.port.Load())
	}
	stale := arrive(0)
	overtaken := arrive(serving.TurnWaitedMax - 2*serving.DefaultEvictionInterval) // will have waited 2 intervals
	newest := arrive(2 * serving.DefaultEvictionInterval)
	if clk.Since(time.Unix(1000, 0)) < testGrace {
		clk.Step(testGrace)
	}
	accepted := acceptAll(ln)
	var order []int
	for range 2 {
		order = append(order, (<-accepted).RemoteAddr().(*net.TCPAddr).Port)
		clk.Step(serving.DefaultEvictionInterval)
	}
	slices.Sort(order)
	if want := []int{overtaken, newest}; !slices.Equal(order, want) {
		t.Errorf("the first two admitted are ports %v; want %v (the newest, and the one overtaken; not the one waiting over TurnWaitedMax, %d)", order, want, stale)
	}
}

// TestLimitListenerRefusals: a connection that has not completed a
// request is closed (or parked) at its 8th refused request (kept at the
// 7th); one that completed a request is not closed for refusals.
func TestLimitListenerRefusals(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	inner := newChanListener()
	ln := serving.LimitListener(inner, 10, serving.LimitOptions{Clock: clk})
	defer ln.Close()
	junk := accept(t, inner, ln, "10.0.0.1")
	served := accept(t, inner, ln, "10.0.0.2")
	serving.WorkStart(served.c)
	serving.WorkEnd(served.c, true)
	for i := 1; i <= 8; i++ {
		for _, c := range []admitted{junk, served} {
			serving.WorkStart(c.c)
			serving.WorkEnd(c.c, false)
		}
		// Closed, or, where peerClosed can tell, parked (see
		// TestLimitListenerRefusalsParked).
		if got, want := isClosed(t, junk.peer) || serving.IsParked(junk.c), i == 8; got != want {
			t.Fatalf("after %d refusals, the connection that completed none closed or parked = %v; want %v", i, got, want)
		}
	}
	if isClosed(t, served.peer) {
		t.Error("a connection that completed a request was closed for refusals")
	}
}

// TestLimitListenerRefusalsParked: a connection that completed no request
// and had 8 requests refused is parked (kept, read no more; where
// peerClosed cannot tell, closed): outside the budget while there is room
// there, so that a connection waiting is admitted at once, else within
// it; either way closed once nothing has waited for parkedMax (see
// parkRefused), or at once if a request in flight is then served.
func TestLimitListenerRefusalsParked(t *testing.T) {
	t.Parallel()
	if !serving.PeerStateKnown {
		t.Skip("parking needs peerClosed")
	}
	for _, tc := range []struct {
		name        string
		waiting     bool
		inFlight    bool // a request started before the refusals, served after
		outsideFull bool // the budget's worth already parked outside it
	}{
		{name: "nothing waits: parked, closed parkedMax later"},
		{name: "one waits: parked outside, the one waiting admitted", waiting: true},
		{name: "one waits: parked, closed when a request in flight is served", waiting: true, inFlight: true},
		{name: "outside full: parked within, closed parkedMax later", outsideFull: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			inner := newChanListener()
			ln := serving.LimitListener(inner, 2, serving.LimitOptions{Clock: clk})
			defer ln.Close()
			if tc.outsideFull {
				for range 2 {
					p := accept(t, inner, ln, "10.0.0.9")
					defer p.c.Close()
					serving.Park(p.c)
				}
			}
			junk := accept(t, inner, ln, "10.0.0.1")
			other := accept(t, inner, ln, "10.0.0.2")
			defer other.c.Close()
			if tc.waiting {
				inner.pushFrom("10.0.0.3")
				waitFor(t, 10*time.Second, "a connection to wait", func() bool { return serving.Pending(ln) == 1 })
			}
			if tc.inFlight {
				serving.WorkStart(junk.c)
			}
			for range 8 {
				serving.WorkStart(junk.c)
				serving.WorkEnd(junk.c, false)
			}
			if isClosed(t, junk.peer) || !serving.IsParked(junk.c) {
				t.Fatalf("after 8 refusals: closed %v, parked %v; want parked", isClosed(t, junk.peer), serving.IsParked(junk.c))
			}
			if tc.inFlight {
				serving.WorkEnd(junk.c, true)
				if !isClosed(t, junk.peer) {
					t.Fatal("a connection parked for its refusals was kept once a request in flight was served")
				}
				return
			}
			// Parked: nothing more is read from it.
			read := make(chan error, 1)
			go func() { _, err := junk.c.Read(make([]byte, 1)); read <- err }()
			go func() { _, _ = junk.peer.Write([]byte{'x'}) }()
			notRead(t, read)
			accepted := acceptAll(ln)
			if tc.waiting {
				// Parked outside the budget: the waiting connection is
				// admitted at once, no connection closed for it.
				<-accepted
				if isClosed(t, other.peer) {
					t.Fatal("a connection was closed for the one waiting, with one parked outside the budget")
				}
			}
			clk.Step(serving.ParkedMax - serving.DefaultEvictionInterval)
			if isClosed(t, junk.peer) {
				t.Fatal("the parked connection was closed before parkedMax")
			}
			clk.Step(serving.DefaultEvictionInterval)
			closedStepping(t, clk, junk.peer, "the parked connection to be closed once nothing has waited parkedMax")
			if err := <-read; !errors.Is(err, net.ErrClosed) {
				t.Errorf("the parked read returned %v once closed; want net.ErrClosed", err)
			}
		})
	}
}

// TestLimitListenerParkedMemory: the connections parked outside the
// budget are the budget's worth at most, and no more than a quarter of
// the memory limit holds at ParkedMemory each; the rest are parked within
// the budget.
func TestLimitListenerParkedMemory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		memory              uint64 // 0: unknown
		own                 bool   // the process's own limits (24 GiB here)
		parked              int
		outside, withinWant int
	}{
		{name: "memory unknown: the budget's worth", parked: 5, outside: 4, withinWant: 1},
		{name: "the process's limits: the budget's worth", own: true, parked: 5, outside: 4, withinWant: 1},
		{name: "memory to spare: the budget's worth", memory: 1 << 40, parked: 5, outside: 4, withinWant: 1},
		{name: "memory for two", memory: 4 * 2 * serving.ParkedMemory, parked: 3, outside: 2, withinWant: 1},
		{name: "memory for two, less a byte: one", memory: 4*2*serving.ParkedMemory - 1, parked: 3, outside: 1, withinWant: 2},
		{name: "memory for none", memory: 4*serving.ParkedMemory - 1, parked: 3, outside: 0, withinWant: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inner := newChanListener()
			cfg := serving.AdmissionTestConfig{Park: true, Memory: tc.memory}
			if !tc.own {
				cfg.OpenFiles, cfg.FileLimit = func() (int, error) { return 10, nil }, 1<<20
			}
			ln := serving.AdmissionListener(inner, 4, serving.LimitOptions{Clock: clocktesting.NewFakeClock(time.Unix(1000, 0))}, cfg)
			defer ln.Close()
			for i := range tc.parked {
				p := accept(t, inner, ln, fmt.Sprintf("10.0.0.%d", i+1))
				defer p.c.Close()
				serving.Park(p.c)
			}
			if out, in := serving.ParkedCounts(ln); out != tc.outside || in != tc.withinWant {
				t.Errorf("parked outside the budget %d, within it %d; want %d, %d", out, in, tc.outside, tc.withinWant)
			}
		})
	}
}

// TestLimitListenerReapLeft: a waiting connection whose client has closed
// its end is taken out (closed) when its address next connects, and that
// arrival is presumed its reconnection, not a newcomer a connection would
// be closed for; one whose client is still there stays.
func TestLimitListenerReapLeft(t *testing.T) {
	t.Parallel()
	if !serving.PeerStateKnown {
		t.Skip("peerClosed cannot tell here")
	}
	for _, tc := range []struct {
		name        string
		clientLeft  bool
		wantPending int
		wantDemand  string
	}{
		{"the client left: taken out, the arrival its reconnection", true, 1, "none"},
		{"the client is there: kept, the arrival a newcomer", false, 2, "newcomer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			inner := newChanListener()
			ln := serving.LimitListener(inner, 1, serving.LimitOptions{Clock: clk})
			defer ln.Close()
			accept(t, inner, ln, "127.0.0.1") // the budget is full
			client, server := tcpPair(t)
			inner.conns <- server
			waitFor(t, 10*time.Second, "the TCP connection to wait", func() bool { return serving.Pending(ln) == 1 })
			if tc.clientLeft {
				client.Close()
				waitFor(t, 10*time.Second, "the socket to see its client's close", func() bool { return serving.PeerClosed(server) })
			}
			inner.pushFrom("127.0.0.1")
			serverClosed := func() bool {
				_ = server.SetReadDeadline(time.Now())
				_, err := server.Read(make([]byte, 1))
				return errors.Is(err, net.ErrClosed)
			}
			if tc.clientLeft {
				// Closed once the arrival that found it was labelled.
				waitFor(t, 10*time.Second, "the connection whose client left to be closed", serverClosed)
			} else {
				waitFor(t, 10*time.Second, "the arrival to wait", func() bool { return serving.Pending(ln) == 2 })
				if serverClosed() {
					t.Error("a waiting connection whose client is there was closed")
				}
			}
			if got := serving.Pending(ln); got != tc.wantPending {
				t.Errorf("waiting = %d; want %d", got, tc.wantPending)
			}
			if got := serving.Demand(ln); got != tc.wantDemand {
				t.Errorf("demand = %q; want %q", got, tc.wantDemand)
			}
		})
	}
}

// TestLimitListenerPending: with MaxWaiting negative, at most the budget's
// worth wait to be admitted, the next in the kernel's queue;
// one waiting longer than the handshake timeout is closed.
func TestLimitListenerPending(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	inner := newChanListener()
	// One handshake at a time: x computes one, a waits for its turn; with
	// the handshakes backlogged, no one is admitted.
	ln := serving.AdmissionListener(inner, 2, serving.LimitOptions{Clock: clk,
		AdmissionOptions: serving.AdmissionOptions{HandshakeConcurrency: 1, HandshakeRate: -1, PressureTimeout: -1, MaxWaiting: -1}}, serving.AdmissionTestConfig{TLS: true, Handshake: 10 * time.Second})
	defer ln.Close()
	x := accept(t, inner, ln, "10.0.0.1")
	a := accept(t, inner, ln, "10.0.0.1")
	if err := serving.HandshakeTurn(x.c); err != nil {
		t.Fatal(err)
	}
	go func() { _ = serving.HandshakeTurn(a.c) }()
	waitFor(t, 10*time.Second, "the second handshake to wait", func() bool { return serving.HandshakesWaiting(ln) == 1 })
	accepted := acceptAll(ln)
	p1, p2 := inner.push(), inner.push() // the budget's worth wait
	waitFor(t, 10*time.Second, "two connections to wait", func() bool { return serving.Pending(ln) == 2 })
	inner.push()
	if len(inner.conns) != 1 || serving.Pending(ln) != 2 {
		t.Fatalf("connections left in the kernel's queue past the bound = %d, waiting %d; want 1, 2", len(inner.conns), serving.Pending(ln))
	}
	clk.Step(10*time.Second - time.Nanosecond)
	if isClosed(t, p1) || isClosed(t, p2) {
		t.Fatal("a waiting connection was closed 1ns before the handshake timeout")
	}
	select {
	case c := <-accepted:
		t.Fatalf("admitted %v while the handshakes were backlogged", c.RemoteAddr())
	default:
	}
	// The admission loop re-arms its timer for the expiry after the step.
	waitFor(t, 10*time.Second, "the admission loop to sleep until the timeout", clk.HasWaiters)
	clk.Step(time.Nanosecond)
	waitFor(t, 10*time.Second, "the waiting connections to be closed at the timeout", func() bool { return isClosed(t, p1) && isClosed(t, p2) })
	x.c.Close()
	a.c.Close()
}

// TestLimitListenerPendingBudget: as many connections wait to be admitted
// as the budget admits (not the 64 of old), the next in the kernel's
// queue; at the next turn the newest of them is admitted, so that a
// newcomer is not queued behind a parked flood.
func TestLimitListenerPendingBudget(t *testing.T) {
	t.Parallel()
	for _, budget := range []int{1, 65, 300} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			inner := newChanListener()
			// The budget's worth, whatever the process's files (see
			// TestLimitListenerWaiting for more).
			ln := serving.LimitListener(inner, budget, serving.LimitOptions{Clock: clk, AdmissionOptions: serving.AdmissionOptions{MaxWaiting: -1}})
			defer ln.Close()
			var held []admitted
			for range budget {
				held = append(held, accept(t, inner, ln, "10.0.0.1"))
			}
			waiting := make([]net.Conn, budget)
			pushed := make(chan struct{})
			go func() { // blocks for good past the bound of the waiting
				defer close(pushed)
				for i := range waiting {
					waiting[i] = inner.pushFrom("10.0.0.1")
				}
			}()
			waitFor(t, 10*time.Second, "the budget's worth to wait", func() bool { return serving.Pending(ln) == budget })
			<-pushed
			kernel := inner.pushFrom("10.0.0.1")
			if len(inner.conns) != 1 || serving.Pending(ln) != budget {
				t.Fatalf("connections left in the kernel's queue past the bound = %d, waiting %d; want 1, %d", len(inner.conns), serving.Pending(ln), budget)
			}
			// A second on, every waiting one has waited too long for the
			// turns that go to the longest waiting (see LimitListener),
			// and too long for an admitted one to be closed for it: one
			// leaves.
			clk.Step(time.Second)
			held[0].c.Close()
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			go func() { _, _ = waiting[budget-1].Write([]byte("x")) }()
			buf := make([]byte, 1)
			if _, err := io.ReadFull(c, buf); err != nil {
				t.Fatalf("admitted a connection other than the newest waiting: %v", err)
			}
			// Its place among the waiting is taken from the kernel's queue.
			waitFor(t, 10*time.Second, "the kernel's connection to wait", func() bool { return len(inner.conns) == 0 && serving.Pending(ln) == budget })
			c.Close()
			kernel.Close()
			for _, h := range held[1:] {
				h.c.Close()
			}
		})
	}
}

// TestLimitListenerAdaptiveGrace: when connections that moved on from a
// stage needed longer than EvictionGrace there, the stage's grace grows to
// four times their average, up to ten times EvictionGrace: a connection
// is kept at that grace less 1ns, and closed at it.
func TestLimitListenerAdaptiveGrace(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	inner := newChanListener()
	ln := serving.LimitListener(inner, 2, serving.LimitOptions{Clock: clk})
	defer ln.Close()
	for range 40 { // each waits 1s before its request: the average nears 1s
		c := accept(t, inner, ln, "10.0.0.1")
		sendByte(t, c.c, c.peer)
		clk.Step(time.Second)
		serving.WorkStart(c.c)
		c.c.Close()
	}
	const grace = 10 * testGrace // 4 × ~1s, capped at 10 × EvictionGrace
	a := accept(t, inner, ln, "10.0.0.1")
	sendByte(t, a.c, a.peer)
	b := accept(t, inner, ln, "10.0.0.1")
	sendByte(t, b.c, b.peer)
	clk.Step(grace - time.Nanosecond)
	inner.push()
	accepted := make(chan error, 1)
	go func() { _, err := ln.Accept(); accepted <- err }()
	waitFor(t, 10*time.Second, "Accept to wait for the grace", clk.HasWaiters)
	if isClosed(t, a.peer) || isClosed(t, b.peer) {
		t.Fatal("a waiting connection was closed 1ns before its stage's grace")
	}
	clk.Step(time.Nanosecond)
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	if !isClosed(t, b.peer) || isClosed(t, a.peer) {
		t.Fatal("want the youngest waiting connection closed at the grace")
	}
}

// TestLimitListenerFairness: within a stage the source that holds the
// most connections loses one first (its youngest), even when another
// source's connection is younger; connections closed by their clients make room
// without closing any other.
func TestLimitListenerFairness(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	inner := newChanListener()
	ln := serving.LimitListener(inner, 4, serving.LimitOptions{Clock: clk})
	defer ln.Close()
	legit := accept(t, inner, ln, "10.0.0.1")
	sendByte(t, legit.c, legit.peer) // waiting, where the youngest goes first
	var flood []admitted
	for range 3 {
		c := accept(t, inner, ln, "10.0.0.2")
		sendByte(t, c.c, c.peer)
		flood = append(flood, c)
	}
	clk.Step(testGrace)
	accept(t, inner, ln, "10.0.0.2")
	if isClosed(t, legit.peer) {
		t.Fatal("the connection of the source with one connection was closed; want one of the source with three")
	}
	if !isClosed(t, flood[2].peer) || isClosed(t, flood[0].peer) {
		t.Fatal("want the youngest connection of the source with the most closed")
	}
	flood[1].c.Close()
	accept(t, inner, ln, "10.0.0.3") // room: nothing else closed
	if isClosed(t, legit.peer) || isClosed(t, flood[0].peer) {
		t.Fatal("a connection was closed while there was room")
	}

	// Fairness off: one source for every address, the youngest goes (with
	// fairness, 10.0.0.1's younger one would).
	inner2 := newChanListener()
	ln2 := serving.LimitListener(inner2, 3, serving.LimitOptions{Clock: clk,
		AdmissionOptions: serving.AdmissionOptions{Source: func(net.Addr) string { return "" }}})
	defer ln2.Close()
	old1 := accept(t, inner2, ln2, "10.0.0.1")
	old2 := accept(t, inner2, ln2, "10.0.0.1")
	clk.Step(time.Second)
	young := accept(t, inner2, ln2, "10.0.0.2")
	for _, c := range []admitted{old1, old2, young} {
		sendByte(t, c.c, c.peer) // waiting, where the youngest goes first
	}
	clk.Step(testGrace)
	accept(t, inner2, ln2, "10.0.0.1")
	if !isClosed(t, young.peer) || isClosed(t, old1.peer) || isClosed(t, old2.peer) {
		t.Fatal("without fairness the youngest connection goes, whatever its source")
	}
}

// TestLimitListenerPressureTimeouts: the waiting stage's timeout is its
// configured value up to half the budget, then shrinks linearly to
// PressureTimeout at a full budget; each edge is exact (checked when a
// connection is accepted, at the timeout and 1ns before).
func TestLimitListenerPressureTimeouts(t *testing.T) {
	t.Parallel()
	const max, relaxed, tight = 8, 10 * time.Second, 2 * time.Second
	for _, tt := range []struct {
		open    int // connections open when the probe is checked
		timeout time.Duration
	}{
		{2, relaxed},
		{4, relaxed},                     // half full
		{6, relaxed - (relaxed-tight)/2}, // three quarters: halfway down
		{8, tight},                       // full
	} {
		for _, early := range []bool{true, false} {
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			inner := newChanListener()
			ln := serving.AdmissionListener(inner, max, serving.LimitOptions{Clock: clk,
				AdmissionOptions: serving.AdmissionOptions{PressureTimeout: tight}}, serving.AdmissionTestConfig{Waiting: relaxed})
			probe := accept(t, inner, ln, "10.0.0.1")
			sendByte(t, probe.c, probe.peer) // waiting
			var silent []admitted
			for range tt.open - 1 {
				silent = append(silent, accept(t, inner, ln, "10.0.0.2"))
			}
			age := tt.timeout
			if early {
				age -= time.Nanosecond
			}
			clk.Step(age)
			accept(t, inner, ln, "10.0.0.3")
			if got := isClosed(t, probe.peer); got == early {
				t.Errorf("%d of %d open, a waiting connection aged %v: closed = %v; want %v (timeout %v)", tt.open, max, age, got, !early, tt.timeout)
			}
			for _, s := range silent {
				s.c.Close()
			}
			ln.Close()
		}
	}
}

// TestLimitListenerHandshakeRate: a source past its handshake rate has its
// next handshake held for its turn, first come, first served, while
// another source's goes ahead; a connection closed while waiting gives its
// turn back; each turn comes exactly on time.
func TestLimitListenerHandshakeRate(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	inner := newChanListener()
	ln := serving.AdmissionListener(inner, 10, serving.LimitOptions{Clock: clk,
		AdmissionOptions: serving.AdmissionOptions{HandshakeRate: 1, HandshakeBurst: 1, HandshakeConcurrency: -1}}, serving.AdmissionTestConfig{TLS: true})
	defer ln.Close()
	turn := func(c admitted) chan error {
		done := make(chan error, 1)
		go func() { done <- serving.HandshakeTurn(c.c) }()
		return done
	}
	if err := <-turn(accept(t, inner, ln, "10.0.0.1")); err != nil { // the burst
		t.Fatal(err)
	}
	gone := accept(t, inner, ln, "10.0.0.1")
	goneTurn := turn(gone)
	waitFor(t, 10*time.Second, "the second handshake to wait", clk.HasWaiters)
	if err := <-turn(accept(t, inner, ln, "10.0.0.2")); err != nil {
		t.Fatalf("another source's handshake: %v; want it to go ahead", err)
	}
	gone.c.Close()
	if err := <-goneTurn; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a waiting handshake whose connection closed = %v; want net.ErrClosed", err)
	}
	// The closed connection gave its turn back: the next is due in 1s
	// (not 2s), exactly.
	next := turn(accept(t, inner, ln, "10.0.0.1"))
	waitFor(t, 10*time.Second, "the next handshake to wait", clk.HasWaiters)
	clk.Step(time.Second - time.Nanosecond)
	if !clk.HasWaiters() {
		t.Fatal("a handshake past the rate went ahead 1ns before its turn")
	}
	clk.Step(time.Nanosecond)
	if err := <-next; err != nil {
		t.Fatalf("handshake at its turn: %v", err)
	}
}

// TestLimitListenerNoHandshakeRateByDefault (issue #32): by default a
// source has no handshake allowance to spend: 300 handshakes from one
// address, far past the former burst of 64, each take their turn at once,
// with no timer waited on. With the rate set, the 65th waits.
func TestLimitListenerNoHandshakeRateByDefault(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		rate    float64
		waitsAt int // the first handshake that waits; 0: none of 300
	}{
		{name: "default", rate: 0},
		{name: "negative", rate: -1},
		{name: "set", rate: serving.DefaultHandshakeRate, waitsAt: serving.DefaultHandshakeBurst + 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			inner := newChanListener()
			ln := serving.AdmissionListener(inner, 400, serving.LimitOptions{Clock: clk,
				AdmissionOptions: serving.AdmissionOptions{HandshakeRate: tt.rate, HandshakeConcurrency: -1}}, serving.AdmissionTestConfig{TLS: true})
			defer ln.Close()
			for i := 1; i <= 300; i++ {
				c := accept(t, inner, ln, "10.0.0.1")
				done := make(chan error, 1)
				go func() { done <- serving.HandshakeTurn(c.c) }()
				if i == tt.waitsAt {
					waitFor(t, 10*time.Second, "the handshake past the burst to wait", clk.HasWaiters)
					c.c.Close()
					if err := <-done; !errors.Is(err, net.ErrClosed) {
						t.Fatalf("handshake %d, closed while waiting = %v; want net.ErrClosed", i, err)
					}
					return
				}
				// Its turn at once, or a timer waited on (the fake clock
				// never moves here): whichever comes first.
				var err error
				waitFor(t, 10*time.Second, "the handshake's turn", func() bool {
					select {
					case err = <-done:
						return true
					default:
						return clk.HasWaiters()
					}
				})
				if clk.HasWaiters() {
					c.c.Close()
					<-done
					t.Fatalf("handshake %d from one source waited for a timer; want its turn at once", i)
				}
				if err != nil {
					t.Fatalf("handshake %d from one source: %v; want its turn at once", i, err)
				}
			}
			if tt.waitsAt != 0 {
				t.Fatalf("no handshake of 300 waited; want the %dth to", tt.waitsAt)
			}
		})
	}
}

// TestLimitListenerHandshakeSlots: at most HandshakeConcurrency handshakes
// are computed at once; the next waits, first come, first served, until
// one ends: at the server's first flight (its first write), when the
// handshake is done, or when the connection closes.
func TestLimitListenerHandshakeSlots(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	inner := newChanListener()
	ln := serving.AdmissionListener(inner, 10, serving.LimitOptions{Clock: clk,
		AdmissionOptions: serving.AdmissionOptions{HandshakeRate: -1, HandshakeConcurrency: 1}}, serving.AdmissionTestConfig{TLS: true})
	defer ln.Close()
	var order []int
	var conns []admitted
	for range 4 {
		conns = append(conns, accept(t, inner, ln, "10.0.0.1"))
	}
	if err := serving.HandshakeTurn(conns[0].c); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 3)
	for i := 1; i < 4; i++ {
		go func() {
			if err := serving.HandshakeTurn(conns[i].c); err != nil {
				done <- -i
				return
			}
			done <- i
		}()
		waitFor(t, 10*time.Second, "the handshake to queue", func() bool { return serving.HandshakesWaiting(ln) == i })
	}
	// The first flight frees the slot: the next in line gets it.
	go func() { _, _ = io.ReadAll(conns[0].peer) }()
	if _, err := conns[0].c.Write([]byte("server hello")); err != nil {
		t.Fatal(err)
	}
	defer conns[0].c.Close()
	order = append(order, <-done)
	serving.HandshakeDone(conns[1].c)
	order = append(order, <-done)
	conns[3].c.Close() // gives up waiting
	order = append(order, <-done)
	if n := serving.HandshakesWaiting(ln); n != 0 {
		t.Errorf("handshakes waiting = %d; want 0", n)
	}
	if want := []int{1, 2, -3}; !slices.Equal(order, want) {
		t.Errorf("handshakes got their slots in the order %v; want %v", order, want)
	}
}

func TestLimitListenerNoLimit(t *testing.T) {
	t.Parallel()
	inner := newChanListener()
	if ln := serving.LimitListener(inner, 0, serving.LimitOptions{}); ln != net.Listener(inner) {
		t.Error("LimitListener(ln, 0) wrapped ln; want ln itself")
	}
}

func TestSourceAddress(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 5}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 5}, "2001:db8:1:2::/64"},
		{&net.UnixAddr{Name: "@", Net: "unix"}, ""},
	} {
		if got := serving.SourceAddress(tt.addr); got != tt.want {
			t.Errorf("SourceAddress(%v) = %q; want %q", tt.addr, got, tt.want)
		}
	}
}

func TestMaxConnectionsFor(t *testing.T) {
	t.Parallel()
	if got := serving.MaxConnectionsFor(0); got != 0 {
		t.Errorf("MaxConnectionsFor(0) = %d; want 0", got)
	}
	if got := serving.MaxConnectionsFor(1 << 40); got <= 0 || got >= 1<<40 {
		t.Errorf("MaxConnectionsFor(huge) = %d; want capped by the open-file limit", got)
	}
	if got := serving.MaxConnectionsFor(5); got != 5 {
		t.Errorf("MaxConnectionsFor(5) = %d; want 5", got)
	}
}

// BenchmarkLimitListenerDemand: what asking whether a full budget should
// close a connection costs, with as many connections waiting as the
// budget (its most), all presumed reconnections that have not waited long
// (the answer is no: every one must be ruled out), from one source and
// from 250.
func BenchmarkLimitListenerDemand(b *testing.B) {
	const budget = 1322 // DefaultBudget with 4,096 files
	for _, sources := range []int{1, 250} {
		b.Run(fmt.Sprintf("waiting=%d/sources=%d", budget, sources), func(b *testing.B) {
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			inner := newChanListener()
			ln := serving.LimitListener(inner, budget, serving.LimitOptions{Clock: clk})
			defer ln.Close()
			source := func(i int) string { return fmt.Sprintf("10.1.%d.%d", i%sources/200, i%sources%200) }
			var held []admitted
			for i := range budget {
				held = append(held, accept(b, inner, ln, source(i)))
			}
			for _, h := range held {
				h.c.Close()
				defer h.peer.Close()
			}
			for i := range budget {
				peer := inner.pushFrom(source(i))
				defer peer.Close()
			}
			waitFor(b, 10*time.Second, "the arrivals to wait", func() bool { return serving.Pending(ln) == budget })
			if got := serving.Demand(ln); got != "none" {
				b.Fatalf("demand = %q; want none", got)
			}
			b.ResetTimer()
			for b.Loop() {
				serving.Demand(ln)
			}
		})
	}
}

// TestLimitListenerWaiting: past the budget's worth, connections are taken
// from the kernel's queue while the process has files to spare (more
// than 128 free) and memory (a quarter of the limit at WaitingMemory
// each), or up to MaxWaiting if set; when the files run short, those
// waiting past the budget's worth are closed, longest waiting first.
func TestLimitListenerWaiting(t *testing.T) {
	t.Parallel()
	const limit = 10000
	errCount := errors.New("no /proc")
	for _, tc := range []struct {
		name       string
		maxWaiting int
		open       int // files open; -1: cannot be counted
		memory     uint64
		want       int // waiting once 5 arrived, the rest in the kernel's queue
	}{
		{name: "files to spare for one more", open: limit - 129, want: 3},
		{name: "files to spare for three more", open: limit - 131, want: 5},
		{name: "128 files free", open: limit - 128, want: 2},
		{name: "files not counted", open: -1, want: 2},
		{name: "memory for three", open: 0, memory: 4 * serving.WaitingMemory * 3, want: 3},
		{name: "memory for less than the budget", open: 0, memory: 4 * serving.WaitingMemory, want: 2},
		{name: "MaxWaiting", maxWaiting: 4, open: 0, want: 4},
		{name: "MaxWaiting below the budget", maxWaiting: 1, open: 0, want: 1},
		{name: "MaxWaiting negative", maxWaiting: -1, open: 0, want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			var open atomic.Int64
			open.Store(int64(tc.open))
			inner := newChanListener()
			ln := serving.AdmissionListener(inner, 2, serving.LimitOptions{Clock: clk, AdmissionOptions: serving.AdmissionOptions{MaxWaiting: tc.maxWaiting}},
				serving.AdmissionTestConfig{FileLimit: limit, Memory: tc.memory, OpenFiles: func() (int, error) {
					if n := open.Load(); n >= 0 {
						return int(n), nil
					}
					return 0, errCount
				}})
			defer ln.Close()
			accept(t, inner, ln, "10.0.0.1")
			accept(t, inner, ln, "10.0.0.1")
			acceptAll(ln)
			var peers []net.Conn
			for range tc.want {
				peers = append(peers, inner.push())
			}
			waitFor(t, 10*time.Second, "the arrivals to wait", func() bool { return serving.Pending(ln) == tc.want })
			inner.push()
			if len(inner.conns) != 1 || serving.Pending(ln) != tc.want {
				t.Fatalf("left in the kernel's queue = %d, waiting %d; want 1, %d", len(inner.conns), serving.Pending(ln), tc.want)
			}
			if tc.want <= 2 || tc.maxWaiting != 0 {
				return
			}
			// The upstream's connections take files: 63 free, one short
			// of half the reserve. A count later, the longest waiting
			// past the budget's worth is closed, and no more.
			open.Store(limit - 63)
			clk.Step(serving.FilesEvery - time.Nanosecond)
			if isClosed(t, peers[0]) {
				t.Fatal("a waiting connection closed before the files were counted again")
			}
			clk.Step(time.Nanosecond)
			waitFor(t, 10*time.Second, "the longest waiting to be closed", func() bool { return isClosed(t, peers[0]) })
			if got := serving.Pending(ln); got != tc.want-1 {
				t.Errorf("waiting after the files ran short = %d, want %d", got, tc.want-1)
			}
			for _, p := range peers[1:] {
				if isClosed(t, p) {
					t.Error("closed a connection that had waited less")
				}
			}
		})
	}
}

// TestLimitListenerWaitingAged: where the files are counted, a waiting
// connection is not closed for its age while more may wait; once no more
// may (128 files free), the one that waited longest is closed for an
// arrival when it has waited the handshake timeout (10 s without one),
// and the next arrival from its address is presumed its reconnection
// unless its client had closed it already.
func TestLimitListenerWaitingAged(t *testing.T) {
	t.Parallel()
	const limit = 10000
	for _, tc := range []struct {
		name        string
		clientClose bool // the longest waiting's client closed it
		wantDemand  string
	}{
		{name: "client there", wantDemand: "none"},
		{name: "client gone", clientClose: true, wantDemand: "newcomer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var open atomic.Int64 // the server's files: its connections and 131 others
			ln := serving.AdmissionListener(inner, 1,
				serving.LimitOptions{Clock: clk, AdmissionOptions: serving.AdmissionOptions{EvictionGrace: time.Hour}},
				serving.AdmissionTestConfig{FileLimit: limit, OpenFiles: func() (int, error) { return int(open.Load()), nil }})
			defer ln.Close()
			open.Store(limit - 131)
			dial := func() net.Conn {
				t.Helper()
				c, err := net.Dial("tcp", inner.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			dial()
			if _, err := ln.Accept(); err != nil {
				t.Fatal(err)
			}
			accepted := acceptAll(ln)
			// a waits within the budget's worth; b, a second later, past
			// it, with 129 files free; then 128 are: c stays in the
			// kernel's queue.
			// (Each connection's file is counted before it is dialed:
			// the files are counted when the next one is decided on, and
			// at most every FilesEvery.)
			open.Add(2)
			clk.Step(serving.FilesEvery)
			a := dial()
			waitFor(t, 10*time.Second, "a to wait", func() bool { return serving.Pending(ln) == 1 })
			open.Add(1)
			clk.Step(time.Second)
			dial() // b
			waitFor(t, 10*time.Second, "b to wait", func() bool { return serving.Pending(ln) == 2 })
			dial() // c
			if tc.clientClose {
				a.Close()
			}
			// Two timers: the admission loop's, and the accept loop's,
			// which counts the files every FilesEvery while none are to
			// spare.
			armed := func() bool { return clk.Waiters() >= 2 }
			waitFor(t, 10*time.Second, "the files to be counted again", armed)
			clk.Step(9*time.Second - time.Nanosecond)
			waitFor(t, 10*time.Second, "the files to be counted again", armed)
			if got := serving.Pending(ln); got != 2 {
				t.Fatalf("waiting = %d before 10 s, want 2", got)
			}
			clk.Step(serving.FilesEvery)
			// c waits in a's place, b still waits: a alone was closed.
			waitFor(t, 10*time.Second, "c to take a's place", func() bool {
				return serving.Pending(ln) == 2 && serving.Demand(ln) == tc.wantDemand
			})
			if !tc.clientClose {
				_ = a.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := a.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
					t.Errorf("the longest waiting's client read %v, want EOF", err)
				}
			}
			select {
			case x := <-accepted:
				t.Errorf("admitted %v with the budget full and its connection in its grace", x.RemoteAddr())
			default:
			}
		})
	}
}

// TestLimitListenerHeld: where the server parks (HTTPServer, ServeGRPC),
// a connection closed to make room or timed out while connections wait,
// that made no request and was never served (silent, waiting), is parked
// outside the budget rather than closed: it reads nothing more, awaits no
// reconnection (the next arrival from its address is a newcomer), and is
// closed once nothing has waited for parkedMax. Served and refused
// connections are closed, as are all where the server does not park, once
// the budget's worth is parked outside, and when nothing waits.
func TestLimitListenerHeld(t *testing.T) {
	t.Parallel()
	if !serving.PeerStateKnown {
		t.Skip("parking needs peerClosed")
	}
	for _, tc := range []struct {
		name string
		park bool
		// stage readies the budget's two connections.
		stage      func(t *testing.T, a admitted)
		parkedOut  int  // already parked outside: the budget's worth (2) leaves no room
		wantParked bool // else closed
	}{
		{name: "silent: parked", park: true, stage: func(*testing.T, admitted) {}, wantParked: true},
		{name: "waiting: parked", park: true, stage: func(t *testing.T, a admitted) {
			sendByte(t, a.c, a.peer)
			serving.HandshakeDone(a.c)
		}, wantParked: true},
		{name: "idle (served): closed", park: true, stage: func(t *testing.T, a admitted) {
			serving.WorkStart(a.c)
			serving.WorkEnd(a.c, true)
		}},
		{name: "refused: closed", park: true, stage: func(t *testing.T, a admitted) {
			serving.WorkStart(a.c)
			serving.WorkEnd(a.c, false)
		}},
		{name: "silent, server does not park: closed", park: false, stage: func(*testing.T, admitted) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			inner := newChanListener()
			var logs lines
			ln := serving.AdmissionListener(inner, 2, serving.LimitOptions{Logger: logs.logger(), Clock: clk}, serving.AdmissionTestConfig{TLS: true, Park: tc.park})
			defer ln.Close()
			var held []admitted
			var entered []chan struct{}
			for range 2 {
				a, e := acceptReading(t, inner, ln, "10.0.0.1")
				defer a.c.Close()
				tc.stage(t, a)
				held, entered = append(held, a), append(entered, e)
			}
			clk.Step(serving.DefaultProgressWindow) // past every grace
			// A read under way on each, as a server's is on a
			// connection it waits on.
			reads := make([]chan error, len(held))
			for i, a := range held {
				for len(entered[i]) > 0 {
					<-entered[i] // the staging's reads
				}
				reads[i] = make(chan error, 1)
				go func() { _, err := a.c.Read(make([]byte, 1)); reads[i] <- err }()
				<-entered[i]
			}
			n := accept(t, inner, ln, "10.0.0.2")
			defer n.c.Close()
			var victim admitted
			var read chan error
			closed, parked := 0, 0
			for i, a := range held {
				switch {
				case isClosed(t, a.peer):
					closed++
				case serving.IsParked(a.c):
					parked++
					victim, read = a, reads[i]
				}
			}
			if tc.wantParked {
				if parked != 1 || closed != 0 {
					t.Fatalf("for a newcomer: %d parked, %d closed; want 1 parked, 0 closed", parked, closed)
				}
			} else {
				if parked != 0 || closed != 1 {
					t.Fatalf("for a newcomer: %d parked, %d closed; want 0 parked, 1 closed", parked, closed)
				}
				return
			}
			found := false
			for _, l := range logs.snapshot() {
				found = found || strings.Contains(l, "connection budget full") && strings.Contains(l, `"parked.`)
			}
			if !found {
				t.Errorf("no log line saying a connection was parked:\n%s", strings.Join(logs.snapshot(), "\n"))
			}
			// Parked: what comes is not handed on, not even to the
			// read that was under way.
			go func() { _, _ = victim.peer.Write([]byte{'x'}) }()
			notRead(t, read)
			// Not closed, so nothing awaits a reconnection: the next
			// arrival from the parked connection's address is a newcomer.
			clk.Step(serving.DefaultEvictionInterval)
			inner.pushFrom("10.0.0.1")
			waitFor(t, 10*time.Second, "the arrival to wait", func() bool { return serving.Pending(ln) == 1 })
			if got := serving.Demand(ln); got != "newcomer" {
				t.Errorf("demand of an arrival from a parked connection's address = %q; want newcomer", got)
			}
			// Nothing waits once it is admitted (the other connection is
			// parked for it): the parked ones are closed parkedMax later.
			if _, err := ln.Accept(); err != nil {
				t.Fatal(err)
			}
			go func() { _, _ = ln.Accept() }()
			clk.Step(serving.ParkedMax)
			closedStepping(t, clk, victim.peer, "the parked connection to be closed once nothing waits")
			if err := <-read; !errors.Is(err, net.ErrClosed) {
				t.Errorf("the parked read returned %v once closed; want net.ErrClosed", err)
			}
		})
	}
}

// notRead fails t if read, the result of a read of a parked connection,
// comes within 50 ms: it must not come at all.
func notRead(t testing.TB, read <-chan error) {
	t.Helper()
	select {
	case err := <-read:
		t.Fatalf("a parked connection was read: %v", err)
	case <-time.After(50 * time.Millisecond): // a wait for a read that must not happen
	}
}

// closedStepping steps clk an eviction interval at a time until the
// server closes the connection whose client end is peer.
func closedStepping(t testing.TB, clk *clocktesting.FakeClock, peer net.Conn, what string) {
	t.Helper()
	waitFor(t, 10*time.Second, what, func() bool {
		clk.Step(serving.DefaultEvictionInterval)
		return isClosed(t, peer)
	})
}

// readingConn is a connection from the test's listener that signals
// entered as each Read begins.
type readingConn struct {
	addrConn
	entered chan struct{}
}

func (c readingConn) Read(p []byte) (int, error) {
	select {
	case c.entered <- struct{}{}:
	default:
	}
	return c.addrConn.Read(p)
}

// acceptReading is accept, with a channel that receives as each Read of
// the server's end begins (past admission's own checks).
func acceptReading(t testing.TB, inner *chanListener, ln net.Listener, ip string) (admitted, chan struct{}) {
	t.Helper()
	a, b := net.Pipe()
	entered := make(chan struct{}, 1)
	inner.conns <- readingConn{addrConn{a, &net.TCPAddr{IP: net.ParseIP(ip), Port: int(inner.port.Add(1))}}, entered}
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return admitted{c, b}, entered
}

// TestLimitListenerHeldTimeout: a connection past its stage's timeout
// that made no request and was never served is parked outside the budget
// where the server parks, while a connection waits for room; with none
// waiting it is closed.
func TestLimitListenerHeldTimeout(t *testing.T) {
	t.Parallel()
	if !serving.PeerStateKnown {
		t.Skip("parking needs peerClosed")
	}
	for _, tc := range []struct {
		name       string
		waiting    bool
		wantParked bool
	}{
		{"one waits: parked", true, true},
		{"none waits: closed", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const timeout = 5 * time.Second
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			inner := newChanListener()
			// No connection is closed for room (one a day): only the
			// timeout takes it out.
			ln := serving.AdmissionListener(inner, 2, serving.LimitOptions{Clock: clk,
				AdmissionOptions: serving.AdmissionOptions{EvictionInterval: 24 * time.Hour, PressureTimeout: -1}},
				serving.AdmissionTestConfig{TLS: true, Waiting: timeout, Park: true})
			defer ln.Close()
			slow := accept(t, inner, ln, "10.0.0.1")
			sendByte(t, slow.c, slow.peer)
			serving.HandshakeDone(slow.c) // waiting: handshake done, no request
			busy := accept(t, inner, ln, "10.0.0.2")
			serving.WorkStart(busy.c)
			serving.WorkEnd(busy.c, true)
			serving.WorkStart(busy.c)
			defer busy.c.Close()
			accepted := waitAccept(ln)
			if tc.waiting {
				inner.pushFrom("10.0.0.3")
				waitFor(t, 10*time.Second, "a connection to wait", func() bool { return serving.Pending(ln) == 1 })
			}
			waitFor(t, 10*time.Second, "Accept to wait", clk.HasWaiters)
			clk.Step(timeout)
			if tc.waiting {
				if c := <-accepted; c == nil {
					t.Fatal("the waiting connection was not admitted")
				} else {
					defer c.Close()
				}
				if isClosed(t, slow.peer) || !serving.IsParked(slow.c) {
					t.Fatalf("past its timeout with a connection waiting: closed %v, parked %v; want parked", isClosed(t, slow.peer), serving.IsParked(slow.c))
				}
				return
			}
			waitFor(t, 10*time.Second, "the connection past its timeout to be closed", func() bool { return isClosed(t, slow.peer) })
			if serving.IsParked(slow.c) {
				t.Error("closed past its timeout with none waiting, but marked parked")
			}
		})
	}
}
