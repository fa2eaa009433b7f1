package serving

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerStateKnown: peerClosed tells.
const peerStateKnown = true

// peerClosed reports whether c's client has closed its end (the socket is
// in CLOSE_WAIT) or reset it (CLOSE): a waiting connection that will never
// be answered, whose client is gone or has reconnected already. One
// getsockopt; false for a connection that is not a TCP socket.
func peerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	_ = rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		closed = err == nil && (info.State == tcpCloseWait || info.State == tcpClose)
	})
	return closed
}

// TCP_CLOSE and TCP_CLOSE_WAIT of include/net/tcp_states.h.
const (
	tcpClose     = 7
	tcpCloseWait = 8
)
