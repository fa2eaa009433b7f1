package serving

import (
	"time"
)

// Past the budget's worth, connections wait to be admitted as long as the
// process has files and memory to spare (issue #32): a waiting connection
// costs a file and its kernel socket, and one left in the kernel's queue
// instead is served first come, first served, behind every attacker that
// arrived before it. With a 4,096-file limit and a budget of 1,322, a flood
// of 2,974 idle TLS connections from one address left the scraper's new
// connections in the kernel's queue behind it (0% answered within 1 s)
// while kube-rbac-proxy, which holds every connection it accepts, answered
// 100%.

// filesEvery is how long a count of the process's open files is used
// before it is read again (the accepts since are counted against it): a
// read costs a stat of /proc/self/fd (about 5 µs), or on kernels before
// 6.2 a read of the directory (about 1 ms with 4,000 files open).
const filesEvery = 50 * time.Millisecond

// WaitingMemory is the memory of the process's memory limit counted for
// each connection waiting past the budget's worth: what the kernel charges
// a container for a socket whose client filled its receive buffer while
// the server reads nothing (the default tcp_rmem, 128 KiB), which a
// flood can do to every one. Nothing of the Go heap is, beyond the
// listener's record of it. So a container whose budget its memory sets
// (128 MiB: 256) has the budget's worth waiting and no more; files are
// what a process with memory to spare runs short of.
const WaitingMemory = 128 << 10

// fileGauge tells how many more files the process may open.
type fileGauge struct {
	// limit is the open-file limit; open counts the files open.
	limit int
	open  func() (int, error)
}

// spareFilesLocked returns the files the process may still open, less
// reservedFiles: read at most every filesEvery, less the connections
// accepted since. 0 if they cannot be counted. Under a.mu.
func (a *admission) spareFilesLocked(now time.Time) int {
	if a.files == nil {
		return 0
	}
	if a.filesAt.IsZero() || now.Sub(a.filesAt) >= filesEvery || now.Before(a.filesAt) {
		n, err := a.files.open()
		if err != nil {
			a.filesFree, a.filesAt, a.filesSince = 0, now, 0
			return 0
		}
		a.filesFree, a.filesAt, a.filesSince = a.files.limit-n, now, 0
	}
	return max(a.filesFree-a.filesSince-reservedFiles, 0)
}

// roomToWaitLocked reports whether another connection may be taken from
// the kernel's queue to wait: fewer than the budget's worth wait, or the
// process has files to spare and fewer than maxWaiting wait. Under a.mu.
func (a *admission) roomToWaitLocked(now time.Time) bool {
	if a.npending < a.maxPending {
		return true
	}
	return a.npending < a.maxWaiting && a.spareFilesLocked(now) > 0
}

// shedLocked closes, longest waiting first, connections waiting past the
// budget's worth, and returns them to be closed once a.mu is released:
//
//   - while fewer than half reservedFiles are free, as many as that lacks:
//     the process's other connections (a proxy's upstream, the API
//     server) need files more than a flood does;
//   - while no more may wait (reservedFiles or fewer free, or maxWaiting
//     wait), those that have waited longer than a connection may wait
//     where files are not counted (the handshake timeout, 10 s without
//     one; their clients have likely given up), as many as make room for
//     one arrival.
//
// Under a.mu.
func (a *admission) shedLocked(now time.Time) []*pendingConn {
	if a.files == nil || a.npending <= a.maxPending {
		return nil
	}
	a.spareFilesLocked(now)
	free := a.filesFree - a.filesSince
	n, aged := 0, false
	switch {
	case free < reservedFiles/2:
		n = reservedFiles/2 - free
	case free <= reservedFiles:
		n, aged = reservedFiles+1-free, true
	case a.npending >= a.maxWaiting:
		n, aged = a.npending-a.maxWaiting+1, true
	}
	var shed []*pendingConn
	for n = min(n, a.npending-a.maxPending); n > 0; n-- {
		var oldest *pendingConn
		for _, q := range a.pending {
			if oldest == nil || q[0].at.Before(oldest.at) {
				oldest = q[0]
			}
		}
		if aged && now.Sub(oldest.at) < a.waitLimit() {
			break
		}
		shed = append(shed, a.removePendingLocked(oldest.key, 0))
		if !peerClosed(oldest.Conn) {
			// Its client, still there, will reconnect.
			a.awaitLocked(oldest.key, now, 1)
		}
		a.filesSince--
	}
	return shed
}
