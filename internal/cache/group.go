package cache

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultLoadTimeout bounds a shared load when [Group.Timeout] is zero. It is
// the total budget of one review, retries included.
const DefaultLoadTimeout = 10 * time.Second

// Group coalesces concurrent loads of the same [Key]: while a load for a key
// is running, further callers for that key wait for its result instead of
// starting their own. It does the job of golang.org/x/sync/singleflight with
// two differences that an auth layer under attack needs, which is why it is
// written here:
//
//   - the shared load runs detached from the cancellation of the caller that
//     started it (it keeps that caller's context values, such as its logger),
//     under its own [Group.Timeout];
//   - each caller returns as soon as its own context is done (or as soon as
//     the load says, with [Postpone], that its next attempt is due after the
//     caller's deadline), and when every caller has given up the shared
//     load's context is cancelled. singleflight
//     cannot cancel an abandoned call, so under a flood of unique tokens whose
//     callers time out, every abandoned review would keep retrying for its
//     whole budget and hold an in-flight slot.
//
// A panic in the load is recovered and every waiter receives a *[PanicError];
// singleflight's DoChan re-panics on a goroutine, which would crash the
// process.
//
// Each shared load runs on one goroutine, which ends when the load returns
// or its context is cancelled. Group starts no other goroutines. The zero
// value is ready to use; a Group is safe for concurrent use and must not be
// copied after first use.
type Group[V any] struct {
	// Timeout bounds each shared load. Zero means [DefaultLoadTimeout].
	Timeout time.Duration
	// Counters, if not nil, count each caller that joins a load another
	// caller started (see [Counters.AddCoalesced]), as it joins: usually
	// the Counters of the [Cache] the loads fill.
	Counters *Counters

	mu     sync.Mutex
	calls  map[Key]*call[V]
	joined atomic.Uint64
}

type call[V any] struct {
	done    chan struct{}
	value   V
	err     error
	waiters int
	cancel  context.CancelFunc

	// Set by Postpone, under the Group's mutex: the load will not finish
	// before notBefore, and a waiter whose deadline is earlier returns
	// postponeErr. notify is closed (and replaced) at each Postpone. group
	// is cleared when the load ends (see run).
	group       atomic.Pointer[Group[V]]
	notBefore   time.Time
	postponeErr error
	notify      chan struct{}
}

// loadKey is the context key under which a load finds its call, for
// [Postpone].
type loadKey struct{}

// postponer is a *call[V] of any V.
type postponer interface {
	postpone(notBefore time.Time, err error)
}

// Postpone tells the callers waiting for the load running under ctx that
// it will not finish before notBefore (its next attempt is not due until
// then, say), and why: each caller whose own deadline comes before
// notBefore returns err at once instead of waiting in vain, and when no
// caller is left the load's context is cancelled, as usual. Callers with a
// later deadline, or none, keep waiting. A load calls it before it waits;
// ctx must be the context the load received from [Group.Do], or one
// derived from it. Without such a context, or with a nil err, Postpone
// does nothing.
func Postpone(ctx context.Context, notBefore time.Time, err error) {
	if p, ok := ctx.Value(loadKey{}).(postponer); ok && err != nil {
		p.postpone(notBefore, err)
	}
}

func (c *call[V]) postpone(notBefore time.Time, err error) {
	g := c.group.Load()
	if g == nil {
		return // the load has ended
	}
	g.mu.Lock()
	c.notBefore, c.postponeErr = notBefore, err
	close(c.notify)
	c.notify = make(chan struct{})
	g.mu.Unlock()
}

// PanicError is the error waiters receive when a load panics.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the stack of the panicking goroutine
}

// Error implements error. The message includes the panic value but not the
// stack.
func (e *PanicError) Error() string { return fmt.Sprintf("cache: load panicked: %v", e.Value) }

