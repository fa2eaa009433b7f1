//go:build !linux

package serving

import "net"

// peerStateKnown: peerClosed cannot tell here.
const peerStateKnown = false

// peerClosed is unknown here: false.
func peerClosed(net.Conn) bool { return false }
