package serving

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth/internal/loglimit"
	"github.com/reviewauth/reviewauth/internal/observe"
	"github.com/reviewauth/reviewauth/internal/review"
	"github.com/reviewauth/reviewauth/metrics"
)

// Defaults of [AdmissionOptions]. Each is used when its field is zero.
const (
	// DefaultEvictionGrace is how long a connection may stay in one stage
	// before it may be closed to make room for a new one. It bounds how
	// fast clients that reconnect at once can make the server churn
	// (at most MaxConnections per grace), so that a legitimate client's
	// handshake and first request, which take a few milliseconds, finish
	// before its connection could be chosen; and it is short enough that a
	// new connection never waits long for room.
	DefaultEvictionGrace = 250 * time.Millisecond

	// DefaultEvictionInterval paces the connections closed to make room:
	// at most one per interval while the budget is full (20 a second).
	// Each one admitted costs the server a TLS handshake, so that clients
	// reconnecting at once as soon as they are closed never make it spend
	// more than that on them; and since a newcomer is admitted newest
	// first, one that arrives between two of these is admitted at the
	// next, within 50ms, unless a closed client reconnected after it.
	DefaultEvictionInterval = 50 * time.Millisecond

	// DefaultPressureTimeout is what the handshake, header, HTTP/2 preface
	// and first-message timeouts shrink to when the connection budget is
	// full: a legitimate client sends its request within a round trip or
	// two of connecting, and one second leaves room for a slow network.
	DefaultPressureTimeout = time.Second

	// DefaultPressureIdleTimeout is what the idle timeout of connections
	// that completed a request shrinks to when the budget is full.
	DefaultPressureIdleTimeout = 5 * time.Second

	// DefaultHandshakeRate and DefaultHandshakeBurst are a per-source
	// bound on the TLS handshakes one source (see
	// [AdmissionOptions].Source) may start, for a HandshakeRate set
	// explicitly: a burst of DefaultHandshakeBurst, then HandshakeRate a
	// second, past which a source's handshakes are queued first come,
	// first served.
	//
	// Deprecated: no per-source handshake rate is the default (since
	// issue #32). A per-source allowance is no protection where callers
	// share an address (a node's SNAT): attackers that reconnect as soon
	// as they are refused spend it, and the legitimate client's handshake
	// waits behind their reservations. Measured at the defaults with 600
	// attackers from the client's address (docs/benchmarks.md, AMD EPYC,
	// 2 cores): rbacproxy answered 0% of new-connection scrapes within 1 s
	// under body-less POSTs and junk tokens with the rate (kube-rbac-proxy,
	// no limits: 100%), 100% without it; the snapshot-metadata sidecar 0%
	// under streams without a request and rapid reset, 100% without it.
	// HandshakeConcurrency (GOMAXPROCS) bounds the handshakes' CPU instead.
	DefaultHandshakeRate  = 256
	DefaultHandshakeBurst = 64

	// DefaultRapidResetLimit and DefaultRapidResetRate bound the streams
	// a gRPC client may open and then cancel (RST_STREAM before the
	// server's answer) on one connection: 32 at once, then 8 a second;
	// past that the connection is closed. A client that cancels a call
	// now and then never comes near it; an HTTP/2 rapid-reset attack
	// passes it within milliseconds, so that each of its connections
	// costs the server a handshake (paced per source) and a few dozen
	// streams.
	DefaultRapidResetLimit = 32
	DefaultRapidResetRate  = 8

	// DefaultMaxPending bounds the connections accepted from the kernel
	// and not admitted yet (or the budget, if smaller): they hold a file
	// each and cost nothing else (nothing is read from them); past it, new
	// connections wait in the kernel's queue.
	DefaultMaxPending = 64
)

// AdmissionOptions tune how a server admits connections once its budget
// (MaxConnections) is full, and how it treats clients that hold
// connections without using them (see [LimitListener]). Every zero value
// means the default named on the field.
type AdmissionOptions struct {
	// EvictionGrace: zero means [DefaultEvictionGrace].
	EvictionGrace time.Duration
	// EvictionInterval: zero means [DefaultEvictionInterval]; negative
	// means no pacing.
	EvictionInterval time.Duration
	// PressureTimeout bounds the handshake, the request header, the
	// HTTP/2 preface and a gRPC connection's first message when the
	// budget is full (see [LimitListener]). Zero means
	// [DefaultPressureTimeout]; negative means the timeouts do not shrink.
	PressureTimeout time.Duration
	// PressureIdleTimeout bounds an idle connection that completed a
	// request when the budget is full. Zero means
	// [DefaultPressureIdleTimeout]; negative means it does not shrink.
	PressureIdleTimeout time.Duration
	// HandshakeRate and HandshakeBurst bound the TLS handshakes each source
	// starts: HandshakeRate a second after a burst of HandshakeBurst (zero:
	// [DefaultHandshakeBurst]). Zero or negative HandshakeRate, the
	// default, means no per-source bound: where callers share an address a
	// flood would spend it for them (see [DefaultHandshakeRate]).
	HandshakeRate  float64
	HandshakeBurst int
	// HandshakeConcurrency bounds the TLS handshakes the server computes
	// at once, all sources together; the others wait their turn, first
	// come, first served. Zero means GOMAXPROCS: the handshakes of a
	// flood never take more than the CPUs, so that calls on established
	// connections, and the handshake of a legitimate client queued among
	// them, are served without waiting behind hundreds of computations.
	// Negative means no bound.
	HandshakeConcurrency int
	// Source maps a client's address to the source that fairness is kept
	// between: the handshake rate, the choice of which connection makes
	// room, and the review queue's turns. Nil means [SourceAddress]: the
	// IP address, IPv6 addresses by /64. A function that returns "" for
	// every address turns fairness between sources off (behind a proxy or
	// a NAT that hides clients' addresses, say).
	Source func(net.Addr) string
}

