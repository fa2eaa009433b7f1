package serving

import (
	"io/fs"
	"net"
	"sync"
	"time"
)

// admissions are the admissions HTTPServer.Serve started, by address.
var admissions sync.Map

func init() {
	testHookAdmission = func(addr net.Addr, a *admission) { admissions.Store(addr.String(), a) }
}

// ParkedWithinBudget is how many connections the HTTPServer serving addr
// holds parked past the rapid-reset bound within its budget (those past
// the budget's worth parked outside it).
func ParkedWithinBudget(addr string) int {
	v, ok := admissions.Load(addr)
	if !ok {
		return 0
	}
	a := v.(*admission)
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.parkedResets
}

// AdmissionTestConfig sets what an HTTP or gRPC server of this package
// sets on its admission.
type AdmissionTestConfig struct {
	// Handshake, Waiting and Idle are the relaxed timeouts of the silent
	// and handshake, waiting, and idle stages.
	Handshake, Waiting, Idle time.Duration
	TLS                      bool
	ResetBurst               int
	ResetInterval            time.Duration
	// OpenFiles, if set, counts the process's open files against
	// FileLimit, and Memory is its memory limit (see MaxWaiting).
	OpenFiles func() (int, error)
	FileLimit int
	Memory    uint64
	// Park: connections are parked rather than closed where the servers
	// park them (past the rapid-reset bound; evicted or timed out before
	// a request while connections wait).
	Park bool
}

// AdmissionListener is LimitListener with what a server adds.
func AdmissionListener(ln net.Listener, max int, opts LimitOptions, c AdmissionTestConfig) net.Listener {
	ac := admissionConfig{LimitOptions: opts, handshake: c.Handshake, waiting: c.Waiting, idle: c.Idle,
		tls: c.TLS, resetBurst: c.ResetBurst, resetInterval: c.ResetInterval, memory: c.Memory, park: c.Park}
	if c.OpenFiles != nil {
		ac.files = &fileGauge{limit: c.FileLimit, open: c.OpenFiles}
	}
	return newAdmission(max, ac).listener(ln)
}

// The events servers report on their connections.
func HandshakeDone(c net.Conn) { admConnOf(c).handshakeDone() }
func WorkStart(c net.Conn)     { admConnOf(c).workStart() }
func Reset(c net.Conn)         { admConnOf(c).reset() }
func StageOf(c net.Conn) string {
	ac := admConnOf(c)
	ac.a.mu.Lock()
	defer ac.a.mu.Unlock()
	return ac.stage.String()
}

// HandshakeTurn is what a TLS handshake does once the client's hello is
// read.
func HandshakeTurn(c net.Conn) error { return admConnOf(c).handshakeTurn() }

// HandshakesWaiting is the number of handshakes waiting for a slot.
func HandshakesWaiting(ln net.Listener) int { return ln.(*admListener).a.hsSlots.Waiting() }

// WorkEnd ends a request on c: served, or refused.
func WorkEnd(c net.Conn, served bool) {
	o := outcomeRefused
	if served {
		o = outcomeServed
	}
	admConnOf(c).workEnd(o)
}

// FilesEvery is how long a count of the open files is used.
const FilesEvery = filesEvery

// Pending is the number of connections waiting to be admitted.
func Pending(ln net.Listener) int {
	a := ln.(*admListener).a
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.npending
}

// SpendRescues spends the rescues a listener starts with (see maxRescues),
// as if a flood had used them.
func SpendRescues(ln net.Listener) {
	a := ln.(*admListener).a
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rescues = 0
}

// FileMemoryLimit is the memory limit read from root, GOMEMLIMIT aside.
func FileMemoryLimit(root fs.FS) uint64 { return fileMemoryLimit(root) }

// Demand is what the connections waiting ask of a full budget now: "none",
// "passed-over" (a presumed reconnection that has waited) or "newcomer".
func Demand(ln net.Listener) string {
	a := ln.(*admListener).a
	a.mu.Lock()
	defer a.mu.Unlock()
	return [...]string{demandNone: "none", demandPassedOver: "passed-over", demandNewcomer: "newcomer"}[a.demandLocked(a.clock.Now())]
}

// ArrivalsQueued is the number of arrivals kept for demandLocked, and for
// popLocked's turns that take the one that waited longest.
func ArrivalsQueued(ln net.Listener) (demand, turns int) {
	a := ln.(*admListener).a
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.newcomers.q) + len(a.reconnects.q), len(a.recent.q)
}

// ReconnectWindow, PassedOverInterval and WaitedMax are the bounds of the
// same names.
const (
	ReconnectWindow    = reconnectWindow
	PassedOverInterval = passedOverInterval
	WaitedMax          = waitedMax
	TurnWaitedMax      = turnWaitedMax
)

// PeerStateKnown: PeerClosed tells.
const PeerStateKnown = peerStateKnown

// ParkedMax is how long a connection parked past the rapid-reset bound is
// kept once nothing waits.
const ParkedMax = parkedMax

// PeerClosed reports whether c's client has closed its end.
func PeerClosed(c net.Conn) bool { return peerClosed(c) }

// IsParked reports whether c, an admitted connection, is parked.
func IsParked(c net.Conn) bool { return admConnOf(c).parked.Load() }

// Park parks c, an admitted connection (see admConn.park).
func Park(c net.Conn) { admConnOf(c).park() }

// FrameScanner is the scanner that counts an HTTP/2 client's resets as
// the server reads its bytes.
type FrameScanner struct{ s frameScanner }

// NewFrameScanner returns a scanner that expects the client preface
// first, unless sawPreface.
func NewFrameScanner(sawPreface bool) *FrameScanner {
	f := new(FrameScanner)
	if sawPreface {
		f.s.sawPreface()
	}
	return f
}

// Scan passes p and returns the RST_STREAM frames whose header completed
// in it.
func (f *FrameScanner) Scan(p []byte) int { return f.s.scan(p) }

// ParkedCounts is how many connections ln holds parked outside its
// budget, and within it past the rapid-reset bound.
func ParkedCounts(ln net.Listener) (outside, within int) {
	a := ln.(*admListener).a
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nparkedOut, a.parkedResets
}
