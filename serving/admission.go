package serving

// This file is admission's bookkeeping: the connections admitted, by
// stage, and waiting, and the hooks through which servers report what a
// connection does. What is closed and why is decided in policy.go.

import (
	"context"
	"crypto/tls"
	"io"
	"math"
	"net"
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
)

// states of reviewauth_connections.
const (
	stateAdmitted = "admitted"
	stateWaiting  = "waiting"
	stateParked   = "parked"
)

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
	// park parks connections instead of closing them: past the
	// rapid-reset bound (see admConn.park), and evicted or timed out
	// before a request while connections wait (see holdLocked).
	park bool
	// files and memory, if files is set, replace the process's open
	// files and memory limit (see roomToWaitLocked).
	files  *fileGauge
	memory uint64
}

// admission is the state behind LimitListener, HTTPServer and ServeGRPC.
type admission struct {
	max            int
	clock          clock.Clock
	logger         klog.Logger
	log            *loglimit.Limiter
	grace          time.Duration
	progressWindow time.Duration
	evictEvery     time.Duration
	relaxed        [numStages]time.Duration
	tight          [numStages]time.Duration
	source         func(net.Addr) string
	hsInterval     time.Duration
	hsBurst        int
	hsSlots        *review.Queue // handshakes computing; nil: no bound
	hsConcurrency  int
	tls            bool
	join           bool
	resetBurst     int
	resetInterval  time.Duration
	park           bool
	rec            *observe.Recorder
	// parkedRefused counts the admitted connections parked for their
	// refusals (see parkRefused), parkedResets those parked past the
	// rapid-reset bound (see park) within the budget. Under mu.
	parkedRefused, parkedResets int
	// parkedOut are the connections parked past the rapid-reset bound
	// outside the budget (see outsideLocked), oldest first: at most max;
	// nparkedOut counts them, and lastParkedOut is when the sweep last
	// closed one (see parkedMax). Under mu.
	parkedOut     connList
	nparkedOut    int
	lastParkedOut time.Time
	// maxOutside bounds nparkedOut: the budget's worth, fewer where a
	// quarter of the memory limit holds fewer at ParkedMemory each.
	maxOutside int
	// stopping: shutdown has started; nothing more is parked (see
	// closeParked). Under mu.
	stopping bool

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
	held     [numStages]int               // parked instead (see holdLocked), since the last log line
	done     chan struct{}                // the listener closed
	doneOnce sync.Once
	// newcomers and reconnects are the waiting connections that are not,
	// and that are, presumed reconnections, in the order they arrived,
	// for demandLocked; those that no longer wait or arrived waitedMax
	// ago or more leave from the front as they reach it (see
	// arrivalQueue), so that asking whether one waits costs the same
	// however many wait, from however many sources.
	newcomers, reconnects arrivalQueue
	// recent are the waiting connections of the last turnWaitedMax, in
	// the order they arrived, for popLocked's turns that take the one
	// that waited longest.
	recent arrivalQueue
	// pending are the connections accepted and not admitted yet, by
	// source, oldest first: at most maxPending (the budget, or
	// MaxWaiting), and past that, while files measures files to spare
	// (see roomToWaitLocked), at most maxWaiting.
	pending    map[string][]*pendingConn
	npending   int
	maxPending int
	maxWaiting int
	// files counts the process's open files; nil: not counted, and no
	// more than maxPending wait. filesFree is the files free when last
	// counted, at filesAt, and filesSince the connections accepted since.
	files      *fileGauge
	filesFree  int
	filesAt    time.Time
	filesSince int
	acceptErr  error     // the listener's, once it failed
	lastEvict  time.Time // when a connection was last closed to make room
	// lastPassedOver is when one was last closed for a presumed
	// reconnection (see demandLocked).
	lastPassedOver time.Time
	// rescues are the closes for presumed reconnections allowed at once,
	// maxRescues at first, then one earned by each connection's first
	// request served (see maxRescues).
	rescues int
	// admissions counts the connections admitted; awaited, by source,
	// the closes not yet followed by an arrival from the same source
	// (see awaitLocked), swept of stale sources at awaitedSwept.
	admissions   uint64
	awaited      map[string]*awaitedCloses
	awaitedSwept time.Time
	wake         chan struct{} // for next: a connection closed, arrived or a slot freed
	space        chan struct{} // for acceptLoop: a pending connection left
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
	if o.ProgressWindow == 0 {
		o.ProgressWindow = DefaultProgressWindow
	}
	if o.EvictionInterval == 0 {
		o.EvictionInterval = DefaultEvictionInterval
	}
	if o.PressureTimeout == 0 {
		o.PressureTimeout = -1
	}
	if o.PressureIdleTimeout == 0 {
		o.PressureIdleTimeout = -1
	}
	if o.HandshakeBurst <= 0 {
		o.HandshakeBurst = DefaultHandshakeBurst
	}
	if o.Source == nil {
		o.Source = SourceAddress
	}
	a := &admission{
		max: max, clock: clk, logger: c.Logger, log: loglimit.New(1, limitLogInterval, clk),
		grace: o.EvictionGrace, progressWindow: o.ProgressWindow, evictEvery: o.EvictionInterval, source: o.Source, tls: c.tls, join: c.join,
		resetBurst: c.resetBurst, resetInterval: c.resetInterval, park: c.park, rec: observe.Of(c.Metrics),
		sources: map[string]*sourceState{}, done: make(chan struct{}),
		pending: map[string][]*pendingConn{}, maxPending: max, maxWaiting: max, awaited: map[string]*awaitedCloses{},
		wake: make(chan struct{}, 1), space: make(chan struct{}, 1),
		rescues: maxRescues, // full, as a token bucket starts (see maxRescues)
	}
	files, memory := c.files, c.memory
	if files == nil {
		files, memory = processFiles(), memoryLimit(os.DirFS("/"))
	}
	a.maxOutside = maxOutsideFor(max, memory)
	switch {
	case o.MaxWaiting > 0:
		a.maxPending, a.maxWaiting = o.MaxWaiting, o.MaxWaiting
	case o.MaxWaiting == 0:
		if files != nil {
			a.files, a.maxWaiting = files, math.MaxInt32
			if memory > 0 {
				a.maxWaiting = int(min(memory/memoryShare/WaitingMemory, math.MaxInt32))
			}
			if a.maxWaiting < a.max {
				a.maxWaiting = a.max
			}
		}
	}
	// Every state is exported from the start, at 0, so that a scrape
	// before the first connection shows the server's admission too.
	a.rec.Connections(stateAdmitted, 0)
	a.rec.Connections(stateWaiting, 0)
	a.rec.Connections(stateParked, 0)
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
	a.parkedOut.init()
	return a
}