// SourceAddress is the default [AdmissionOptions].Source: the IP address of
// a TCP client, its /64 for IPv6 (a host is usually given a whole /64), and
// "" for any other address (a Unix socket's peers share one source).
func SourceAddress(addr net.Addr) string {
	var ap netip.AddrPort
	switch a := addr.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	default:
		return ""
	}
	ip := ap.Addr().Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// stage is what a connection has done so far: the eviction order, first
// to go first.
type stage uint8

const (
	// stageSilent: accepted; the client has sent nothing.
	stageSilent stage = iota
	// stageRefused: every request the connection completed was refused
	// (401, 403; Unauthenticated, PermissionDenied), none served: junk
	// tokens on a kept HTTP/2 or gRPC connection.
	stageRefused
	// stageWaiting: the handshake is done (or there is none), and the
	// client has not made a request: HTTP/1 headers not complete, an
	// HTTP/2 connection with its preface and no request, a gRPC
	// connection whose streams have not sent a message.
	stageWaiting
	// stageHandshake: the client has sent its first bytes and the TLS
	// handshake is not finished.
	stageHandshake
	// stageIdle: the connection completed a request and has none in
	// progress (a keep-alive connection).
	stageIdle
	// stageFirst: the connection's first request is in progress.
	stageFirst
	// stageBusy: the connection completed a request and has one in
	// progress.
	stageBusy
	numStages
)

var stageNames = [numStages]string{"silent", "refused", "waiting", "handshake", "idle", "first-request", "busy"}

func (s stage) String() string { return stageNames[s] }

// reasons a connection is closed by admission, for the log and metrics.
const (
	closeEvicted = iota
	closeTimeout
	closeRapidReset
	closeRefusals
	closeReasons
)

var closeReasonNames = [closeReasons]string{"evicted", "timeout", "rapid_reset", "refused"}

// maxRefusals is how many requests a connection that has not completed
// one may have refused (401, 403; Unauthenticated, PermissionDenied)
// before it is closed: HTTP/1 closes a connection at its first refusal;
// an HTTP/2 or gRPC client may try a few calls (a token about to be
// rotated, several calls in flight), but a connection that only sends junk
// tokens pays a handshake (paced) every few calls rather than none.
const maxRefusals = 8

// states of reviewauth_connections.
const (
	stateAdmitted = "admitted"
	stateWaiting  = "waiting"
)

// LimitOptions configures [LimitListener].
type LimitOptions struct {
	AdmissionOptions

	// Logger receives the line that says the budget is full and which
	// connections were closed for it, at most one per ten seconds. Its
	// zero value discards it.
	Logger klog.Logger
	// Clock tells the time of every stage and timeout. Nil means the
	// real clock.
	Clock clock.Clock
	// Metrics, if not nil, counts the connections admitted and waiting
	// (reviewauth_connections) and those closed to make room, past a
	// timeout or the rapid-reset bound
	// (reviewauth_connections_closed_total).
	Metrics *metrics.Metrics
}

// limitLogInterval paces the "budget full" line.
const limitLogInterval = 10 * time.Second

// LimitListener returns a listener that keeps at most max connections from
// ln open at once, and makes room for a new connection by closing the one
// that has done the least for the longest, rather than making the new one
// wait.
//
// Connections are taken from ln as they come (by a goroutine the listener
// runs until it is closed), up to [DefaultMaxPending] (or max, if smaller)
// waiting to be admitted, from which nothing is read; past that, they wait
// in the kernel's queue. When there is room, the newest waiting connection
// of the source with the fewest connections admitted is admitted: under a
// flood the oldest waiting connections are those whose clients are
// likeliest to have given up, and a client that reconnects as soon as it
// is closed does not push a newcomer back behind its retries (adaptive
// LIFO); a connection arriving from a source one of whose connections
// just closed (presumably its reconnection) is passed over in the turn it
// arrived in, so that a newcomer that arrived just before it is not
// overtaken by reconnection after reconnection; and every other turn goes
// instead to the connection that has waited longest among those that
// waited at least two EvictionIntervals and less than a second, so that
// one overtaken by newer arrivals is not starved. A connection waiting longer than the handshake timeout (10s
// without one) is closed.
//
// Each admitted connection is in one stage, and when max are admitted the
// next is admitted after closing one, chosen in this order:
//
//  1. silent: accepted, nothing received;
//  2. refused: every request it completed was refused (401, 403,
//     Unauthenticated, PermissionDenied), none served;
//  3. waiting: handshake done (or none), no request yet: HTTP/1 headers
//     incomplete (slowloris), an HTTP/2 preface without a request, gRPC
//     streams open with no message sent;
//  4. handshake: TLS handshake begun, not finished;
//  5. idle: completed a request, none in progress (keep-alive);
//  6. first request: its first request in progress;
//  7. busy: completed a request, one in progress: the last to go.
//
// Within a stage, the connection of the source holding the most
// connections goes first, then the one that entered the stage the
// longest ago. A connection is not closed before it has spent its grace
// in its stage: EvictionGrace, or, when connections that moved on from
// that stage recently needed longer (a slow network, a loaded machine),
// four times their average, up to ten times EvictionGrace. When every
// connection is that young, the new one waits until one is old enough or
// closes; connections are closed to make room at most once per
// EvictionInterval; and it also waits while as many TLS handshakes
// wait for their turn as can be computed at once (HandshakeConcurrency),
// so that clients reconnecting at once never make the server start more
// handshakes than it finishes. A connection waiting for its handshake's
// turn is not closed to make room. With HTTP and gRPC servers of this package the
// stages follow the protocol (http.Server.ConnState and the handler;
// grpc's stats handler and tap); a plain listener knows only silent and
// waiting (a byte received).
//
// The timeouts of the first stages shrink as the budget fills: from half
// full they go linearly from their configured value to PressureTimeout
// (handshake, header, preface, first message) and PressureIdleTimeout
// (idle) when full, but never below the stage's grace, and relax again as
// it empties. They are checked when
// a connection is accepted, so they cost nothing while the server is not
// under pressure. A plain listener has no timeouts of its own.
//
// TLS servers of this package also bound the handshakes computed at once
// (HandshakeConcurrency) and, if HandshakeRate is set, those each source
// starts.
//
// A max of zero or less means no limit, and ln is returned as is. The
// budget should stay below the process's open-file limit
// ([MaxConnectionsFor]): the process holds at most max admitted
// connections, DefaultMaxPending waiting ones, and one being swapped in
// for another.
func LimitListener(ln net.Listener, max int, opts LimitOptions) net.Listener {
	if max <= 0 {
		return ln
	}
	return newAdmission(max, admissionConfig{LimitOptions: opts}).listener(ln)
}

