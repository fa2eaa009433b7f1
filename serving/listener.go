package serving

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

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

	// DefaultPressureTimeout and DefaultPressureIdleTimeout were what the
	// handshake, header, HTTP/2 preface and first-message timeouts, and
	// the idle timeout, shrank to when the budget was full.
	//
	// Deprecated: the timeouts no longer shrink unless
	// [AdmissionOptions].PressureTimeout or PressureIdleTimeout is set
	// (issue #32). Shrunk, they close a flood's connections together, a
	// budget's worth a second, and every one reconnects at once: the
	// server pays a handshake for each, and its newcomers wait among the
	// reconnections. Measured at the defaults with 2,313 attackers from
	// the client's address (1.75 times the budget of a 4,096-file limit,
	// AMD EPYC, 2 cores, docs/benchmarks.md): with them, rbacproxy saw
	// about 25,000 attacker connections in 16 s and spent 20-86% of a
	// core; without them, and closing a connection only for a newcomer
	// (see [LimitListener]), about 4,500 and 5-12%, and it answered 100%
	// of new connections within 1 s in every row but the CPU-bound ones.
	// Set the options to these values for the old behaviour.
	DefaultPressureTimeout     = time.Second
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

	// DefaultProgressWindow is how recent a connection's progress must
	// be for it to be spared while one that made none is kept (see
	// [LimitListener]): bytes moved for a request in progress, or a
	// request served. A watch that sends an event or a bookmark, a
	// stream, a download or an upload moves bytes every few seconds; a
	// scraper that scrapes every few seconds serves a request as often.
	DefaultProgressWindow = 5 * time.Second

	// DefaultMaxPending was the bound of the connections accepted from
	// the kernel and not admitted yet.
	//
	// Deprecated: as many connections may wait to be admitted as the
	// budget admits (see [LimitListener]), so that a flood of up to twice
	// the budget waits where admission can choose among it, not in the
	// kernel's first-come first-served queue. Nothing reads this constant.
	DefaultMaxPending = 64
)