// removePendingLocked takes the idx-th waiting connection of source key
// out of the waiting ones and returns it. Under a.mu.
func (a *admission) removePendingLocked(key string, idx int) *pendingConn {
	q := a.pending[key]
	pc := q[idx]
	pc.gone = true
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

// arrivalQueue holds waiting connections in the order they arrived. Each
// is pushed once, and dropped once it is at the front and no longer waits
// or is too old: a connection costs O(1) over its life, however often the
// front is asked for. Once the front has arrived within the bound asked
// for (see front), every connection behind it has too: a queue pruned at
// waitedMax holds at most a second's arrivals.
type arrivalQueue struct{ q []*pendingConn }

func (aq *arrivalQueue) push(pc *pendingConn) { aq.q = append(aq.q, pc) }

// front returns the connection that arrived first among those still
// waiting that arrived after from, or nil, dropping the ones before it.
// Under a.mu.
func (aq *arrivalQueue) front(from time.Time) *pendingConn {
	for len(aq.q) > 0 {
		if pc := aq.q[0]; !pc.gone && pc.at.After(from) {
			return pc
		}
		aq.q[0] = nil
		aq.q = aq.q[1:]
	}
	aq.q = nil
	return nil
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
	if c.parkedForRefusals && !c.outside {
		a.parkedRefused--
	}
	if c.outside {
		a.parkedOut.remove(c)
		a.nparkedOut--
		a.rec.Connections(stateParked, -1)
	} else {
		if c.parkedForResets {
			a.parkedResets--
		}
		a.lists[c.stage].remove(c)
		a.open--
		a.rec.Connections(stateAdmitted, -1)
	}
	if c.src.conns--; c.src.conns == 0 {
		delete(a.sources, c.src.key)
	}
	if reason >= 0 {
		a.closed[reason][c.stage]++
		a.rec.ConnectionClosed(closeReasonNames[reason], stageNames[c.stage])
	}
	if reason >= 0 || !c.served {
		a.awaitLocked(c.src.key, a.clock.Now(), 1)
	}
	a.signal(a.wake)
}

// reconnectWindow is how soon after a source's last close an arrival from
// it is presumed to be a reconnection: a client that reconnects as soon as
// it is closed does so within a round trip or two, or, loaded, seconds
// later, while its source keeps being closed (see LimitListener).
const reconnectWindow = time.Second

// awaitedCloses are a source's closes not yet followed by an arrival from
// it, within reconnectWindow of the last.
type awaitedCloses struct {
	n    int
	last time.Time // the last close
}

// awaitLocked records n closes of source key's connections that its
// client may answer by reconnecting at once: by the server (a timeout, an
// eviction, a refusal), or of a connection that served nothing. A client
// closing a connection it was served on (a scraper that opens one per
// scrape) is not one. A source awaits at most as many reconnections as
// connections may be admitted and wait. Under a.mu.
func (a *admission) awaitLocked(key string, now time.Time, n int) {
	a.forgetAwaitedLocked(now)
	w := a.awaited[key]
	if w == nil {
		w = &awaitedCloses{}
		a.awaited[key] = w
	}
	if now.Sub(w.last) > reconnectWindow {
		w.n = 0
	}
	w.n = min(w.n+n, a.max+max(a.maxPending, a.maxWaiting))
	w.last = now
}

// forgetAwaitedLocked drops, at most once per reconnectWindow, the
// sources whose last close is older than that: sources that never came
// back cost nothing. Under a.mu.
func (a *admission) forgetAwaitedLocked(now time.Time) {
	if now.Sub(a.awaitedSwept) <= reconnectWindow {
		return
	}
	a.awaitedSwept = now
	for key, w := range a.awaited {
		if now.Sub(w.last) > reconnectWindow {
			delete(a.awaited, key)
		}
	}
}

// reconnectionLocked reports whether a connection arriving now from
// source key is presumed to be the reconnection of one of its closed
// ones (see awaitLocked), and counts it as that close's. Under a.mu.
func (a *admission) reconnectionLocked(key string, now time.Time) bool {
	w := a.awaited[key]
	if w == nil {
		return false
	}
	if now.Sub(w.last) > reconnectWindow {
		delete(a.awaited, key)
		return false
	}
	if w.n--; w.n == 0 {
		delete(a.awaited, key)
	}
	return true
}

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
	for _, k := range a.held {
		n += k
	}
	if n == 0 {
		return
	}
	if ok, _ := a.log.Allow(); !ok {
		return
	}
	kv := []any{"limit", a.max, "open", a.open, "parked", a.nparkedOut}
	for r, name := range [closeReasons]string{"evicted", "timedOut", "rapidReset", "refused"} {
		for s, k := range a.closed[r] {
			if k > 0 {
				kv = append(kv, name+"."+stageNames[s], k)
			}
		}
	}
	for s, k := range a.held {
		if k > 0 {
			kv = append(kv, "parked."+stageNames[s], k)
		}
	}
	a.closed, a.held = [closeReasons][numStages]int{}, [numStages]int{}
	a.logger.Info("serving: connection budget full; closed or parked the connections that had done the least", kv...)
}