// admissionConfig is what a server of this package adds to LimitOptions.
type admissionConfig struct {
	LimitOptions
	// handshake is the relaxed timeout of the silent and handshake
	// stages, waiting that of the waiting stage, idle that of the idle
	// stage; zero means none.
	handshake, waiting, idle time.Duration
	// tls: connections do a TLS handshake (the handshake stage, and the
	// handshake slots and rate, if set, apply).
	tls bool
	// join: connections are found by their remote address for grpc's
	// stats handler (see connByAddr).
	join bool
	// rapidReset bounds the streams a client cancels, per connection.
	resetBurst    int
	resetInterval time.Duration
}

// admission is the state behind LimitListener, HTTPServer and ServeGRPC.
type admission struct {
	max           int
	clock         clock.Clock
	logger        klog.Logger
	log           *loglimit.Limiter
	grace         time.Duration
	evictEvery    time.Duration
	relaxed       [numStages]time.Duration
	tight         [numStages]time.Duration
	source        func(net.Addr) string
	hsInterval    time.Duration
	hsBurst       int
	hsSlots       *review.Queue // handshakes computing; nil: no bound
	hsConcurrency int
	tls           bool
	join          bool
	resetBurst    int
	resetInterval time.Duration
	rec           *observe.Recorder

	mu    sync.Mutex
	lists [numStages]connList
	// stay is the average time connections that moved on from a stage
	// to a later one spent in it (an exponentially weighted moving
	// average), for the grace.
	stay     [numStages]time.Duration
	open     int
	sources  map[string]*sourceState
	nextID   uint64
	closed   [closeReasons][numStages]int // since the last log line
	done     chan struct{}                // the listener closed
	doneOnce sync.Once
	// pending are the connections accepted and not admitted yet, by
	// source, oldest first; at most maxPending.
	pending    map[string][]*pendingConn
	npending   int
	maxPending int
	acceptErr  error     // the listener's, once it failed
	lastEvict  time.Time // when a connection was last closed to make room
	// admissions counts the connections admitted; awaited, by source,
	// the closes of admitted connections not yet followed by an arrival
	// from the same source (at most maxAwaited each).
	admissions uint64
	awaited    map[string]int
	wake       chan struct{} // for next: a connection closed, arrived or a slot freed
	space      chan struct{} // for acceptLoop: a pending connection left
}

// sourceState is what admission keeps per source, while it has
// connections.
type sourceState struct {
	key   string
	conns int
	hs    *loglimit.Limiter // handshakes; nil: no bound
}

func newAdmission(max int, c admissionConfig) *admission {
	o := c.AdmissionOptions
	clk := c.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	if o.EvictionGrace <= 0 {
		o.EvictionGrace = DefaultEvictionGrace
	}
	if o.EvictionInterval == 0 {
		o.EvictionInterval = DefaultEvictionInterval
	}
	if o.PressureTimeout == 0 {
		o.PressureTimeout = DefaultPressureTimeout
	}
	if o.PressureIdleTimeout == 0 {
		o.PressureIdleTimeout = DefaultPressureIdleTimeout
	}
	if o.HandshakeBurst <= 0 {
		o.HandshakeBurst = DefaultHandshakeBurst
	}
	if o.Source == nil {
		o.Source = SourceAddress
	}
	a := &admission{
		max: max, clock: clk, logger: c.Logger, log: loglimit.New(1, limitLogInterval, clk),
		grace: o.EvictionGrace, evictEvery: o.EvictionInterval, source: o.Source, tls: c.tls, join: c.join,
		resetBurst: c.resetBurst, resetInterval: c.resetInterval, rec: observe.Of(c.Metrics),
		sources: map[string]*sourceState{}, done: make(chan struct{}),
		pending: map[string][]*pendingConn{}, maxPending: min(max, DefaultMaxPending), awaited: map[string]int{},
		wake: make(chan struct{}, 1), space: make(chan struct{}, 1),
	}
	// Both states are exported from the start, at 0, so that a scrape
	// before the first connection shows the server's admission too.
	a.rec.Connections(stateAdmitted, 0)
	a.rec.Connections(stateWaiting, 0)
	if o.HandshakeRate > 0 {
		a.hsInterval = time.Duration(float64(time.Second) / o.HandshakeRate)
		a.hsBurst = o.HandshakeBurst
	}
	if o.HandshakeConcurrency == 0 {
		o.HandshakeConcurrency = runtime.GOMAXPROCS(0)
	}
	if o.HandshakeConcurrency > 0 {
		a.hsSlots, a.hsConcurrency = review.NewQueue(o.HandshakeConcurrency), o.HandshakeConcurrency
	}
	a.relaxed[stageSilent], a.relaxed[stageHandshake] = c.handshake, c.handshake
	a.relaxed[stageWaiting] = c.waiting
	a.relaxed[stageIdle] = c.idle
	for _, s := range []stage{stageSilent, stageHandshake, stageWaiting} {
		a.tight[s] = o.PressureTimeout
	}
	a.tight[stageIdle] = o.PressureIdleTimeout
	for s := range a.lists {
		a.lists[s].init()
	}
	return a
}

