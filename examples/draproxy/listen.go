package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// socketMode is the mode of the Unix socket: the owner and the group may
// connect (connecting needs write permission on the socket), others may
// not. Share the socket's directory with driver pods through a hostPath
// volume, mounted read-only, and run them in the group (--socket-group),
// each as a user of its own, not draproxy's.
const socketMode = 0o660

// listenUnix listens on a Unix socket at path with mode socketMode and, if
// gid is not negative, group gid. The socket's directory must be
// draproxy's alone (checkSocketDir): whoever may write in it could unlink
// the socket and bind their own in its place, and collect the tokens of
// every driver that connects. What is at path already must be a socket
// that is provably stale (removeStale); anything else is an error that
// says what it is. The socket is made under a temporary name in the same
// directory, given its mode and group there, and only then renamed to
// path (replacing the stale socket, if any), so that it is never
// reachable with the process's default (umask) permissions. The listener
// does not remove path when closed: call the returned cleanup.
func listenUnix(path string, gid int) (net.Listener, func(), error) {
	if err := checkSocketDir(filepath.Dir(path)); err != nil {
		return nil, nil, err
	}
	if err := removeStale(path); err != nil {
		return nil, nil, err
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

// checkSocketDir refuses a socket directory that is not draproxy's alone:
// not a directory (a symbolic link included), owned by another user, or
// writable by its group or others. Connecting to the socket needs no
// write access to the directory: drivers mount it read-only, and run as
// users of their own.
func checkSocketDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("the socket's directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("the socket's directory %s is a %s, not a directory", dir, fileKind(fi.Mode()))
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
		return fmt.Errorf("the socket's directory %s: cannot read its owner", dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("the socket's directory %s is owned by user %d, not by draproxy's (%d): whoever may write in it can replace the socket; give it to draproxy (--chown-socket-dir, run once as root, as deploy/daemonset.yaml's init container does)", dir, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("the socket's directory %s has mode %v: writable by its group or others, who could replace the socket; it must be draproxy's alone (0755)", dir, fi.Mode().Perm())
	}
	return nil
}

// removeStale decides what to do with what is at path: nothing there, or a
// socket no one serves (a connection is refused: ECONNREFUSED), which the
// new socket replaces, is nil. A socket someone serves (another draproxy,
// or anyone who bound it) and anything that is not a socket are errors
// saying what is there: draproxy removes only what it can prove stale.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--socket %s: %w", path, err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("--socket %s exists and is a %s, not a socket: draproxy replaces only a stale socket; remove it if it should not be there", path, fileKind(fi.Mode()))
	}
	conn, err := (&net.Dialer{Timeout: time.Second}).Dial("unix", path)
	if err == nil {
		conn.Close()
		return fmt.Errorf("--socket %s is served by another process (another draproxy, or whoever bound it): draproxy does not take over a live socket", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("--socket %s: cannot tell whether the socket there is stale: %w", path, err)
	}
	return nil // stale: replaced by the rename
}

// fileKind names the type of a file mode for messages.
func fileKind(m fs.FileMode) string {
	switch m.Type() {
	case 0:
		return "regular file"
	case fs.ModeDir:
		return "directory"
	case fs.ModeSymlink:
		return "symbolic link"
	case fs.ModeNamedPipe:
		return "named pipe"
	case fs.ModeSocket:
		return "socket"
	case fs.ModeDevice, fs.ModeDevice | fs.ModeCharDevice:
		return "device"
	}
	return "file of mode " + m.String()
}

// prepareSocketDir makes dir (a hostPath directory the kubelet created
// for root) draproxy's alone: mode 0755 (drivers may reach the socket,
// not write beside it), owned by uid:gid. It is what --chown-socket-dir
// does, run once as root with CAP_CHOWN alone (deploy/daemonset.yaml's
// init container, draproxy's own image); it changes nothing else.
func prepareSocketDir(dir string, uid, gid int) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("--chown-socket-dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("--chown-socket-dir: %s is a %s, not a directory", dir, fileKind(fi.Mode()))
	}
	// The mode first, while root owns it: CAP_FOWNER is not needed.
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("--chown-socket-dir: %w", err)
	}
	if err := os.Lchown(dir, uid, gid); err != nil {
		return fmt.Errorf("--chown-socket-dir: %w", err)
	}
	return nil
}

// parseOwner parses UID:GID.
func parseOwner(s string) (uid, gid int, err error) {
	u, g, ok := strings.Cut(s, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("--chown-socket-dir %q: want UID:GID, such as 65532:65532", s)
	}
	return uid, gid, nil
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