// set updates c under a.mu with f, and moves it to the stage its state
// says, entering it now if it changed (or if progress is true: a
// milestone within its stage).
func (a *admission) set(c *admConn, progress bool, f func(c *admConn)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(c)
	if c.gone || c.outside {
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

// closeParked closes the parked connections, as shutdown starts, and
// those that would be parked from then on (see parkFor): their clients
// were never served and nothing more is read from them, so that none
// would close on the server's GOAWAY, and a graceful shutdown would wait
// its whole timeout for them.
func (a *admission) closeParked() {
	a.mu.Lock()
	a.stopping = true
	var cs []net.Conn
	for c := a.parkedOut.oldest(); c != nil; {
		next := a.parkedOut.next(c)
		a.unlink(c, -1)
		cs = append(cs, c)
		c = next
	}
	for c := a.lists[stageRefused].oldest(); c != nil; {
		next := a.lists[stageRefused].next(c)
		if c.parkedForResets || c.parkedForRefusals {
			a.unlink(c, -1)
			cs = append(cs, c)
		}
		c = next
	}
	a.mu.Unlock()
	closeAll(cs)
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
	// answeredOnce: a response below 400 was begun on c (its header
	// written), HTTP only; from then on its client's HTTP/2 resets are
	// not counted (see h2Conn), so that a client that stops a watch
	// once answered, before its handler has ended, is not taken for an
	// attacker.
	answeredOnce atomic.Bool
	// calls are the gRPC calls in progress counted in unserved, whose
	// contexts are cancelled when c is parked (see cancelCalls).
	callsMu   sync.Mutex
	calls     map[*rpcState]struct{}
	closeOnce sync.Once
	deadline  atomic.Int64 // read deadline, Unix nanoseconds; 0: none
	// active counts the requests in progress (working, readable without
	// a.mu); moved is when c last made progress (see progressing), as
	// Unix nanoseconds of the admission's clock; 0: none.
	active atomic.Int32
	moved  atomic.Int64

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
	resets     *loglimit.Limiter // streams the client cancelled
	parked     atomic.Bool       // past the rapid-reset bound: no more reads (see park)
	// parkedForRefusals: parked by parkRefused; parkedForResets: by
	// park; outside: parked outside the budget (see outsideLocked).
	// Under a.mu.
	parkedForRefusals, parkedForResets, outside bool
	// outsideReason is why c was parked outside the budget, the reason
	// its close is counted under (see sweep). Under a.mu.
	outsideReason int
}

// RemoteAddr returns a copy of the connection's remote address made at
// accept, whose pointer identifies the connection (see connByAddr).
func (c *admConn) RemoteAddr() net.Addr { return c.raddr }

func (c *admConn) Read(p []byte) (int, error) {
	if c.parked.Load() {
		return 0, c.parkedRead()
	}
	n, err := c.Conn.Read(p)
	if n > 0 && c.parked.Load() {
		// Parked while this read waited (see holdLocked): what came is
		// not handed on, so that a parked connection never starts a
		// request.
		return 0, c.parkedRead()
	}
	if n > 0 {
		if !c.readOnce.Load() && c.readOnce.CompareAndSwap(false, true) {
			c.a.set(c, false, func(c *admConn) { c.sawByte = true })
		}
		c.moving()
	}
	return n, err
}

// parkedCheckEvery is how often a parked connection's socket is checked
// for its client having closed it (see parkedRead).
const parkedCheckEvery = time.Second

// parkedRead blocks the read of a parked connection (see park) until c
// is closed, or its client has closed its end (CLOSE_WAIT, or reset),
// checked every parkedCheckEvery: then io.EOF, so that the server closes
// it and its file is not held for a client that is gone.
func (c *admConn) parkedRead() error {
	for {
		t := c.a.clock.NewTimer(parkedCheckEvery)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return net.ErrClosed
		case <-t.C():
		}
		if peerClosed(c.Conn) {
			return io.EOF
		}
	}
}

// moving records bytes moved on c: progress while a request is in
// progress on it.
func (c *admConn) moving() {
	if c.active.Load() > 0 {
		c.moved.Store(c.a.clock.Now().UnixNano())
	}
}

func (c *admConn) Write(p []byte) (int, error) {
	if c.hsSlot.Load() {
		// The server's first flight: its share of the handshake's work
		// (key exchange, signature) is done.
		c.releaseSlot()
	}
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.moving()
	}
	return n, err
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
	if c.parked.Load() {
		// Parked: no read deadline closes it (see parkedRead).
		return c.Conn.SetWriteDeadline(t)
	}
	return c.Conn.SetDeadline(t)
}

func (c *admConn) SetReadDeadline(t time.Time) error {
	c.storeDeadline(t)
	if c.parked.Load() {
		return nil
	}
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
	c.active.Add(1)
	c.a.set(c, false, func(c *admConn) { c.sawByte, c.handshaken = true, true; c.working++ })
}

// hijacked records that c left its HTTP server (a protocol upgrade): it is
// busy until it closes.
func (c *admConn) hijacked() {
	c.active.Add(1)
	c.moved.Store(c.a.clock.Now().UnixNano())
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