// AdmissionOptions tune how a server admits connections once its budget
// (MaxConnections) is full, and how it treats clients that hold
// connections without using them (see [LimitListener]). Every zero value
// means the default named on the field.
type AdmissionOptions struct {
	// EvictionGrace: zero means [DefaultEvictionGrace].
	EvictionGrace time.Duration
	// ProgressWindow: zero means [DefaultProgressWindow]; negative means
	// progress is not considered (stages and age alone choose).
	ProgressWindow time.Duration
	// EvictionInterval: zero means [DefaultEvictionInterval]; negative
	// means no pacing.
	EvictionInterval time.Duration
	// PressureTimeout, if positive, bounds the handshake, the request
	// header, the HTTP/2 preface and a gRPC connection's first message
	// when the budget is full (see [LimitListener]). Zero or negative,
	// the default, means the timeouts do not shrink (see
	// [DefaultPressureTimeout] for why).
	PressureTimeout time.Duration
	// PressureIdleTimeout, if positive, bounds an idle connection that
	// completed a request when the budget is full. Zero or negative, the
	// default, means it does not shrink.
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
	// MaxWaiting bounds the connections accepted from the kernel's queue
	// and waiting to be admitted (see [LimitListener]). Zero, the
	// default, means the budget's worth, and past it as many more as the
	// process has files and memory to spare: while more than 128 files
	// are free under its open-file limit (counted from /proc/self/fd) and
	// fewer wait than a quarter of its memory limit at [WaitingMemory]
	// each; where the open files cannot be counted, the budget's worth.
	// Positive means at most that many; negative, the budget's worth.
	MaxWaiting int
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
// ln open at once, and makes room for a newcomer by closing the one that
// has done the least for the longest, rather than making the newcomer
// wait.
//
// Connections are taken from ln as they come (by a goroutine the listener
// runs until it is closed) to wait to be admitted, from which nothing is
// read (each holds a file and its kernel socket, no goroutine, no
// buffer): max of them, and past that as many more as the process has
// files and memory to spare (see [AdmissionOptions].MaxWaiting), those
// past max closed, longest waiting first, when the process's other
// connections need the files back (fewer than 64 free); past that, they
// wait in the kernel's queue, first come first served. Parking a flood
// here rather than in the kernel's queue is what lets a newcomer overtake
// it: in the kernel's queue it would wait behind every attacker that
// arrived before it, for as many admissions. When there is room, the newest waiting
// connection of the source with the fewest connections admitted is
// admitted: under a flood the oldest waiting connections are those whose
// clients are likeliest to have given up, and a client that reconnects as
// soon as it is closed does not push a newcomer back behind its retries
// (adaptive LIFO); a newcomer (an arrival of the last second that is not
// a presumed reconnection, see below) goes before every presumed
// reconnection, and one is passed over in the turn it arrived in, so that
// a newcomer taken for a reconnection is not overtaken by reconnection
// after reconnection either; and every other
// turn goes instead to the connection that has waited longest among those
// that waited at least two EvictionIntervals and less than 400 ms, so
// that one overtaken by newer arrivals is not starved (and, admitted, is
// answered within a second, which one that had waited a second would not
// be). Where the open files cannot be counted (not Linux) or MaxWaiting
// is set, a connection waiting longer than the handshake timeout (10s
// without one) is closed; where they are, a waiting connection is not
// closed for its age while more may wait (closing it only makes its
// client reconnect, and be taken for a reconnection), and once no more
// may, the longest waiting is closed for an arrival once it has waited
// that long, its client's next arrival presumed its reconnection unless
// the client had closed it.
//
// A connection arriving from a source within a second of the last close
// of one of its connections, by the server (a timeout, an eviction, a
// refusal) or of one that served nothing, is presumed to be the
// reconnection of one of them, one arrival per close: a client closing a
// connection it was served on (a scraper that opens one per scrape)
// awaits none. A source closed at least once a second keeps every close
// not yet answered awaited: under HTTP/2 rapid reset at 2,313 attackers
// from one address (AMD EPYC, 2 cores), 100-340 at any time, its
// clients coming back 2-3 s after a close.
//
// A connection is closed to make room only for a newcomer: a waiting
// connection that arrived within the last second and is not a presumed
// reconnection (and that newcomer is admitted). Closing one for anything
// else only makes its client reconnect, and newest first that
// reconnection would overtake the next newcomer; a flood parked at a full
// budget, with its reconnections, stays parked, at no cost but its files,
// until a newcomer comes or one of its connections leaves. A presumed
// reconnection that has waited two EvictionIntervals (perhaps a newcomer
// taken for one: a client that notices a close late reconnects after
// it) has one closed for it, the longest waiting first, at once for each
// connection served since the last such close (up to 8), else at most
// once a second: closes that admit a flood's connections earn nothing.
//
// Each admitted connection is in one stage, and when max are admitted a
// newcomer is admitted after closing one, chosen in this order:
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
// A connection that made progress in the last ProgressWindow (bytes read
// or written for a request in progress: a watch, a stream, a download, an
// upload; or a request it served) goes only when no connection that made
// none is admitted, not even one still in its grace: the new one waits
// for that one instead. Within a stage, the connection of the source
// holding the most connections goes first, then the youngest (admitted
// last): under a flood the youngest are the attackers' reconnections. Of
// silent connections the oldest goes first: the youngest may be a
// newcomer whose first bytes the server has not read yet. The policy is
// in policy.go, its bookkeeping in admission.go. A connection is not
// closed before it has spent its grace in its stage: EvictionGrace, or,
// when connections that moved on from that stage recently needed longer
// (a slow network, a loaded machine), four times their average, up to ten
// times EvictionGrace. When every connection is that young, the new one
// waits until one is old enough or closes; connections are closed to make
// room at most once per EvictionInterval; and it also waits while as many
// TLS handshakes wait for their turn as can be computed at once
// (HandshakeConcurrency), so that clients reconnecting at once never make
// the server start more handshakes than it finishes. A connection waiting
// for its handshake's turn is not closed to make room. With HTTP and gRPC
// servers of this package the stages follow the protocol
// (http.Server.ConnState and the handler; grpc's stats handler and tap); a
// plain listener knows only silent and waiting (a byte received).
//
// The timeouts of the first stages keep their configured values however
// full the budget. With PressureTimeout or PressureIdleTimeout set, they
// shrink as the budget fills: from half full they go linearly from their
// configured value to PressureTimeout (handshake, header, preface, first
// message) and PressureIdleTimeout (idle) when full, but never below the
// stage's grace, and relax again as it empties. They are checked when a
// connection is accepted, so they cost nothing while the server is not
// under pressure. A plain listener has no timeouts of its own.
//
// TLS servers of this package also bound the handshakes computed at once
// (HandshakeConcurrency) and, if HandshakeRate is set, those each source
// starts.
//
// HTTP and gRPC servers of this package park a connection never served
// that passes their rapid-reset bound (RapidResetLimit): nothing more is
// read from it, so that it costs its file and the memory it holds, no
// CPU, and its client, blocked on a full socket, does not reconnect to
// cost a handshake. The first max of them are parked outside the budget,
// where they hold no one's room (reviewauth_connections{state="parked"});
// past that, within it, in the refused stage. Once parked 10 s with no
// connection waiting, those outside the budget are closed one per
// EvictionInterval (a client that died with frames unsent never closes
// its end where the server can see it), those within it all at once; all
// are closed when shutdown starts. They park the same way, outside the
// budget while fewer than max are parked there, a connection with 8
// requests refused and none served, and, while connections wait for
// room, one that made no request and was never served that would be
// closed for room or for a timeout (a plain listener closes it): closed,
// its client reconnects at once, costs a handshake and, from the address
// the clients share, makes the next arrival a presumed reconnection.
//
// A max of zero or less means no limit, and ln is returned as is. The
// budget should stay below a third of the process's open-file limit
// ([MaxConnectionsFor]): the process holds max admitted connections, max
// waiting ones (more only while files are to spare), one being swapped in
// for another, and a proxy as many connections to its upstream (or a
// server as many parked outside the budget, which have none).
func LimitListener(ln net.Listener, max int, opts LimitOptions) net.Listener {
	if max <= 0 {
		return ln
	}
	return newAdmission(max, admissionConfig{LimitOptions: opts}).listener(ln)
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
		for _, pc := range q {
			pc.gone = true
		}
		pending = append(pending, q...)
	}
	l.a.newcomers, l.a.reconnects, l.a.recent = arrivalQueue{}, arrivalQueue{}, arrivalQueue{}
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
	// gone: no longer waiting (admitted, expired or closed). Under a.mu.
	gone bool
}

