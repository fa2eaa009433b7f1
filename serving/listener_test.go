package serving_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/serving"
)

// chanListener accepts the connections pushed to it.
type chanListener struct {
	conns  chan net.Conn
	closed chan struct{}
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

func (l *chanListener) push() net.Conn {
	a, b := net.Pipe()
	l.conns <- a
	return b
}

// TestLimitListenerEdge: at the limit Accept hands out connections; at
// limit+1 it logs and waits, without taking the next connection from the
// kernel (the inner listener), until one closes; the line is paced.
func TestLimitListenerEdge(t *testing.T) {
	t.Parallel()
	const max = 3
	inner := newChanListener()
	var logs lines
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	ln := serving.LimitListener(inner, max, serving.LimitOptions{Logger: logs.logger(), Clock: clk})
	var open []net.Conn
	for i := range max {
		inner.push()
		c, err := ln.Accept()
		if err != nil {
			t.Fatalf("Accept() #%d at the limit: %v", i, err)
		}
		open = append(open, c)
	}
	limitLines := func() int {
		n := 0
		for _, l := range logs.snapshot() {
			if strings.Contains(l, "connection limit reached") {
				n++
			}
		}
		return n
	}
	if n := limitLines(); n != 0 {
		t.Fatalf("limit logged at the limit; want only past it")
	}
	inner.push() // limit+1, queued in the "kernel"
	accepted := make(chan net.Conn)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Errorf("Accept() after a slot freed: %v", err)
		}
		accepted <- c
	}()
	waitFor(t, 10*time.Second, "the limit to be logged", func() bool { return limitLines() == 1 })
	if len(inner.conns) != 1 {
		t.Fatal("the connection past the limit was taken from the inner listener; want it left queued")
	}
	open[0].Close()
	open[0].Close() // a second Close frees nothing more
	c := <-accepted
	open = append(open[1:], c)

	// Over the limit again within the interval: waits, not logged again.
	inner.push()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		} else {
			accepted <- nil
		}
	}()
	waitFor(t, 10*time.Second, "the second wait to start", func() bool { return len(inner.conns) == 1 })
	open[0].Close()
	<-accepted
	if n := limitLines(); n > 2 {
		t.Errorf("limit lines = %d; want it paced", n)
	}
	// Closing the listener releases a waiting Accept.
	go func() {
		_, err := ln.Accept()
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept() after Close = %v; want net.ErrClosed", err)
		}
		accepted <- nil
	}()
	ln.Close()
	<-accepted
}

func TestLimitListenerNoLimit(t *testing.T) {
	t.Parallel()
	inner := newChanListener()
	if ln := serving.LimitListener(inner, 0, serving.LimitOptions{}); ln != net.Listener(inner) {
		t.Error("LimitListener(ln, 0) wrapped ln; want ln itself")
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
