package serving

import (
	"context"
	"errors"
	"net"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/reviewauth/reviewauth/internal/loglimit"
)

// grpcStats joins grpc's view of connections and calls to the admission
// of ServeGRPC: grpc tells a stats handler each connection's address when
// its HTTP/2 preface is done (TagConn), and each call's events, in
// contexts derived from the connection's.
type grpcStats struct{}

var _ stats.Handler = grpcStats{}

func (grpcStats) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	v, ok := connByAddr.Load(info.RemoteAddr)
	if !ok {
		return ctx
	}
	return withConn(ctx, v.(*admConn))
}

func (grpcStats) HandleConn(ctx context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnBegin); ok {
		if c := connFrom(ctx); c != nil {
			c.progress()
		}
	}
}

// rpcState is what grpcStats follows of one call; for HTTP/2, the
// guard tracks a request on a connection not yet answered with one, for
// its cancel only.
type rpcState struct {
	c       *admConn
	message atomic.Bool // a message arrived: the call is in progress
	trailer atomic.Bool // the server wrote the call's status
	// unserved: counted in c.unserved by the tap (the connection had not
	// completed a call when the stream opened); cancel then cancels the
	// call's context (see cancelCalls).
	unserved bool
	cancel   context.CancelFunc
}

// trackCall records st, a call in progress on c counted in c.unserved,
// and reports whether c is not parked (a call on a parked connection,
// read before it was parked, is not run).
func (c *admConn) trackCall(st *rpcState) bool {
	c.callsMu.Lock()
	defer c.callsMu.Unlock()
	if c.parked.Load() {
		return false
	}
	if c.calls == nil {
		c.calls = map[*rpcState]struct{}{}
	}
	c.calls[st] = struct{}{}
	return true
}

// endCall forgets st, a call tracked by trackCall, and releases its
// context.
func (c *admConn) endCall(st *rpcState) {
	c.callsMu.Lock()
	delete(c.calls, st)
	c.callsMu.Unlock()
	st.cancel()
}

// cancelCalls cancels the calls in progress on c, just parked: a client
// that opened its streams without sending a request (at most
// MaxUnservedCalls of them) would otherwise hold a goroutine waiting for
// each as long as the connection is parked. Left running, 2,313 such
// clients held the sidecar at 783-817 MiB at the default budget (Intel
// Xeon, 2 cores); closed at the bound, 143-148 MiB.
func (c *admConn) cancelCalls() {
	c.callsMu.Lock()
	calls := c.calls
	c.calls = nil
	c.callsMu.Unlock()
	for st := range calls {
		st.cancel()
	}
}

type rpcKey struct{}

func (grpcStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	if _, ok := ctx.Value(rpcKey{}).(*rpcState); ok {
		return ctx // made by the tap
	}
	if c := connFrom(ctx); c != nil {
		return context.WithValue(ctx, rpcKey{}, &rpcState{c: c})
	}
	return ctx
}

func (grpcStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	st, _ := ctx.Value(rpcKey{}).(*rpcState)
	if st == nil {
		return
	}
	switch s := s.(type) {
	case *stats.InPayload:
		if !st.message.Load() && st.message.CompareAndSwap(false, true) {
			st.c.workStart()
		}
	case *stats.OutTrailer:
		st.trailer.Store(true)
	case *stats.End:
		if st.unserved {
			st.c.unserved.Add(-1)
			st.c.endCall(st)
		}
		if st.message.Load() {
			st.c.workEnd(grpcOutcome(s.Error))
		}
		// grpc writes no status for a stream the client reset (nor for
		// one whose deadline passed, which is not the client's doing).
		if !st.trailer.Load() && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			st.c.reset()
		}
	}
}

// grpcOutcome is the outcome of a call that ended with err, as
// httpOutcome's of a status: served only if OK (HTTP: below 400).
// Anything else was not served: in particular Unavailable, which is also
// what a caller whose token could not be checked gets (the reviews
// overloaded, the API server down). Counted as served, it marked the
// connections of junk-token clients turned away that way as served ones:
// their clients' closes awaited no reconnection, their reconnections came
// as newcomers at about 100 a second, and newest first they overtook a
// client's (2,313 from the sidecar's client's address: 92-100% of new
// calls within 1 s over 12 runs, Intel Xeon, 2 cores).
func grpcOutcome(err error) outcome {
	switch status.Code(err) {
	case codes.OK:
		return outcomeServed
	case codes.Unauthenticated, codes.PermissionDenied:
		return outcomeRefused
	}
	return outcomeOther
}

// countsResets reports whether a bounds the streams its connections'
// clients reset.
func (a *admission) countsResets() bool { return a.resetInterval > 0 }

// counting reports whether c's client's resets are counted (see
// h2Conn): until c was served or answered, and while it is open.
func (c *admConn) counting() bool {
	return !c.servedOnce.Load() && !c.answeredOnce.Load() && !c.closing()
}

// reset counts a stream c's client cancelled, and parks or closes c past
// the admission's rapid-reset bound.
func (c *admConn) reset() {
	a := c.a
	if a.resetInterval <= 0 {
		return
	}
	a.mu.Lock()
	if c.resets == nil {
		c.resets = loglimit.New(a.resetBurst, a.resetInterval, a.clock)
	}
	l := c.resets
	a.mu.Unlock()
	if ok, _ := l.Allow(); !ok {
		if a.park && peerStateKnown && !c.servedOnce.Load() {
			c.park()
			return
		}
		a.evict(c, closeRapidReset)
	}
}

