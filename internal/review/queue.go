package review

import (
	"context"
	"sync"
)

// Source names the client a review is sent for, as the server that took its
// request sees it: its Address (the unit of per-source fairness, such as
// the client's IP address; empty when unknown) and its Conn (one
// connection of that address, such as "10.0.0.7:51234"). The [Retrier]'s
// queue shares the reviews in flight fairly between addresses first, then
// between the connections of one address.
type Source struct {
	Address string
	Conn    string
}

type sourceKey struct{}

type verifiedKey struct{}

// WithSource returns ctx carrying src. Servers set it where a request's
// connection is known (package serving does, for every connection it
// admits); a context without one is queued as the empty Source.
func WithSource(ctx context.Context, src Source) context.Context {
	return context.WithValue(ctx, sourceKey{}, src)
}

// SourceFrom returns the Source ctx carries.
func SourceFrom(ctx context.Context) (Source, bool) {
	s, ok := ctx.Value(sourceKey{}).(Source)
	return s, ok
}

// WithVerified returns ctx marking the review sent under it as one of a
// token that pre-verification found verified: signed by a key of the
// cluster, spelled canonically, valid now (see authn's JWKSVerifier). Such
// reviews take most turns of the queue (see [Queue]), so that a flood of
// tokens that could not be verified (an unknown key id, another issuer,
// junk) delays a genuine service-account token little; they never take
// all of them.
func WithVerified(ctx context.Context) context.Context {
	return context.WithValue(ctx, verifiedKey{}, true)
}

// Verified reports whether ctx was marked by [WithVerified].
func Verified(ctx context.Context) bool {
	v, _ := ctx.Value(verifiedKey{}).(bool)
	return v
}

// Classes of the queue.
const (
	classVerified = iota
	classOther
	classes
)

// VerifiedShare is how many turns in a row the verified class may take
// while reviews of the other class wait: of every VerifiedShare+1 slots
// handed out while both classes wait, the other class gets at least one.
// 3 gives tokens that could not be verified (a quarter of the reviews in
// flight under a flood of verified ones), and verified tokens three
// quarters under a flood of junk anyone can make.
const VerifiedShare = 3

// Queue hands out a fixed number of slots (the reviews in flight; package
// serving's TLS handshakes computing at once).
// While a slot is free, Acquire takes it at once. When none is, callers
// wait, and each freed slot goes to the next waiter in this order:
//
//  1. between the classes, weighted: verified tokens ([WithVerified])
//     take up to [VerifiedShare] turns in a row while others wait, then
//     the others take one; a class with no waiter gives its turn to the
//     other;
//  2. within a class, the addresses that have reviews waiting take turns
//     (round robin: one review each per round, in the order they started
//     waiting);
//  3. within an address, its connections take turns the same way;
//  4. within a connection, first come, first served.
//
// The bound: a waiter whose address and connection have no other waiter
// in its class, with n other addresses waiting in that class when it
// arrives, is handed a slot within (n+1)*(VerifiedShare+1) slots freed
// after it arrives, however many waiters the other class holds and
// however many more arrive: one client's junk, verified or not, delays
// another client's review by a bounded number of reviews, and never
// starves it. Waiters cost a small record each and no goroutine of their
// own; a waiter whose context ends leaves the queue. A Queue is safe for
// concurrent use; make one with [NewQueue].
type Queue struct {
	mu      sync.Mutex
	free    int
	waiting int
	classes [classes]ring[*addrQueue]
	addrs   [classes]map[string]*addrQueue
	// streak counts the turns the verified class took in a row while the
	// other class had waiters.
	streak int
}

// addrQueue holds the waiters of one address of one class.
type addrQueue struct {
	addr  string
	conns ring[*connQueue]
	byKey map[string]*connQueue
}

// connQueue holds the waiters of one connection, in arrival order.
type connQueue struct {
	key     string
	waiters []*waiter
}

type waiter struct {
	ready   chan struct{} // closed when granted a slot
	granted bool          // under Queue.mu
	class   int
	addr    *addrQueue
	conn    *connQueue
}

// NewQueue returns a Queue of slots slots (at least one).
func NewQueue(slots int) *Queue { return &Queue{free: max(slots, 1)} }

