package serving

// This file is admission's policy: which connection is closed to make
// room, which one waiting is admitted, and what times out, and why. The
// bookkeeping it decides on is in admission.go.

import (
	"net"
	"sort"
	"time"
)

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
// Where the server can park, one past the bound is parked instead (see
// parkRefused).
const maxRefusals = 8

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

// popLocked takes the connection to admit from the pending ones: of the
// source with the fewest connections admitted (then the one whose newest
// connection is the newest), its newest newcomer of the last waitedMax,
// else its newest, passing over the presumed reconnections that arrived
// in admission interval skip-1 unless there is nothing else. Under
// overload the oldest waiting connections are the ones whose clients are
// likeliest to have given up; a client that reconnects as soon as it is
// closed would, newest first, overtake a newcomer that arrived just
// before it, and the next reconnection would overtake it again. A
// newcomer goes first: passing over only the reconnections of the current
// interval, those of earlier ones that a turn did not take were newer
// than it, and under a flood that reconnects faster than turns come it
// could wait behind them until it was out of reach (the sidecar under
// 2,313 junk-token clients from its client's address, Intel Xeon, 2
// cores: 92-100% of new calls within 1 s over 12 runs before, 94-100%
// over 14 with this alone; the main cause there was grpcOutcome's, and
// with both, 98-100% over 10). A newcomer taken for a
// reconnection has the turns that pass over the reconnections of their
// interval, and those that take the one that waited longest. Under a.mu,
// with a.npending > 0.
func (a *admission) popLocked(skip uint64, now time.Time) *pendingConn {
	if skip%2 == 0 {
		// Every other turn, the one that has waited longest among those
		// that waited more than two intervals and less than
		// turnWaitedMax:
		// a newcomer that newer arrivals kept overtaking, not a
		// connection left waiting long ago by a client that has likely
		// given up or keeps reconnecting.
		if pc := a.popWaitedLocked(now, true); pc != nil {
			return pc
		}
	}
	if pc := a.popNewcomerLocked(now); pc != nil {
		return pc
	}
	if pc := a.popNewestLocked(func(pc *pendingConn) bool { return pc.reconnect != skip }, popScan); pc != nil {
		return pc
	}
	return a.popNewestLocked(func(*pendingConn) bool { return true }, 1)
}

// popNewcomerLocked takes the newcomer a connection was just closed for
// (see demandLocked), or the one an admission turn takes first: of the
// source with the fewest connections admitted, its newest arrival of the
// last waitedMax that is not a presumed reconnection; nil if none. Every
// newcomer is in a.newcomers: when none waits there (under a flood of
// reconnections, most turns), the sources are not scanned. Under a.mu.
func (a *admission) popNewcomerLocked(now time.Time) *pendingConn {
	from := now.Add(-waitedMax)
	if a.newcomers.front(from) == nil {
		return nil
	}
	return a.popNewestLocked(func(pc *pendingConn) bool { return pc.reconnect == 0 && pc.at.After(from) }, popScan)
}

