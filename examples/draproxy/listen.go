package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// socketMode is the mode of the Unix socket: the owner and the group may
// connect (connecting needs write permission), others may not. Share the
// socket's directory with driver pods through a hostPath volume, and run
// them as the owner or in the group (--socket-group).
const socketMode = 0o660

// listenUnix listens on a Unix socket at path with mode socketMode and, if
// gid is not negative, group gid. The socket is made under a temporary
// name in the same directory, given its mode and group there, and only
// then renamed to path, so that it is never reachable with the process's
// default (umask) permissions. A stale socket at path is replaced; any
// other file there is an error. The listener does not remove path when
// closed: call the returned cleanup.
func listenUnix(path string, gid int) (net.Listener, func(), error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != os.ModeSocket {
		return nil, nil, fmt.Errorf("--socket %s exists and is not a socket", path)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+strconv.Itoa(os.Getpid()))
	_ = os.Remove(tmp)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, nil, err
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false) // it is renamed below; cleanup removes path
	fail := func(err error) (net.Listener, func(), error) {
		ln.Close()
		_ = os.Remove(tmp)
		return nil, nil, err
	}
	if err := os.Chmod(tmp, socketMode); err != nil {
		return fail(err)
	}
	if gid >= 0 {
		if err := os.Chown(tmp, -1, gid); err != nil {
			return fail(fmt.Errorf("--socket-group %d: %w", gid, err))
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	return ln, func() { _ = os.Remove(path) }, nil
}

// checkLoopback refuses a --tls-listen address that is not on a loopback
// interface: the TLS port is for drivers on this node (host network).
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--tls-listen %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return errors.New("--tls-listen " + strconv.Quote(addr) + ": must be a loopback address such as 127.0.0.1:PORT or [::1]:PORT")
	}
	return nil
}