// acceptLoop takes connections from ln as they come, as long as fewer
// than maxPending wait, so that admission can choose among them (newest
// first, sources in turn) rather than take the kernel's oldest. It ends
// when ln is closed.
func (a *admission) acceptLoop(ln net.Listener) {
	var delay time.Duration
	for {
		a.mu.Lock()
		now := a.clock.Now()
		shed := a.shedLocked(now)
		full := !a.roomToWaitLocked(now)
		// Past the budget's worth, the files are counted again while
		// waiting: the process's other connections may need them back.
		recount := full && a.files != nil && a.npending > a.maxPending
		a.mu.Unlock()
		for _, pc := range shed {
			pc.Close()
		}
		if len(shed) > 0 {
			a.signal(a.wake)
		}
		if full {
			wait := time.Duration(-1)
			if recount {
				wait = filesEvery
			}
			if a.waitForSpace(wait) != nil {
				return
			}
			continue
		}
		c, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(interface{ Temporary() bool }); ok && ne.Temporary() {
				// Out of files, say: back off as net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				if a.waitForSpace(delay) != nil {
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
		var left []*pendingConn
		if !closed {
			left = a.reapLeftLocked(pc.key, pc.at)
			from := pc.at.Add(-waitedMax)
			a.newcomers.front(from)
			a.reconnects.front(from)
			a.recent.front(pc.at.Add(-turnWaitedMax))
			a.recent.push(pc)
			if a.reconnectionLocked(pc.key, pc.at) {
				pc.reconnect = a.admissions + 1
				a.reconnects.push(pc)
			} else {
				a.newcomers.push(pc)
			}
			a.pending[pc.key] = append(a.pending[pc.key], pc)
			a.npending++
			a.filesSince++
			a.rec.Connections(stateWaiting, 1)
		}
		a.mu.Unlock()
		for _, l := range left {
			l.Close()
		}
		if closed {
			c.Close()
			return
		}
		a.signal(a.wake)
	}
}

// reapScan bounds the waiting connections of a source reapLeftLocked
// checks at each of its arrivals.
const reapScan = 4

// reapLeftLocked takes out of the waiting ones, and returns to be closed,
// those among source key's reapScan oldest whose client has closed its
// end, and counts each as a close its client may answer by reconnecting
// (see awaitLocked): called as a connection from key arrives, which is
// then presumed to be that reconnection. A client that gave up waiting
// (gRPC's 20 s connect timeout, say) and reconnects at once would
// otherwise come back as a newcomer, and a connection would be closed to
// make room for it: with 2,313 junk-token clients from one address at
// the default budget, the ones left waiting past 20 s came back at tens a
// second, each closing an admitted one. Where peerClosed cannot tell,
// none is. Under a.mu.
func (a *admission) reapLeftLocked(key string, now time.Time) []*pendingConn {
	if !peerStateKnown {
		return nil
	}
	var left []*pendingConn
	for i, checked := 0, 0; checked < reapScan && i < len(a.pending[key]); checked++ {
		pc := a.pending[key][i]
		if !peerClosed(pc.Conn) {
			i++
			continue
		}
		a.removePendingLocked(key, i)
		a.awaitLocked(key, now, 1)
		left = append(left, pc)
	}
	return left
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
		var held []*admConn
		expired := a.sweep(now, &held)
		if a.npending == 0 && a.acceptErr != nil {
			err := a.acceptErr
			a.mu.Unlock()
			closeAll(expired)
			holdAll(held)
			return nil, err
		}
		wake := now.Add(graceMaxFactor * a.grace)
		var victim *admConn
		admit := a.npending > 0 && a.open < a.max
		demand := demandNone // what a connection was closed for
		if a.npending > 0 && !admit && !a.handshakesBacklogged() {
			if d := a.demandLocked(now); d != demandNone {
				next := a.lastEvict.Add(max(a.evictEvery, 0))
				if d == demandPassedOver && a.rescues == 0 {
					next = later(next, a.lastPassedOver.Add(passedOverInterval))
				}
				if next.After(now) {
					wake = next
				} else {
					victim, wake = a.victim(now)
					if victim != nil {
						if a.holdLocked(victim, closeEvicted) {
							held, victim = append(held, victim), nil
						} else {
							a.unlink(victim, closeEvicted)
						}
						a.lastEvict = now
						if d == demandPassedOver {
							if a.rescues > 0 {
								a.rescues--
							} else {
								a.lastPassedOver = now
							}
						}
						demand, admit = d, true
					}
				}
			}
		}
		var ac *admConn
		if admit {
			// The newcomer, or the presumed reconnection that waited,
			// that a connection was closed for; else the newest waiting.
			var pc *pendingConn
			switch demand {
			case demandNewcomer:
				pc = a.popNewcomerLocked(now)
			case demandPassedOver:
				pc = a.popWaitedLocked(now, false)
			}
			if pc == nil {
				// Pass over the presumed reconnections that arrived
				// since the previous admission.
				pc = a.popLocked(a.admissions+1, now)
			}
			ac = a.admitLocked(pc, now)
			a.admissions++
		} else {
			wake = a.nextExpiry(wake)
		}
		a.mu.Unlock()
		closeAll(expired)
		holdAll(held)
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

// holdAll finishes parking the connections holdLocked held.
func holdAll(cs []*admConn) {
	for _, c := range cs {
		c.hold()
	}
}

// waitForSpace waits d (forever if negative), or until a waiting
// connection leaves, for acceptLoop; net.ErrClosed once the listener is
// closed.
func (a *admission) waitForSpace(d time.Duration) error {
	var timeout <-chan time.Time
	if d >= 0 {
		t := a.clock.NewTimer(d)
		defer t.Stop()
		timeout = t.C()
	}
	select {
	case <-timeout:
	case <-a.space:
	case <-a.done:
		return net.ErrClosed
	}
	return nil
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
