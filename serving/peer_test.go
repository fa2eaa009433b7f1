package serving_test

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/serving"
)

// TestPeerClosed: a TCP connection whose client closed its end is told
// from one whose client is still there; anything else is never closed.
func TestPeerClosed(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("TCP_INFO is read on Linux only")
	}
	for _, tc := range []struct {
		name        string
		clientClose bool
		sent        []byte // before closing: a ClientHello, say
	}{
		{name: "client there"},
		{name: "client closed", clientClose: true},
		{name: "client closed after sending", clientClose: true, sent: []byte("\x16\x03\x01hello")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := tcpPair(t)
			if serving.PeerClosed(server) {
				t.Fatal("closed before the client closed")
			}
			if _, err := client.Write(tc.sent); err != nil {
				t.Fatal(err)
			}
			if !tc.clientClose {
				if serving.PeerClosed(server) {
					t.Error("closed while the client is there")
				}
				return
			}
			client.Close()
			waitFor(t, 10*time.Second, "the server's end to see the close", func() bool { return serving.PeerClosed(server) })
		})
	}
	a, b := net.Pipe()
	defer a.Close()
	b.Close()
	if serving.PeerClosed(a) {
		t.Error("a pipe, not a socket, reported closed")
	}
}

// TestParkedRead: a parked connection reads nothing while its client is
// there, checking every second (on the admission's clock), and ends with
// io.EOF once its client has closed its end, so that the server closes it
// and its file is not held for a client that is gone.
func TestParkedRead(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("TCP_INFO is read on Linux only")
	}
	client, server := tcpPair(t)
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	inner := newChanListener()
	ln := serving.AdmissionListener(inner, 4, serving.LimitOptions{Clock: clk}, serving.AdmissionTestConfig{})
	defer ln.Close()
	inner.conns <- server
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	serving.Park(c)
	if _, err := client.Write([]byte("more streams")); err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 64))
		read <- err
	}()
	for range 3 { // the client is there: each check finds it, and waits again
		waitFor(t, 10*time.Second, "the parked read to wait", clk.HasWaiters)
		clk.Step(time.Second)
	}
	waitFor(t, 10*time.Second, "the parked read to wait", clk.HasWaiters)
	select {
	case err := <-read:
		t.Fatalf("parked read returned %v while the client was there; want it blocked", err)
	default:
	}
	client.Close()
	waitFor(t, 10*time.Second, "the client's close to reach the server", func() bool { return serving.PeerClosed(server) })
	clk.Step(time.Second)
	select {
	case err := <-read:
		if err != io.EOF {
			t.Fatalf("parked read after the client left = %v; want io.EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the parked read did not end within 10s of its client leaving")
	}
}

// tcpPair returns both ends of a loopback TCP connection, closed when the
// test ends.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}
