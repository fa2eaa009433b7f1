package serving_test

import (
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/reviewauth/reviewauth/serving"
)

// TestPeerClosed: a TCP connection whose client closed its end is told
// from one whose client is still there; anything else is never closed.
func TestPeerClosed(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("TCP_INFO is read on Linux only")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
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
			client, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			server, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer server.Close()
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