// Do returns the result of fn for key k, sharing one call of fn among all
// concurrent callers with the same key. shared reports whether this caller
// joined a call that another caller had started. If ctx is done before the
// result is ready, Do returns ctx.Err() at once.
//
// fn receives a context that carries ctx's values but not its cancellation
// or deadline, with the Group's timeout; it is cancelled when every waiter has
// returned. No caller bounds or cancels the shared call alone: a caller
// whose deadline passes leaves, and the others keep waiting for the result.
// fn may call [Postpone] to let callers whose deadline comes before its
// next attempt leave at once. Results are not remembered: once the call
// finishes, the next Do for k starts a new one. Store results in a [Cache]
// to reuse them.
//
// A source with a single value (one token, say) uses one fixed key, such
// as the zero Key.
func (g *Group[V]) Do(ctx context.Context, k Key, fn func(context.Context) (V, error)) (v V, shared bool, err error) {
	g.mu.Lock()
	if g.calls == nil {
		g.calls = make(map[Key]*call[V])
	}
	if c, ok := g.calls[k]; ok {
		c.waiters++
		g.mu.Unlock()
		g.joined.Add(1)
		if g.Counters != nil {
			g.Counters.AddCoalesced(1)
		}
		return g.wait(ctx, k, c, true)
	}
	timeout := g.Timeout
	if timeout <= 0 {
		timeout = DefaultLoadTimeout
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	c := &call[V]{done: make(chan struct{}), waiters: 1, cancel: cancel, notify: make(chan struct{})}
	c.group.Store(g)
	lctx = context.WithValue(lctx, loadKey{}, postponer(c))
	g.calls[k] = c
	g.mu.Unlock()

	go g.run(lctx, k, c, fn)
	return g.wait(ctx, k, c, false)
}

func (g *Group[V]) run(ctx context.Context, k Key, c *call[V], fn func(context.Context) (V, error)) {
	g.load(ctx, k, c, fn)
	// Neither g nor fn (nor what fn holds: the cache whose miss started the
	// load) is used past this point, so the garbage collector does not
	// see them from this goroutine: a waiter that drops the cache once it
	// has its answer lets the cache go even before this goroutine returns
	// (TestMetricsLetGoOfDroppedAuthenticators).
	close(c.done)
}

// load runs fn and ends the call, but for waking its waiters.
func (g *Group[V]) load(ctx context.Context, k Key, c *call[V], fn func(context.Context) (V, error)) {
	defer func() {
		if r := recover(); r != nil {
			var zero V
			c.value, c.err = zero, &PanicError{Value: r, Stack: debug.Stack()}
		}
		c.cancel()
		g.mu.Lock()
		if g.calls[k] == c {
			delete(g.calls, k)
		}
		c.group.Store(nil)
		g.mu.Unlock()
	}()
	c.value, c.err = fn(ctx)
}

func (g *Group[V]) wait(ctx context.Context, k Key, c *call[V], shared bool) (V, bool, error) {
	deadline, hasDeadline := ctx.Deadline()
	var err error
	for err == nil {
		// Only a caller with a deadline cares when the next attempt is due.
		var notify chan struct{}
		if hasDeadline {
			g.mu.Lock()
			notify = c.notify
			if c.postponeErr != nil && deadline.Before(c.notBefore) {
				err = c.postponeErr
			}
			g.mu.Unlock()
			if err != nil {
				break
			}
		}
		select {
		case <-c.done:
			return c.value, shared, c.err
		case <-ctx.Done():
			err = ctx.Err()
		case <-notify:
		}
	}
	// The result may have arrived at the same moment; prefer it.
	select {
	case <-c.done:
		return c.value, shared, c.err
	default:
	}
	g.mu.Lock()
	c.waiters--
	if c.waiters == 0 {
		c.cancel()
		if g.calls[k] == c {
			delete(g.calls, k)
		}
	}
	g.mu.Unlock()
	var zero V
	return zero, shared, err
}

// Joined returns how many calls to Do have joined a load that another
// caller had started, since the Group was created.
func (g *Group[V]) Joined() uint64 { return g.joined.Load() }

// InFlight returns the number of shared loads running now.
func (g *Group[V]) InFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.calls)
}
