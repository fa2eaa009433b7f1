package serving

import (
	"bufio"
	"bytes"
	"io/fs"
	"math"
	"os"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// The default connection budget is read from the process's limits rather
// than fixed (issue #32): an idle or waiting connection costs a file and
// some memory, and a closed one that reconnects costs a TLS handshake, so
// the budget is as large as the limits allow and connections are closed
// only when files or memory are really short.

// reservedFiles are the files MaxConnectionsFor keeps out of the budget
// for the process's own: listeners, API server connections, certificates,
// logs, a connection being swapped in for another.
const reservedFiles = 128

// filesPerConnection is the files the budget counts for each connection
// it admits: the connection, one waiting to be admitted (as many may wait
// as are admitted: see LimitListener), and, for a proxy, one to its
// upstream.
const filesPerConnection = 3

// ConnectionMemory is the memory the default budget sets aside for each
// admitted connection. BenchmarkConnectionMemory measures the Go heap and
// stacks an idle keep-alive TLS connection of an [HTTPServer] holds after
// a GC: 13 KiB over HTTP/1.1, 23 KiB over HTTP/2 (AMD EPYC, Go 1.26,
// 2026-12-02). The rest of the 128 KiB is room for what that leaves out:
// the kernel's socket buffers (counted in a cgroup's memory), a request
// in progress (TLS record and bufio buffers, a handler's goroutine), and
// a proxy's upstream connection.
const ConnectionMemory = 128 << 10

// memoryShare is the share of the memory limit the default budget gives
// to connections (1/memoryShare): the rest is the process's own and the
// requests' (a proxied response in flight, the review caches).
const memoryShare = 4

// DefaultBudget is the connection budget of a server whose MaxConnections
// is zero: the smaller of
//
//   - MaxConnectionsFor(unbounded): a third of the open-file limit less
//     128 (a file for each admitted connection, one for a connection
//     waiting to be admitted, one for a proxy's upstream connection)
//     (Go raises the soft limit to the hard limit when the process
//     starts, on Linux and the BSDs; serving reads the limit in force and
//     changes nothing);
//   - a quarter of the memory limit divided by [ConnectionMemory]: the
//     memory limit is GOMEMLIMIT when set, else the cgroup's (memory.max
//     of the process's cgroup v2 and its parents, or cgroup v1's
//     memory.limit_in_bytes: a container's resources.limits.memory), else
//     the machine's memory;
//
// and at least 1. Neither known: [DefaultMaxConnections]. For example, a
// container with 128 MiB and the container runtime's 1,048,576 files gets
// 256; with no memory limit on a machine of 8 GiB and a limit of 65,536
// files, 16,384 (files: 21,802). As many connections again may wait to
// be admitted, and more while files and memory are to spare (see
// LimitListener and [AdmissionOptions].MaxWaiting): they hold a file and
// a kernel socket each, and no memory of the process's.
func DefaultBudget() int {
	return BudgetFor(openFileLimit(), memoryLimit(os.DirFS("/")))
}

// BudgetFor is [DefaultBudget] for an open-file limit and a memory limit
// in bytes, either 0 if unknown: what a server would choose in a process
// with those limits.
func BudgetFor(files, memory uint64) int {
	budget := uint64(math.MaxInt32)
	known := false
	if files > 0 {
		known = true
		budget = min(budget, filesBudget(files))
	}
	if memory > 0 {
		known = true
		budget = min(budget, memory/memoryShare/ConnectionMemory)
	}
	if !known {
		return DefaultMaxConnections
	}
	return int(max(budget, 1))
}

// filesBudget is a third of files less reservedFiles, at least 1.
func filesBudget(files uint64) uint64 {
	if files <= reservedFiles {
		return 1
	}
	return max((files-reservedFiles)/filesPerConnection, 1)
}

// MaxConnectionsFor returns max capped to a third of the process's
// open-file limit less 128 (and at least 1): each connection admitted may
// have another waiting to be admitted (see LimitListener), each a proxy
// serves may need one to its upstream, and the process needs files for the
// API server, its certificates and its logs. (Go raises the soft limit to
// the hard limit at start; this reads the limit in force.) Where the limit
// is unknown, max is returned.
func MaxConnectionsFor(max int) int {
	limit := openFileLimit()
	if limit == 0 || max <= 0 {
		return max
	}
	if budget := filesBudget(limit); uint64(max) > budget {
		return int(budget)
	}
	return max
}

// memoryLimit is the process's memory limit in bytes (see DefaultBudget),
// read from root (the file system's root), or 0 if none is known.
func memoryLimit(root fs.FS) uint64 {
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		return uint64(l)
	}
	return fileMemoryLimit(root)
}

// fileMemoryLimit is memoryLimit without GOMEMLIMIT: the cgroup's limit,
// else the machine's memory, else 0.
func fileMemoryLimit(root fs.FS) uint64 {
	if l := cgroupMemoryLimit(root); l > 0 {
		return l
	}
	b, err := fs.ReadFile(root, "proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			if kb, err := strconv.ParseUint(f[1], 10, 64); err == nil && kb < math.MaxUint64/1024 {
				return kb * 1024
			}
		}
	}
	return 0
}

// noLimit is what cgroup v1 reports for no limit (or more): anything this
// large is no limit.
const noLimit = 1 << 60

// cgroupMemoryLimit is the smallest memory limit of the process's cgroup
// and its parents: memory.max for cgroup v2, memory.limit_in_bytes for
// cgroup v1 (in a container, its own cgroup is at the mount's root); 0 for
// none.
func cgroupMemoryLimit(root fs.FS) uint64 {
	b, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return 0
	}
	var limit uint64
	for line := range strings.SplitSeq(string(b), "\n") {
		// "0::/path" (v2) or "N:memory:/path" (v1, possibly with other
		// controllers in the list).
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		var mount, file string
		switch {
		case f[0] == "0" && f[1] == "":
			mount, file = "sys/fs/cgroup", "memory.max"
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			mount, file = "sys/fs/cgroup/memory", "memory.limit_in_bytes"
		default:
			continue
		}
		dir := strings.Trim(f[2], "/")
		for {
			if l := readLimit(root, path.Join(mount, dir, file)); l > 0 && (limit == 0 || l < limit) {
				limit = l
			}
			if dir == "" {
				break
			}
			if i := strings.LastIndexByte(dir, '/'); i >= 0 {
				dir = dir[:i]
			} else {
				dir = ""
			}
		}
	}
	return limit
}

// readLimit reads a limit in bytes from name: 0 for "max", a value of
// noLimit or more, or anything unreadable.
func readLimit(root fs.FS, name string) uint64 {
	if !fs.ValidPath(name) {
		return 0
	}
	b, err := fs.ReadFile(root, name)
	if err != nil {
		return 0
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v == 0 || v >= noLimit {
		return 0
	}
	return v
}