// Acquire takes a slot, waiting its turn (see Queue) within ctx. It
// returns ctx's error if ctx ends first.
func (q *Queue) Acquire(ctx context.Context) error {
	q.mu.Lock()
	if q.free > 0 && q.waiting == 0 {
		q.free--
		q.mu.Unlock()
		return nil
	}
	w := q.enqueue(ctx)
	q.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	if w.granted {
		// Granted at the same moment: pass the slot on.
		q.mu.Unlock()
		q.Release()
		return ctx.Err()
	}
	q.remove(w)
	q.mu.Unlock()
	return ctx.Err()
}

// Waiting returns the number of callers waiting for a slot.
func (q *Queue) Waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiting
}

// Release frees a slot taken by Acquire, handing it to the next waiter.
func (q *Queue) Release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	class, ok := q.nextClass()
	if !ok {
		q.free++
		return
	}
	r := &q.classes[class]
	a, _ := r.front()
	cq, _ := a.conns.front()
	w := cq.waiters[0]
	q.remove(w)
	// Round robin: the address, and its connection, go to the back.
	if len(cq.waiters) > 0 {
		a.conns.rotate()
	}
	if a.conns.len() > 0 {
		r.rotate()
	}
	w.granted = true
	close(w.ready)
}

// nextClass returns the class whose turn it is, and false when no one
// waits. Under q.mu.
func (q *Queue) nextClass() (int, bool) {
	verified, other := q.classes[classVerified].len() > 0, q.classes[classOther].len() > 0
	switch {
	case verified && (!other || q.streak < VerifiedShare):
		if other {
			q.streak++
		} else {
			q.streak = 0
		}
		return classVerified, true
	case other:
		q.streak = 0
		return classOther, true
	}
	return 0, false
}

// enqueue adds a waiter for ctx's class and source. Under q.mu.
func (q *Queue) enqueue(ctx context.Context) *waiter {
	class := classOther
	if Verified(ctx) {
		class = classVerified
	}
	src, _ := SourceFrom(ctx)
	r := &q.classes[class]
	if q.addrs[class] == nil {
		q.addrs[class] = map[string]*addrQueue{}
	}
	a := q.addrs[class][src.Address]
	if a == nil {
		a = &addrQueue{addr: src.Address, byKey: map[string]*connQueue{}}
		q.addrs[class][src.Address] = a
		r.push(a)
	}
	cq := a.byKey[src.Conn]
	if cq == nil {
		cq = &connQueue{key: src.Conn}
		a.byKey[src.Conn] = cq
		a.conns.push(cq)
	}
	w := &waiter{ready: make(chan struct{}), class: class, addr: a, conn: cq}
	cq.waiters = append(cq.waiters, w)
	q.waiting++
	return w
}

// remove takes w out of the queue, dropping its connection and address
// when they have no waiter left. Under q.mu.
func (q *Queue) remove(w *waiter) {
	cq, a := w.conn, w.addr
	for i, x := range cq.waiters {
		if x == w {
			cq.waiters = append(cq.waiters[:i], cq.waiters[i+1:]...)
			break
		}
	}
	q.waiting--
	if len(cq.waiters) == 0 {
		delete(a.byKey, cq.key)
		a.conns.delete(cq)
	}
	if a.conns.len() == 0 {
		delete(q.addrs[w.class], a.addr)
		q.classes[w.class].delete(a)
	}
}

// ring is a round-robin list: front is whose turn it is.
type ring[T comparable] struct{ items []T }

func (r *ring[T]) len() int { return len(r.items) }

func (r *ring[T]) front() (T, bool) {
	if len(r.items) == 0 {
		var zero T
		return zero, false
	}
	return r.items[0], true
}

func (r *ring[T]) push(v T) { r.items = append(r.items, v) }

// rotate moves the front to the back.
func (r *ring[T]) rotate() {
	if len(r.items) > 1 {
		v := r.items[0]
		copy(r.items, r.items[1:])
		r.items[len(r.items)-1] = v
	}
}

func (r *ring[T]) delete(v T) {
	for i, x := range r.items {
		if x == v {
			r.items = append(r.items[:i], r.items[i+1:]...)
			return
		}
	}
}