// listener wraps ln.
func (a *admission) listener(ln net.Listener) net.Listener {
	return &admListener{Listener: ln, a: a}
}

type admListener struct {
	net.Listener
	a     *admission
	start sync.Once
}

// Accept returns the next connection admitted: once there is room (see
// LimitListener), the newest connection waiting, taken from the source
// with the fewest connections admitted.
func (l *admListener) Accept() (net.Conn, error) {
	l.start.Do(func() { go l.a.acceptLoop(l.Listener) })
	return l.a.next()
}

func (l *admListener) Close() error {
	err := l.Listener.Close()
	l.a.doneOnce.Do(func() { close(l.a.done) })
	l.a.mu.Lock()
	var pending []*pendingConn
	for _, q := range l.a.pending {
		pending = append(pending, q...)
	}
	l.a.rec.Connections(stateWaiting, -l.a.npending)
	l.a.pending, l.a.npending = map[string][]*pendingConn{}, 0
	l.a.mu.Unlock()
	for _, pc := range pending {
		pc.Close()
	}
	return err
}

// pendingConn is a connection accepted from the kernel and not admitted
// yet: nothing is read from it.
type pendingConn struct {
	net.Conn
	raddr net.Addr
	key   string
	at    time.Time
	// reconnect is set on a connection presumed to be the reconnection of
	// one of its source's that closed (it arrived while such a close was
	// not yet followed by an arrival): the number of the admission
	// interval it arrived in, plus one; 0 for none.
	reconnect uint64
}

// acceptLoop takes connections from ln as they come, as long as fewer
// than maxPending wait, so that admission can choose among them (newest
// first, sources in turn) rather than take the kernel's oldest. It ends
// when ln is closed.
func (a *admission) acceptLoop(ln net.Listener) {
	var delay time.Duration
	for {
		a.mu.Lock()
		full := a.npending >= a.maxPending
		a.mu.Unlock()
		if full {
			select {
			case <-a.space:
				continue
			case <-a.done:
				return
			}
		}
		c, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(interface{ Temporary() bool }); ok && ne.Temporary() {
				// Out of files, say: back off as net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				if a.sleep(delay) != nil {
					return
				}
				continue
			}
			a.mu.Lock()
			a.acceptErr = err
			a.mu.Unlock()
			a.signal(a.wake)
			return
		}
		delay = 0
		pc := &pendingConn{Conn: c, raddr: uniqueAddr(c.RemoteAddr())}
		pc.key = a.source(pc.raddr)
		a.mu.Lock()
		pc.at = a.clock.Now()
		closed := a.acceptErr != nil || isDone(a.done)
		if !closed {
			if n := a.awaited[pc.key]; n > 0 {
				pc.reconnect = a.admissions + 1
				if n == 1 {
					delete(a.awaited, pc.key)
				} else {
					a.awaited[pc.key] = n - 1
				}
			}
			a.pending[pc.key] = append(a.pending[pc.key], pc)
			a.npending++
			a.rec.Connections(stateWaiting, 1)
		}
		a.mu.Unlock()
		if closed {
			c.Close()
			return
		}
		a.signal(a.wake)
	}
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// next admits a waiting connection once there is room for it: fewer than
// max admitted, or a connection may be closed to make room and the TLS
// handshakes are not backlogged.
func (a *admission) next() (net.Conn, error) {
	for {
		a.mu.Lock()
		now := a.clock.Now()
		expired := a.sweep(now)
		if a.npending == 0 && a.acceptErr != nil {
			err := a.acceptErr
			a.mu.Unlock()
			closeAll(expired)
			return nil, err
		}
		wake := now.Add(graceMaxFactor * a.grace)
		var victim *admConn
		admit := a.npending > 0 && a.open < a.max
		if a.npending > 0 && !admit && !a.handshakesBacklogged() {
			if next := a.lastEvict.Add(a.evictEvery); a.evictEvery > 0 && next.After(now) {
				wake = next
			} else {
				victim, wake = a.victim(now)
				if victim != nil {
					a.unlink(victim, closeEvicted)
					a.lastEvict = now
					admit = true
				}
			}
		}
		var ac *admConn
		if admit {
			// Pass over the presumed reconnections that arrived since
			// the previous admission.
			ac = a.admitLocked(a.popLocked(a.admissions+1, now), now)
			a.admissions++
		} else {
			wake = a.nextExpiry(wake)
		}
		a.mu.Unlock()
		closeAll(expired)
		if victim != nil {
			victim.Close()
		}
		if ac != nil {
			if a.join {
				connByAddr.Store(ac.raddr, ac)
			}
			a.signal(a.space)
			return ac, nil
		}
		if err := a.sleep(wake.Sub(now)); err != nil {
			return nil, err
		}
	}
}