// popNewestLocked takes, of the source with the fewest connections
// admitted (then the one whose candidate is the newest), the newest
// waiting connection ok accepts among its last scan; nil if none. Under
// a.mu.
func (a *admission) popNewestLocked(ok func(pc *pendingConn) bool, scan int) *pendingConn {
	var best string
	var bestConns, bestIdx int
	var bestAt time.Time
	found := false
	for key, q := range a.pending {
		idx, stop := len(q)-1, max(len(q)-scan, 0)
		for idx >= stop && !ok(q[idx]) {
			idx--
		}
		if idx < stop {
			continue
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
	if !found {
		return nil
	}
	return a.removePendingLocked(best, bestIdx)
}

// What a waiting connection asks of a full budget (see demandLocked).
const (
	// demandNone: nothing that a connection should be closed for.
	demandNone = iota
	// demandPassedOver: a presumed reconnection that has waited
	// waitedMinIntervals eviction intervals, perhaps a newcomer taken for
	// one: a connection is closed for it at most once per
	// passedOverInterval.
	demandPassedOver
	// demandNewcomer: a newcomer.
	demandNewcomer
)

// passedOverInterval paces the connections closed for presumed
// reconnections (demandPassedOver) beyond the rescues earned (see
// maxRescues). Each one closed reconnects, and its reconnection, once it
// has waited, asks for the next: closing one per EvictionInterval churned
// a flood at that rate for good (measured at 2,313 attackers from one
// address, AMD EPYC, 2 cores: idle TLS newcomers' p50 from 3 ms to 26 ms,
// junk tokens 78% of new connections within 1 s). But slowloris clients
// notice a close only at their next write (0.5-1 s later): their late
// reconnections spend the marks of later closes, and a newcomer arriving
// meanwhile is taken for a reconnection; at CI scale (budget 64, a new
// connection every 100 ms) most are, and with one close for them a
// second, or four, 60-93% were answered within 1 s. Rescues earned by
// the connections served let a client's newcomers through at the rate it
// is served, and a flood's at one a second.
const passedOverInterval = time.Second

// maxRescues bounds the rescues earned: a connection may be closed for a
// presumed reconnection at once (EvictionInterval apart) for each of the
// last maxRescues connections served, then once per passedOverInterval.
// Rescues that admit attackers earn nothing, so that a flood's late
// reconnections cannot keep the churn going; rescues that admit a
// client's connections, which it then uses, pay for the next.
//
// The allowance starts full, as a token bucket does: a server in use has
// earned it from its clients' connections long before a flood, and a
// flood's first second is when most newcomers are taken for
// reconnections (its first evictions are all awaited). Starting empty,
// TestFloodsHTTP/slowloris (budget 64, 112 attackers from the client's
// address) answered 87.5% of new connections within 1 s at its first
// attempt in 3 of 4 runs, then 98-100% on the same server: four
// newcomers of the flood's first second waited 2-3.9 s, taken for
// reconnections with no rescue to spend. Full, 100% in 4 of 4 (Intel
// Xeon, 2 cores). A flood gains maxRescues closes once.
const maxRescues = 8

// demandLocked says whether a connection waits that an admitted one should
// be closed for: one that arrived within the last waitedMax, whose client
// is likely still waiting, and is not a presumed reconnection (a
// newcomer), or is one that has waited waitedMinIntervals eviction
// intervals (perhaps a newcomer taken for one). Closing an admitted
// connection for anything else only makes its client reconnect, and that
// reconnection overtakes, newest first, the next newcomer. Under a.mu.
func (a *admission) demandLocked(now time.Time) int {
	from := now.Add(-waitedMax)
	if a.newcomers.front(from) != nil {
		return demandNewcomer
	}
	// The presumed reconnection that has waited longest in the last
	// second: one waited long enough if it did.
	if pc := a.reconnects.front(from); pc != nil && !pc.at.After(now.Add(-waitedMinIntervals*max(a.evictEvery, 0))) {
		return demandPassedOver
	}
	return demandNone
}

// later returns the later of t and u.
func later(t, u time.Time) time.Time {
	if u.After(t) {
		return u
	}
	return t
}

// popScan bounds the connections of a source popLocked looks at, newest
// first, for one that is not a presumed reconnection of the current
// interval, so that a turn costs the same however many wait.
const popScan = 256

// Bounds of the waiting connections popWaitedLocked takes: those that
// waited at least waitedMinIntervals eviction intervals, and less than
// waitedMax when a connection was closed for one (demandPassedOver: the
// newcomers' and reconnections' queues also keep a second's arrivals for
// demandLocked), or less than turnWaitedMax on popLocked's turns.
//
// turnWaitedMax is shorter. Under a flood that is closed as fast as it
// reconnects (HTTP/2 rapid reset, junk tokens), slots free hundreds of
// times a second, and on the turns that take the one that waited longest
// the oldest of those not presumed given up on is admitted: a client's
// connection taken for a reconnection is admitted when it has waited
// about the bound, then waits its handshake's turn and its request. At a
// second, those answered were answered in 1-1.2 s (2,313 rapid-reset
// attackers from the client's address: 86-100% of new connections within
// 1 s over five runs, p95 1.04-1.23 s; junk tokens 94%); at 600 ms,
// 90-100% over six runs, p95 0.5-1 s; at 400 ms, 96-100% over five, p95
// 270-700 ms; at 250 ms, 86-100% over five (fewer of those that newer
// arrivals overtook are still in reach) (AMD EPYC, 2 cores,
// docs/benchmarks.md). Taking the one that waited longest on every turn
// rather than every other (600 ms): 90-96%. The connections closed
// for presumed reconnections keep the second: they come at most once per
// passedOverInterval (a second) once the rescues are spent, and one
// arriving just after such a close must still be in reach at the next.
const (
	waitedMinIntervals = 2
	waitedMax          = time.Second
	turnWaitedMax      = 400 * time.Millisecond
)

// popWaitedLocked takes the connection that has waited longest among
// those that waited at least waitedMinIntervals eviction intervals and
// less than turnWaitedMax (turn) or waitedMax, or returns nil: the front of
// the recent arrivals (turn) or the older of the newcomers' and
// reconnections' fronts (see arrivalQueue). Under a.mu.
func (a *admission) popWaitedLocked(now time.Time, turn bool) *pendingConn {
	to := now.Add(-waitedMinIntervals * max(a.evictEvery, 0))
	var pc *pendingConn
	if turn {
		pc = a.recent.front(now.Add(-turnWaitedMax))
	} else {
		from := now.Add(-waitedMax)
		pc = a.newcomers.front(from)
		if r := a.reconnects.front(from); pc == nil || (r != nil && r.at.Before(pc.at)) {
			pc = r
		}
	}
	if pc == nil || pc.at.After(to) {
		return nil
	}
	// A source's waiting connections are oldest first: find pc by
	// bisection, then among those that arrived at the same time.
	q := a.pending[pc.key]
	for i := sort.Search(len(q), func(i int) bool { return !q[i].at.Before(pc.at) }); i < len(q); i++ {
		if q[i] == pc {
			return a.removePendingLocked(pc.key, i)
		}
	}
	// Not waiting after all (cannot happen: whatever takes a connection
	// from the waiting ones marks it gone): forget it.
	pc.gone = true
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
// or nil and when the first candidate will be old enough. Under a.mu.
//
// Connections that made progress within the progress window (see
// progressing) are candidates only when no other connection is admitted,
// not even one still in its grace: a watch, a stream, a download or an
// upload is never closed while a connection that did neither is kept.
// Within those that did not (and, when all did, among those), the stages
// go in order; within a stage, the connection of the source holding the
// most connections goes first, then the youngest (the one admitted last):
// under a flood the youngest are the attackers' reconnections, and a
// connection that has been open long is the likeliest to be a client's
// that uses it. Silent connections are the exception, oldest first: the
// youngest silent one is likeliest a newcomer whose first bytes the
// loaded server has not read yet (its grace is 250 ms), while one silent
// for longer has sent nothing. With the youngest first, the sidecar's
// TestFloods under TCP without TLS, run beside other tests, answered
// 77-97% of new connections within 1 s at its first attempts (5 runs),
// with calls lost to gRPC's reconnect backoff; with the oldest, 93-100%
// (4 runs).
func (a *admission) victim(now time.Time) (*admConn, time.Time) {
	wake := now.Add(graceMaxFactor * a.grace)
	for _, moving := range [...]bool{false, true} {
		seen := false
		for s := range a.lists {
			var best *admConn
			grace := a.graceOf(s)
			for c := a.lists[s].oldest(); c != nil; c = a.lists[s].next(c) {
				if c.progressing(now, a.progressWindow) != moving {
					continue
				}
				seen = true
				if ready := c.since.Add(grace); ready.After(now) {
					if ready.Before(wake) {
						wake = ready
					}
					break // the rest of the list entered the stage later
				}
				if c.queued {
					continue // the server owes it a handshake
				}
				// Youngest first, but the oldest of the silent ones.
				if best == nil || c.src.conns > best.src.conns ||
					(c.src.conns == best.src.conns && (c.id > best.id) != (s == int(stageSilent))) {
					best = c
				}
			}
			if best != nil {
				return best, now
			}
		}
		if seen {
			return nil, wake
		}
	}
	return nil, wake
}

// progressing reports whether c made progress within window of now: bytes
// read or written while one of its requests was in progress (a watch, a
// stream, a download, an upload), or a request it served ended. A request
// that has only started is none (a junk token waiting for its review). A connection that has completed no request served
// loses what its refused requests moved when they end: junk tokens are no
// progress. Reads c's atomics only.
func (c *admConn) progressing(now time.Time, window time.Duration) bool {
	if window <= 0 {
		return false
	}
	m := c.moved.Load()
	return m != 0 && now.UnixNano()-m < int64(window)
}

// pendingTimeout bounds how long a connection waits to be admitted, when
// the server sets no handshake timeout: its client has likely given up.
const pendingTimeout = 10 * time.Second

// sweep unlinks the connections that have spent longer in their stage
// than its timeout allows at the current fill, and the pending ones that
// waited longer than pendingLimit, and returns them to be closed
// once a.mu is released. Under a.mu.
func (a *admission) sweep(now time.Time, held *[]*admConn) []net.Conn {
	var expired []net.Conn
	limit := a.pendingLimit()
	for key, q := range a.pending {
		if limit <= 0 {
			break
		}
		n := 0
		for n < len(q) && now.Sub(q[n].at) >= limit {
			q[n].gone = true
			expired = append(expired, q[n])
			n++
		}
		if n == 0 {
			continue
		}
		a.awaitLocked(key, now, n)
		a.npending -= n
		a.rec.Connections(stateWaiting, -n)
		if n == len(q) {
			delete(a.pending, key)
		} else {
			a.pending[key] = q[n:]
		}
		a.signal(a.space)
	}
	if c := a.parkedRefusedLocked(now); c != nil && a.npending == 0 && !now.Before(a.lastParkedOut.Add(max(a.evictEvery, 0))) {
		// Nothing waits: the connections parked for their refusals
		// within the budget parkedMax ago are closed, one per
		// EvictionInterval with those outside it (see parkRefused).
		a.unlink(c, closeRefusals)
		a.lastParkedOut = now
		expired = append(expired, c)
	}
	if c := a.parkedOut.oldest(); c != nil && a.npending == 0 && !now.Before(a.parkedOutDue(c)) {
		// Nothing waits: the connections parked outside the budget
		// parkedMax ago are closed, one per EvictionInterval (see
		// outsideLocked).
		a.unlink(c, c.outsideReason)
		a.lastParkedOut = now
		expired = append(expired, c)
	}
	if a.npending == 0 && a.parkedResets > 0 {
		// Nothing waits: the connections parked past the rapid-reset
		// bound parkedMax ago are closed (see parkedMax).
		for c := a.lists[stageRefused].oldest(); c != nil && now.Sub(c.since) >= parkedMax; {
			next := a.lists[stageRefused].next(c)
			if c.parkedForResets {
				a.unlink(c, closeRapidReset)
				expired = append(expired, c)
			}
			c = next
		}
	}
	for s := range a.lists {
		timeout := a.timeout(stage(s))
		if timeout <= 0 {
			continue
		}
		for c := a.lists[s].oldest(); c != nil && now.Sub(c.since) >= timeout; {
			next := a.lists[s].next(c)
			switch {
			case c.queued: // the server owes it a handshake
			case a.holdLocked(c, closeTimeout):
				*held = append(*held, c)
			default:
				a.unlink(c, closeTimeout)
				expired = append(expired, c)
			}
			c = next
		}
	}
	return expired
}

// parkedMax is how long a connection parked past the rapid-reset bound
// (see admConn.park) is kept once no connection waits for room: then it is
// closed, for its rapid reset. A client that died with frames unsent
// never closes its end where the server can see it (its FIN waits behind
// the frames, behind the server's closed window) until its kernel gives
// up: measured after 112 rapid-reset clients stopped (budget 64, Intel
// Xeon), their HTTP/2 connections stayed parked 1 min 55 s to 2 min, gRPC
// ones 1 min 19 s, each then closed for a newcomer as an awaited
// reconnection that never comes. Shorter, a flood below the budget, where
// nothing waits, is closed and reconnects that much more often: each
// reconnection costs a TLS handshake and the streams read until the bound
// trips again. With 10 s, rbacproxy under 600 rapid-reset clients at the
// default budget (1,322) spent 34-36% of a core (17-18% keeping them
// parked), the attackers opening 1,681-1,904 connections over the attack
// (1,373-1,396), 100% of new and kept-alive scrapes answered within 1 s
// either way; the dead clients' connections above were closed 9.3-10.0 s
// after the attack (docs/benchmarks.md). While connections wait, one
// parked within the budget is closed only for a newcomer, and one parked
// outside it (see outsideLocked) not at all. Those outside the budget
// are closed one per EvictionInterval, so that live clients parked at
// once do not all come back at once: the last of 112 dead clients'
// connections was closed 7-8 s after the attack, parked during it
// (TestFloodGRPCRapidReset), and a budget's worth would take
// max*EvictionInterval more (66 s at 1,322).
const parkedMax = 10 * time.Second

// ParkedMemory is the memory of the process's memory limit counted for
// each connection parked outside the budget (see outsideLocked): a quarter
// of the limit holds at most that many of them, so that the budget
// (admitted connections, a quarter at [ConnectionMemory] each), the
// connections waiting (a quarter at [WaitingMemory]) and those parked
// leave the process a quarter of its own. Parked connections keep what
// they had: under 2,313 junk-token gRPC clients at the default budget
// (1,322), the sidecar's RSS was 485-499 MiB with up to 1,322 of them
// parked outside it, 374-378 MiB when they were closed instead: about
// 200 KiB each (grpc-go's buffers and goroutines, the TLS connection's);
// an HTTP/2 connection parked holds less. So a container of 128 MiB,
// whose budget its memory sets (256), parks up to 128 outside it, and
// one with memory to spare up to the budget's worth.
const ParkedMemory = 256 << 10

// maxOutsideFor is how many connections may be parked outside a budget
// of max with a memory limit of memory bytes (0: unknown): max, or fewer
// where a quarter of memory holds fewer at ParkedMemory each (none when
// it holds none: they are parked within the budget).
func maxOutsideFor(max int, memory uint64) int {
	if memory == 0 {
		return max
	}
	return int(min(uint64(max), memory/memoryShare/ParkedMemory))
}

// outsideLocked moves c, a connection just parked past the rapid-reset
// bound (see admConn.park), out of the budget, if fewer than maxOutside
// (the budget's worth, fewer if the memory limit holds fewer: see
// ParkedMemory) are parked outside it, and reports whether it did. Parked, a
// connection reads nothing more, runs no request and costs a file and
// the memory it holds; within the budget it holds room that only closing
// it frees, and closed, its client reconnects at once and pays, and makes
// the server pay, a TLS handshake and the streams it resets until the
// bound trips again. With 112 rapid-reset gRPC clients from the
// legitimate client's address at a budget of 64 (TestFloodGRPCRapidReset,
// race detector, Intel Xeon, 2 cores), parked within the budget, each
// connection closed for a newcomer came back and was taken, in the
// newcomer's place, for a reconnection: 90-98% of new connections were
// answered within 1 s, p50 140-400 ms. Outside it, the flood's first
// budget's worth are parked and no longer in anyone's way: 100% in 3
// runs, p50 7-8 ms (closed at the bound, as before: 100%, p50 42 ms). The budget
// sets three files aside for each connection it admits (see
// DefaultBudget), one for a proxy's upstream connection, which a
// connection never served does not have: a budget's worth parked outside
// it costs no more files than the budget counts. Under a.mu.
func (a *admission) outsideLocked(c *admConn, reason int) bool {
	if c.gone || a.nparkedOut >= a.maxOutside {
		return false
	}
	a.lists[c.stage].remove(c)
	c.outside, c.outsideReason, c.since = true, reason, a.clock.Now()
	a.parkedOut.pushBack(c)
	a.nparkedOut++
	a.open--
	a.rec.Connections(stateAdmitted, -1)
	a.rec.Connections(stateParked, 1)
	a.signal(a.wake)
	return true
}

// holdLocked parks c outside the budget (see outsideLocked) instead of
// closing it for reason (an eviction, a timeout), and reports whether it
// did: while connections wait for room, a connection that has sent no
// request (silent: TCP and nothing; waiting: a handshake and no request,
// headers never completed, an HTTP/2 preface and no stream with a
// message) and was never served, when there is room outside. Closed, its
// client (an idle-TLS or slowloris flood reopening every slot it loses)
// is back within a round trip, costs a handshake, and, from the address
// the server's clients share, is presumed a reconnection only as long as
// it comes back within reconnectWindow: slowloris clients notice a close
// at their next write, up to a second later, and a client's newcomer
// arriving meanwhile is taken for one of theirs and waits behind them.
// Parked, it reads nothing more (see parkedRead), costs a file, and
// awaits no reconnection. Where the server cannot park (LimitListener
// alone, peerStateKnown false) it is closed. Under a.mu.
func (a *admission) holdLocked(c *admConn, reason int) bool {
	if !a.park || !peerStateKnown || a.npending == 0 || a.stopping ||
		c.served || c.refused || c.working > 0 || (c.stage != stageSilent && c.stage != stageWaiting) {
		return false
	}
	stage := c.stage
	if !a.outsideLocked(c, reason) {
		return false
	}
	c.parked.Store(true)
	a.held[stage]++
	a.logLocked()
	return true
}

// hold finishes parking c, held by holdLocked: its socket keeps no read
// deadline (the server's, for a handshake or headers, would close it), and
// its calls are cancelled. Without a.mu.
func (c *admConn) hold() {
	_ = c.Conn.SetReadDeadline(time.Time{})
	c.cancelCalls()
}

// parkedRefusedLocked returns the connection parked for its refusals
// within the budget longest, if it was parked parkedMax before now (in
// the refused stage since: parked at its maxRefusals-th refusal), else
// nil. Under a.mu.
func (a *admission) parkedRefusedLocked(now time.Time) *admConn {
	if a.parkedRefused == 0 {
		return nil
	}
	for c := a.lists[stageRefused].oldest(); c != nil && now.Sub(c.since) >= parkedMax; c = a.lists[stageRefused].next(c) {
		if c.parkedForRefusals {
			return c
		}
	}
	return nil
}

// parkedOutDue is when the sweep may close c, the connection parked
// outside the budget longest, once nothing waits: parkedMax after it was
// parked, and EvictionInterval after the last one it closed, so that
// clients still there, coming back, are not all at once.
func (a *admission) parkedOutDue(c *admConn) time.Time {
	return later(c.since.Add(parkedMax), a.lastParkedOut.Add(max(a.evictEvery, 0)))
}

// pendingLimit is how long a connection may wait to be admitted; 0 for
// as long as the files last, where they are counted: closing one for its
// age only makes its client, if still there, reconnect (and, taken for a
// reconnection, wait again), while parked it costs a file that is to
// spare; it is closed when files run short, or for an arrival once no
// more may wait (see shedLocked). With
// 2,974 junk-token clients from one address, rbacproxy answered 90-92%
// of new connections within 1 s closing those that waited 10 s, 100%
// keeping them (AMD EPYC, 2 cores, 4,096 files).
func (a *admission) pendingLimit() time.Duration {
	if a.files != nil {
		return 0
	}
	return a.waitLimit()
}

// waitLimit is how long a connection may wait to be admitted where files
// are not counted, and where they are, how long one must have waited to
// be closed for an arrival once no more may wait: the handshake timeout,
// else pendingTimeout.
func (a *admission) waitLimit() time.Duration {
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
		if limit <= 0 {
			break
		}
		if at := q[0].at.Add(limit); at.Before(wake) {
			wake = at
		}
	}
	if c := a.parkedOut.oldest(); c != nil && a.npending == 0 {
		if at := a.parkedOutDue(c); at.Before(wake) {
			wake = at
		}
	}
	if a.npending == 0 && a.parkedRefused > 0 {
		for c := a.lists[stageRefused].oldest(); c != nil; c = a.lists[stageRefused].next(c) {
			if c.parkedForRefusals {
				if at := later(c.since.Add(parkedMax), a.lastParkedOut.Add(max(a.evictEvery, 0))); at.Before(wake) {
					wake = at
				}
				break
			}
		}
	}
	if a.npending == 0 && a.parkedResets > 0 {
		for c := a.lists[stageRefused].oldest(); c != nil; c = a.lists[stageRefused].next(c) {
			if c.parkedForResets {
				if at := c.since.Add(parkedMax); at.Before(wake) {
					wake = at
				}
				break
			}
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

// workEnd records the end of a request on c, and its progress (see
// progressing); a connection that has not completed a request and had
// maxRefusals refused is closed.
func (c *admConn) workEnd(o outcome) {
	over, park, parkedServed := false, false, false
	c.a.set(c, false, func(c *admConn) {
		c.working--
		// Served after it was parked for its refusals (a request in
		// flight then): closed, as it would have been at the bound, not
		// left parked among served connections.
		parkedServed = o == outcomeServed && (c.parkedForRefusals || c.outside)
		if o == outcomeServed && !c.served {
			// A connection served: perhaps a newcomer that was taken for
			// a reconnection and rescued. Each one earns a rescue.
			c.a.rescues = min(c.a.rescues+1, maxRescues)
			c.a.signal(c.a.wake)
		}
		c.served = c.served || o == outcomeServed
		c.refused = c.refused || o == outcomeRefused
		if o == outcomeRefused && !c.served {
			c.refusals++
			over = c.refusals >= maxRefusals
			// Past the bound: parked rather than closed (see
			// parkRefused).
			park = over && peerStateKnown
		}
	})
	left := c.active.Add(-1)
	switch {
	case o == outcomeServed:
		c.servedOnce.Store(true)
		c.moved.Store(c.a.clock.Now().UnixNano())
	case left == 0 && !c.servedOnce.Load():
		// What a request that was not served moved is no progress.
		c.moved.Store(0)
	}
	switch {
	case park:
		c.parkRefused()
	case over, parkedServed:
		c.a.evict(c, closeRefusals)
	}
}