// park stops reading c, a connection past the rapid-reset bound that has
// never been served: what its client sends next waits in the kernel's
// buffers, then in the client's, unread, and c is closed when admission
// makes room (it counts as refused: among the first to go), when files
// run short, or when the server shuts down. Closed at once, an attacker's
// connection is back within a round trip and costs a TLS handshake and
// the hundreds of streams net/http reads before Go's own bound closes it
// (four times MaxConcurrentStreams queued): parked, it costs a file, held
// until its client closes its end (see parkedRead), which only Linux
// tells (peerStateKnown): elsewhere the connection is closed. A
// connection that was served (a client cancelling its watches at once,
// say) is closed instead, so that its client reconnects rather than
// waits. Its blocked read returns once c is closed.
func (c *admConn) park() { c.parkFor(closeRapidReset) }

// parkRefused parks c (see park), a connection never served that had
// maxRefusals requests refused: junk tokens. Closed, its client
// reconnects at once and waits among the newcomers, and every connection
// waits as long as there are waiting per connection admitted a second:
// under 112 junk-token gRPC clients from one address at a budget of 64
// (the sidecar's TestFloods, race detector, Intel Xeon, 2 cores), 100
// were closed and admitted a second with 49 waiting, and the backup
// client's new connections, taken for reconnections, were admitted
// newest first or left behind until the flood ended: 74-97% answered
// within 1 s, p50 50-400 ms. Parked within the budget (then only while
// connections waited), a flood's connections held their room and were
// closed one at a time for newcomers: 97-100% there, but on an AMD EPYC
// 63-87% over 18 attempts, the budget held by parked junk and the
// client's connections waiting behind it, taken for reconnections.
// Parked outside the budget first (see parkFor), they are out of the
// way: 97-100% in 6 runs there. Parked whether or not connections
// wait: otherwise, once the budget's worth is parked outside, the rest
// (991 of 2,313 at the default budget) are closed at their 8th refusal
// with nothing waiting, reconnect at once, and their handshakes, all
// from the client's address, queue before the client's: 78% of its new
// calls within 1 s, 100% parked (docs/benchmarks.md). A client whose
// token is refused has had maxRefusals answers; its connection is closed
// once nothing has waited for parkedMax (see sweep).
func (c *admConn) parkRefused() { c.parkFor(closeRefusals) }

// parkFor parks c, for its refusals (reason closeRefusals) or past the
// rapid-reset bound (closeRapidReset): it counts as refused (among the
// first to go), is parked outside the budget while there is room there
// (see outsideLocked), else counted among the connections parked within
// it for that reason (see sweep), and next is woken to admit or
// recompute. Once shutdown has started (see closeParked), c is closed
// instead.
func (c *admConn) parkFor(reason int) {
	if c.parked.Swap(true) {
		return
	}
	refusals := reason == closeRefusals
	stopping := false
	c.a.set(c, false, func(c *admConn) {
		if c.gone {
			return // closed meanwhile: nothing to park
		}
		if stopping = c.a.stopping; stopping {
			return
		}
		c.refused = true
		c.parkedForRefusals = refusals
		switch {
		case c.a.outsideLocked(c, reason):
		case refusals:
			c.a.parkedRefused++
		default:
			c.parkedForResets = true
			c.a.parkedResets++
		}
	})
	if !refusals {
		c.cancelCalls()
	}
	if stopping {
		// Shutting down: closed, as closeParked closed those parked
		// before.
		c.a.evict(c, reason)
		return
	}
	c.a.signal(c.a.wake)
}

// errConnClosed refuses streams on a connection admission closed.
var errConnClosed = status.Error(codes.Unavailable, "serving: the connection is closing")

// errUnserved refuses a stream past MaxUnservedCalls.
var errUnserved = status.Error(codes.ResourceExhausted, "serving: too many calls in progress on a connection that has not completed one")

// grpcTap is the server's tap handle: a new stream on a connection that
// admission closed (past the rapid-reset bound, say), or past
// maxUnserved calls in progress on a connection that has not completed
// one, is refused before a handler is started for it; then next, if any,
// is called.
func grpcTap(next tap.ServerInHandle, maxUnserved int32) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if c := connFrom(ctx); c != nil {
			if c.closing() {
				return ctx, errConnClosed
			}
			st := &rpcState{c: c}
			if maxUnserved > 0 && !c.servedOnce.Load() {
				if c.unserved.Add(1) > maxUnserved {
					c.unserved.Add(-1)
					// No handler runs, so no End comes: count it
					// against the rapid-reset bound here (a client
					// opening streams past this is resetting them, or
					// holding them empty).
					c.reset()
					return ctx, errUnserved
				}
				st.unserved = true
				ctx, st.cancel = context.WithCancel(ctx)
				if !c.trackCall(st) {
					st.cancel()
					c.unserved.Add(-1)
					return ctx, errConnClosed
				}
			}
			ctx = context.WithValue(ctx, rpcKey{}, st)
		}
		if next != nil {
			return next(ctx, info)
		}
		return ctx, nil
	}
}

// closing reports whether c was closed or is being closed.
func (c *admConn) closing() bool { return c.ctx.Err() != nil }

// handshakeCreds tells admission when a connection's handshake is done.
type handshakeCreds struct {
	credentials.TransportCredentials
}

func (h handshakeCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := h.TransportCredentials.ServerHandshake(raw)
	if err == nil {
		if ac, ok := raw.(*admConn); ok {
			ac.handshakeDone()
		}
	}
	return conn, info, err
}

func (h handshakeCreds) Clone() credentials.TransportCredentials {
	return handshakeCreds{h.TransportCredentials.Clone()}
}