// popLocked takes the connection to admit from the pending ones: of the
// source with the fewest connections admitted (then the one whose newest
// connection is the newest), its newest, passing over the presumed
// reconnections that arrived in admission interval skip-1 unless there
// is nothing else. Under overload the oldest waiting connections are the
// ones whose clients are likeliest to have given up; a client that
// reconnects as soon as it is closed would, newest first, overtake a
// newcomer that arrived just before it, and the next reconnection would
// overtake it again: passing over the reconnections of an interval once
// gives the newcomer the next turn (if the newcomer itself was taken for
// a reconnection, it waits one turn). Under a.mu, with a.npending > 0.
func (a *admission) popLocked(skip uint64, now time.Time) *pendingConn {
	if skip%2 == 0 {
		// Every other turn, the one that has waited longest among those
		// that waited more than two intervals and less than a second:
		// a newcomer that newer arrivals kept overtaking, not a
		// connection left waiting long ago by a client that has likely
		// given up or keeps reconnecting.
		if pc := a.popWaitedLocked(now); pc != nil {
			return pc
		}
	}
	eligible := func(pc *pendingConn) bool { return pc.reconnect != skip }
	var best string
	var bestConns, bestIdx int
	var bestAt time.Time
	found := false
	for pass := 0; pass < 2 && !found; pass++ {
		for key, q := range a.pending {
			idx := len(q) - 1
			if pass == 0 {
				for idx >= 0 && !eligible(q[idx]) {
					idx--
				}
				if idx < 0 {
					continue
				}
			}
			conns := 0
			if src := a.sources[key]; src != nil {
				conns = src.conns
			}
			at := q[idx].at
			if !found || conns < bestConns || (conns == bestConns && at.After(bestAt)) {
				best, bestConns, bestIdx, bestAt, found = key, conns, idx, at, true
			}
		}
	}
	return a.removePendingLocked(best, bestIdx)
}

// removePendingLocked takes the idx-th waiting connection of source key
// out of the waiting ones and returns it. Under a.mu.
func (a *admission) removePendingLocked(key string, idx int) *pendingConn {
	q := a.pending[key]
	pc := q[idx]
	q = append(q[:idx], q[idx+1:]...)
	if len(q) == 0 {
		delete(a.pending, key)
	} else {
		a.pending[key] = q
	}
	a.npending--
	a.rec.Connections(stateWaiting, -1)
	return pc
}

// Bounds of the waiting connections popWaitedLocked takes.
const (
	waitedMinIntervals = 2
	waitedMax          = time.Second
)

// popWaitedLocked takes the connection that has waited longest among
// those that waited at least waitedMinIntervals eviction intervals and
// less than waitedMax, or returns nil. Under a.mu.
func (a *admission) popWaitedLocked(now time.Time) *pendingConn {
	from, to := now.Add(-waitedMax), now.Add(-waitedMinIntervals*max(a.evictEvery, 0))
	var best string
	bestIdx := -1
	var bestAt time.Time
	for key, q := range a.pending {
		for i, pc := range q {
			if pc.at.After(to) {
				break
			}
			if !pc.at.After(from) {
				continue // waited a second or more
			}
			if bestIdx < 0 || pc.at.Before(bestAt) {
				best, bestIdx, bestAt = key, i, pc.at
			}
			break
		}
	}
	if bestIdx < 0 {
		return nil
	}
	return a.removePendingLocked(best, bestIdx)
}

// admitLocked registers pc as admitted. Under a.mu, with room.
func (a *admission) admitLocked(pc *pendingConn, now time.Time) *admConn {
	ac := &admConn{Conn: pc.Conn, a: a, raddr: pc.raddr}
	ac.ctx, ac.cancel = context.WithCancel(context.Background())
	a.nextID++
	ac.id = a.nextID
	src := a.sources[pc.key]
	if src == nil {
		src = &sourceState{key: pc.key}
		if a.tls && a.hsInterval > 0 {
			src.hs = loglimit.New(a.hsBurst, a.hsInterval, a.clock)
		}
		a.sources[pc.key] = src
	}
	src.conns++
	ac.src = src
	ac.stage, ac.since = stageSilent, now
	a.lists[stageSilent].pushBack(ac)
	a.open++
	a.rec.Connections(stateAdmitted, 1)
	a.logLocked()
	return ac
}

// sleep waits d, or until a connection closes, arrives or leaves the
// pending ones, or the listener closes.
func (a *admission) sleep(d time.Duration) error {
	t := a.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
	case <-a.wake:
	case <-a.done:
		return net.ErrClosed
	}
	return nil
}

// handshakesBacklogged reports whether as many handshakes wait for a slot
// as can be computed at once: then a full budget admits no one (closing a
// connection for a newcomer whose handshake would only queue behind
// them), so that clients reconnecting at once never make the server start
// more handshakes than it finishes.
func (a *admission) handshakesBacklogged() bool {
	return a.hsSlots != nil && a.hsSlots.Waiting() >= a.hsConcurrency
}

// Bounds of the adaptive grace (see LimitListener).
const (
	graceStayFactor = 4
	graceMaxFactor  = 10
	// stayWeight is the weight of each new stay in the average, as a
	// fraction 1/stayWeight.
	stayWeight = 8
)

// graceOf is the grace of stage s. Under a.mu.
func (a *admission) graceOf(s int) time.Duration {
	g := min(graceStayFactor*a.stay[s], graceMaxFactor*a.grace)
	return max(g, a.grace)
}

// victim returns the connection to close to make room (see LimitListener),
// or nil and when the oldest connection will be old enough. Under a.mu.
func (a *admission) victim(now time.Time) (*admConn, time.Time) {
	wake := now.Add(graceMaxFactor * a.grace)
	for s := range a.lists {
		var best *admConn
		grace := a.graceOf(s)
		for c := a.lists[s].oldest(); c != nil; c = a.lists[s].next(c) {
			if ready := c.since.Add(grace); ready.After(now) {
				if ready.Before(wake) {
					wake = ready
				}
				break // the rest of the list is younger
			}
			if c.queued {
				continue // the server owes it a handshake
			}
			if best == nil || c.src.conns > best.src.conns {
				best = c
			}
		}
		if best != nil {
			return best, now
		}
	}
	return nil, wake
}

// pendingTimeout bounds how long a connection waits to be admitted, when
// the server sets no handshake timeout: its client has likely given up.
const pendingTimeout = 10 * time.Second

// sweep unlinks the connections that have spent longer in their stage
// than its timeout allows at the current fill, and the pending ones that
// waited longer than the handshake timeout, and returns them to be closed
// once a.mu is released. Under a.mu.
func (a *admission) sweep(now time.Time) []net.Conn {
	var expired []net.Conn
	limit := a.pendingLimit()
	for key, q := range a.pending {
		n := 0
		for n < len(q) && now.Sub(q[n].at) >= limit {
			expired = append(expired, q[n])
			n++
		}
		if n == 0 {
			continue
		}
		a.npending -= n
		a.rec.Connections(stateWaiting, -n)
		if n == len(q) {
			delete(a.pending, key)
		} else {
			a.pending[key] = q[n:]
		}
		a.signal(a.space)
	}
	for s := range a.lists {
		timeout := a.timeout(stage(s))
		if timeout <= 0 {
			continue
		}
		for c := a.lists[s].oldest(); c != nil && now.Sub(c.since) >= timeout; {
			next := a.lists[s].next(c)
			if !c.queued { // the server owes it a handshake
				a.unlink(c, closeTimeout)
				expired = append(expired, c)
			}
			c = next
		}
	}
	return expired
}

// pendingLimit is how long a connection may wait to be admitted.
func (a *admission) pendingLimit() time.Duration {
	if limit := a.relaxed[stageSilent]; limit > 0 {
		return limit
	}
	return pendingTimeout
}

// nextExpiry returns when sweep will next have something to close, if
// before wake. Under a.mu.
func (a *admission) nextExpiry(wake time.Time) time.Time {
	limit := a.pendingLimit()
	for _, q := range a.pending {
		if at := q[0].at.Add(limit); at.Before(wake) {
			wake = at
		}
	}
	for s := range a.lists {
		timeout := a.timeout(stage(s))
		if timeout <= 0 {
			continue
		}
		for c := a.lists[s].oldest(); c != nil; c = a.lists[s].next(c) {
			if c.queued {
				// Not timed out while the server owes it a handshake:
				// its turn wakes next (see admConn.releaseSlot).
				continue
			}
			if at := c.since.Add(timeout); at.Before(wake) {
				wake = at
			}
			break
		}
	}
	return wake
}

// timeout is the timeout of stage s at the current fill: its relaxed value
// up to half the budget, then shrinking linearly to its tight value at a
// full budget, but never below the stage's grace (so that on a slow
// network or a loaded machine, where connections that get through need
// longer, they are given it). Under a.mu.
func (a *admission) timeout(s stage) time.Duration {
	relaxed, tight := a.relaxed[s], a.tight[s]
	if relaxed <= 0 || tight <= 0 || tight >= relaxed || 2*a.open <= a.max {
		return relaxed
	}
	over := min(2*a.open-a.max, a.max)
	t := relaxed - (relaxed-tight)*time.Duration(over)/time.Duration(a.max)
	return min(max(t, a.graceOf(int(s))), relaxed)
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// unlink removes c from the budget: it no longer counts and is no longer
// a candidate; the caller closes it. Under a.mu.
func (a *admission) unlink(c *admConn, reason int) {
	if c.gone {
		return
	}
	c.gone = true
	a.lists[c.stage].remove(c)
	a.open--
	a.rec.Connections(stateAdmitted, -1)
	if c.src.conns--; c.src.conns == 0 {
		delete(a.sources, c.src.key)
	}
	if reason >= 0 {
		a.closed[reason][c.stage]++
		a.rec.ConnectionClosed(closeReasonNames[reason], stageNames[c.stage])
	}
	if n := a.awaited[c.src.key]; n < maxAwaited {
		a.awaited[c.src.key] = n + 1
	}
	a.signal(a.wake)
}

// maxAwaited bounds the reconnections awaited of one source.
const maxAwaited = 8

// signal wakes the goroutine waiting on ch, if any.
func (a *admission) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// logLocked writes the paced line saying what admission closed since the
// last one. Under a.mu.
func (a *admission) logLocked() {
	n := 0
	for r := range a.closed {
		for s := range a.closed[r] {
			n += a.closed[r][s]
		}
	}
	if n == 0 {
		return
	}
	if ok, _ := a.log.Allow(); !ok {
		return
	}
	kv := []any{"limit", a.max, "open", a.open}
	for r, name := range [closeReasons]string{"evicted", "timedOut", "rapidReset", "refused"} {
		for s, k := range a.closed[r] {
			if k > 0 {
				kv = append(kv, name+"."+stageNames[s], k)
			}
		}
	}
	a.closed = [closeReasons][numStages]int{}
	a.logger.Info("serving: connection budget full; closed the connections that had done the least", kv...)
}

// set updates c under a.mu with f, and moves it to the stage its state
// says, entering it now if it changed (or if progress is true: a
// milestone within its stage).
func (a *admission) set(c *admConn, progress bool, f func(c *admConn)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(c)
	if c.gone {
		return
	}
	s := c.derive()
	if s == c.stage && !progress {
		return
	}
	now := a.clock.Now()
	if s > c.stage {
		// Moved on: how long it took feeds the stage's grace.
		a.stay[c.stage] += (now.Sub(c.since) - a.stay[c.stage]) / stayWeight
	}
	a.lists[c.stage].remove(c)
	c.stage, c.since = s, now
	a.lists[s].pushBack(c)
}

// evict closes c for reason, outside the budget's order (a rapid reset).
func (a *admission) evict(c *admConn, reason int) {
	a.mu.Lock()
	a.unlink(c, reason)
	a.logLocked()
	a.mu.Unlock()
	c.Close()
}

// admConn is a connection admitted by an admission.
type admConn struct {
	net.Conn
	a     *admission
	raddr net.Addr
	src   *sourceState
	id    uint64
	// ctx is cancelled when the connection closes.
	ctx    context.Context
	cancel context.CancelFunc

	readOnce atomic.Bool
	hsSlot   atomic.Bool // holds one of the admission's handshake slots
	// servedOnce is served, readable without a.mu; unserved counts the
	// gRPC calls in progress opened before it was set (see grpcTap).
	servedOnce atomic.Bool
	unserved   atomic.Int32
	closeOnce  sync.Once
	deadline   atomic.Int64 // read deadline, Unix nanoseconds; 0: none

	// Under a.mu.
	prev, next *admConn
	stage      stage
	since      time.Time
	gone       bool
	sawByte    bool
	handshaken bool
	served     bool
	refused    bool // a request was refused (and none served)
	refusals   int  // requests refused before one was served
	working    int
	queued     bool              // waiting for its handshake's turn
	resets     *loglimit.Limiter // streams the client cancelled (gRPC)
}

// derive is the stage c's state says it is in. Under a.mu.
func (c *admConn) derive() stage {
	switch {
	case c.served && c.working > 0:
		return stageBusy
	case c.served:
		return stageIdle
	case c.refused:
		return stageRefused
	case c.working > 0:
		return stageFirst
	case !c.sawByte:
		return stageSilent
	case c.a.tls && !c.handshaken:
		return stageHandshake
	default:
		return stageWaiting
	}
}

// RemoteAddr returns a copy of the connection's remote address made at
// accept, whose pointer identifies the connection (see connByAddr).
func (c *admConn) RemoteAddr() net.Addr { return c.raddr }

func (c *admConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.readOnce.Load() && c.readOnce.CompareAndSwap(false, true) {
		c.a.set(c, false, func(c *admConn) { c.sawByte = true })
	}
	return n, err
}

func (c *admConn) Write(p []byte) (int, error) {
	if c.hsSlot.Load() {
		// The server's first flight: its share of the handshake's work
		// (key exchange, signature) is done.
		c.releaseSlot()
	}
	return c.Conn.Write(p)
}

// handshakeTurn is called once the client's hello is read: it waits, when
// c's source has started more TLS handshakes than its rate allows, for
// c's turn, then for one of the handshake slots (released by the
// server's first flight, see Write). It fails when c closes or its read
// deadline would pass first.
func (c *admConn) handshakeTurn() error {
	a := c.a
	a.setQueued(c, true)
	defer a.setQueued(c, false)
	if c.src.hs != nil {
		if d := c.src.hs.Reserve(); d > 0 {
			if err := c.wait(d); err != nil {
				c.src.hs.Unreserve()
				return err
			}
		}
	}
	if a.hsSlots == nil {
		return nil
	}
	// Shared fairly: the sources waiting take turns, and a source's
	// connections come first come, first served.
	ctx := review.WithSource(c.ctx, c.reviewSource())
	if dl := c.deadline.Load(); dl != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Unix(0, dl))
		defer cancel()
	}
	if err := a.hsSlots.Acquire(ctx); err != nil {
		if c.closing() {
			return net.ErrClosed
		}
		return os.ErrDeadlineExceeded
	}
	c.hsSlot.Store(true)
	return nil
}

// setQueued marks c as waiting for its handshake's turn, which spares it
// from being closed to make room.
func (a *admission) setQueued(c *admConn, q bool) {
	a.mu.Lock()
	c.queued = q
	a.mu.Unlock()
}

// wait waits d, or fails when c closes or its read deadline passes first.
func (c *admConn) wait(d time.Duration) error {
	if dl := c.deadline.Load(); dl != 0 {
		if left := time.Unix(0, dl).Sub(c.a.clock.Now()); left < d {
			return os.ErrDeadlineExceeded
		}
	}
	t := c.a.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-c.ctx.Done():
		return net.ErrClosed
	}
}

// releaseSlot gives back c's handshake slot, if it holds one.
func (c *admConn) releaseSlot() {
	if c.hsSlot.CompareAndSwap(true, false) {
		c.a.hsSlots.Release()
		c.a.signal(c.a.wake)
	}
}

func (c *admConn) SetDeadline(t time.Time) error {
	c.storeDeadline(t)
	return c.Conn.SetDeadline(t)
}

func (c *admConn) SetReadDeadline(t time.Time) error {
	c.storeDeadline(t)
	return c.Conn.SetReadDeadline(t)
}

func (c *admConn) storeDeadline(t time.Time) {
	if t.IsZero() {
		c.deadline.Store(0)
	} else {
		c.deadline.Store(t.UnixNano())
	}
}

func (c *admConn) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.releaseSlot()
		c.a.mu.Lock()
		c.a.unlink(c, -1)
		c.a.mu.Unlock()
		if c.a.join {
			connByAddr.CompareAndDelete(c.raddr, c)
		}
	})
	return c.Conn.Close()
}

// CloseWrite half-closes the connection when it can, as net/http does
// before closing a connection whose request body it did not read, so that
// the client reads the answer rather than a reset.
func (c *admConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// handshakeDone records that c's TLS handshake finished.
func (c *admConn) handshakeDone() {
	c.releaseSlot()
	c.a.set(c, false, func(c *admConn) { c.sawByte, c.handshaken = true, true })
}

// progress records a milestone within c's stage (an HTTP/2 preface).
func (c *admConn) progress() { c.a.set(c, true, func(*admConn) {}) }

// workStart records a request in progress on c.
func (c *admConn) workStart() {
	c.a.set(c, false, func(c *admConn) { c.sawByte, c.handshaken = true, true; c.working++ })
}

// outcome is how a request ended, for its connection's stage.
type outcome int8

const (
	// outcomeOther: neither answered nor refused (a deadline, a
	// cancellation, a resource limit).
	outcomeOther outcome = iota
	// outcomeServed: answered, not refused.
	outcomeServed
	// outcomeRefused: refused for its credentials (401, 403;
	// Unauthenticated, PermissionDenied).
	outcomeRefused
)

// workEnd records the end of a request on c; a connection that has not
// completed a request and had maxRefusals refused is closed.
func (c *admConn) workEnd(o outcome) {
	over := false
	c.a.set(c, false, func(c *admConn) {
		c.working--
		c.served = c.served || o == outcomeServed
		c.refused = c.refused || o == outcomeRefused
		if o == outcomeRefused && !c.served {
			c.refusals++
			over = c.refusals >= maxRefusals
		}
	})
	if o == outcomeServed {
		c.servedOnce.Store(true)
	}
	if over {
		c.a.evict(c, closeRefusals)
	}
}

// hijacked records that c left its HTTP server (a protocol upgrade): it is
// busy until it closes.
func (c *admConn) hijacked() {
	c.a.set(c, false, func(c *admConn) { c.served = true; c.working++ })
}

// source is c's review.Source.
func (c *admConn) reviewSource() review.Source {
	return review.Source{Address: c.src.key, Conn: "#" + strconv.FormatUint(c.id, 10)}
}

// admissionTLS returns base with the hooks through which admission
// follows and paces TLS handshakes: once a client's hello is read, its
// connection's turn (handshakeTurn); when the server verified the
// connection, its last step before the client's Finished, the end of the
// handshake stage. Connections that are not an admission's are handed to
// base as they are.
func admissionTLS(base *tls.Config) *tls.Config {
	cfg := base.Clone()
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		got := base
		if base.GetConfigForClient != nil {
			g, err := base.GetConfigForClient(hello)
			if err != nil {
				return nil, err
			}
			if g != nil {
				got = g
			}
		}
		c, ok := hello.Conn.(*admConn)
		if !ok {
			if got == base {
				return nil, nil
			}
			return got, nil
		}
		if err := c.handshakeTurn(); err != nil {
			return nil, err
		}
		got = got.Clone()
		got.GetConfigForClient = nil
		verify := got.VerifyConnection
		got.VerifyConnection = func(cs tls.ConnectionState) error {
			if verify != nil {
				if err := verify(cs); err != nil {
					return err
				}
			}
			c.handshakeDone()
			return nil
		}
		return got, nil
	}
	return cfg
}

// connByAddr finds an admitted connection by the pointer its RemoteAddr
// returns, for grpc's stats handler, which is told a connection's address
// and nothing else that identifies it (TLS and grpc's other credentials
// return the raw connection's address as is). Only connections of
// admissions with join set are in it.
var connByAddr sync.Map // net.Addr -> *admConn

// uniqueAddr returns a copy of addr, so that its pointer is this
// connection's alone.
func uniqueAddr(addr net.Addr) net.Addr {
	switch a := addr.(type) {
	case *net.TCPAddr:
		cp := *a
		return &cp
	case *net.UnixAddr:
		cp := *a
		return &cp
	}
	return addr
}

type connKey struct{}

// withConn returns ctx carrying c, and c's review source.
func withConn(ctx context.Context, c *admConn) context.Context {
	ctx = context.WithValue(ctx, connKey{}, c)
	if _, ok := review.SourceFrom(ctx); !ok {
		ctx = review.WithSource(ctx, c.reviewSource())
	}
	return ctx
}

func connFrom(ctx context.Context) *admConn {
	c, _ := ctx.Value(connKey{}).(*admConn)
	return c
}

// connList is an intrusive doubly linked list of connections in the order
// they entered a stage.
type connList struct{ root admConn }

func (l *connList) init() { l.root.next, l.root.prev = &l.root, &l.root }

func (l *connList) oldest() *admConn { return l.next(&l.root) }

func (l *connList) next(c *admConn) *admConn {
	if c.next == &l.root {
		return nil
	}
	return c.next
}

func (l *connList) pushBack(c *admConn) {
	c.prev, c.next = l.root.prev, &l.root
	l.root.prev.next = c
	l.root.prev = c
}

func (l *connList) remove(c *admConn) {
	c.prev.next, c.next.prev = c.next, c.prev
	c.prev, c.next = nil, nil
}

// reservedFiles are the files MaxConnectionsFor keeps out of the budget:
// the process's own (listeners, API server connections, certificates,
// logs: 64) and the connections waiting to be admitted
// ([DefaultMaxPending]).
const reservedFiles = 64 + DefaultMaxPending

// MaxConnectionsFor returns max capped to half of the process's open-file
// limit less 128 (and at least 1): each connection a proxy serves may need a
// second one to its upstream, up to 64 more wait to be admitted
// ([DefaultMaxPending]), and the process needs files for the API server, its
// certificates and its logs. (Go raises the soft limit to the hard limit at
// start; this reads the limit in force.) Where the limit is unknown, max is
// returned.
func MaxConnectionsFor(max int) int {
	limit := openFileLimit()
	if limit == 0 || max <= 0 {
		return max
	}
	budget := int64(0)
	if limit > reservedFiles {
		budget = int64(limit-reservedFiles) / 2
	}
	if budget < 1 {
		budget = 1
	}
	if int64(max) > budget {
		return int(budget)
	}
	return max
}
