package cache

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Holder keeps one value that has to be fetched, such as a token or a key
// set, and fetches it again when it is due. It is the single-value
// counterpart of a [Cache] with a [Group]: a Cache maps many keys to values
// that simply expire; a Holder's one value also has a refresh point before
// its expiry, after which it is still served while a new one is fetched,
// and bounds on how often fetches start. Concurrent fetches are shared
// through a [Group] (detached from the callers, under Timeout, cancelled
// when every caller has left, panics handed to every waiter).
//
// A Holder is safe for concurrent use and must not be copied after first
// use. The zero value is ready to use: no bound on fetches, the real clock,
// [DefaultLoadTimeout]. It starts no goroutine but the one a Group runs
// each fetch on.
type Holder[V any] struct {
	// Timeout bounds each fetch. Zero means [DefaultLoadTimeout].
	Timeout time.Duration
	// MinInterval is the least time between the starts of two fetches,
	// whatever their outcome, with or without a value held: a bound on
	// what a flood of callers can make the Holder fetch. Zero means none.
	MinInterval time.Duration
	// RetryInterval is the least time between a failed fetch and the
	// next one while a value that has not expired is held (served
	// meanwhile). Without such a value, callers may fetch at once. A fetch
	// abandoned by every caller is not a failure. Zero means none.
	RetryInterval time.Duration
	// Clock tells the time. Nil means the real clock.
	Clock clock.PassiveClock

	group Group[struct{}]
	init  sync.Once // sets group.Timeout

	mu        sync.Mutex
	value     V
	have      bool
	refreshAt time.Time // when the value is due for a refresh
	expires   time.Time // when it may no longer be served; zero: never
	triedAt   time.Time // the start of the last fetch
	retryAt   time.Time // after a failure: no fetch before, while valid
	loading   bool
}

// Fetched is what a fetch returns: the value, when it is due for a refresh
// (served meanwhile, and while the refresh runs or fails), and when it
// expires and may no longer be served (zero: never).
type Fetched[V any] struct {
	Value     V
	RefreshAt time.Time
	Expires   time.Time
}

func (h *Holder[V]) now() time.Time {
	if h.Clock == nil {
		return time.Now()
	}
	return h.Clock.Now()
}

// validLocked reports whether the held value may be served at now.
func (h *Holder[V]) validLocked(now time.Time) bool {
	return h.have && (h.expires.IsZero() || now.Before(h.expires))
}

// mayFetchLocked reports whether a fetch may start at now.
func (h *Holder[V]) mayFetchLocked(now time.Time, valid bool) bool {
	if !h.triedAt.IsZero() && now.Sub(h.triedAt) < h.MinInterval {
		return false
	}
	return !valid || !now.Before(h.retryAt)
}

// Get returns the held value, fetching it with fetch when there is none
// that may be served, when it is due for a refresh, or when force is set
// (the caller needs something the held value lacks), within the bounds on
// fetches:
//
//   - a value that is not due, without force, is returned at once;
//   - while a fetch runs, a caller with a valid value and no force is
//     served that value; any other caller waits for the fetch;
//   - when no fetch may start (MinInterval, RetryInterval), the held
//     value is returned as it is, or none;
//   - otherwise the caller starts a fetch, or joins one that started
//     meanwhile, and waits for it within its own ctx.
//
// ok reports whether the returned value may be served. err is the error of
// the fetch the caller waited for, or ctx's error if it stopped waiting: a
// failed refresh returns the held value with ok and the error, so that the
// caller may log it. ok false with a nil err means there is no value and no
// fetch may start now.
func (h *Holder[V]) Get(ctx context.Context, force bool, fetch func(context.Context) (Fetched[V], error)) (v V, ok bool, err error) {
	h.mu.Lock()
	now := h.now()
	valid := h.validLocked(now)
	wait := force || !valid || !now.Before(h.refreshAt)
	if wait && h.loading {
		wait = force || !valid
	} else if wait {
		wait = h.mayFetchLocked(now, valid)
	}
	v = h.value
	h.mu.Unlock()
	if !wait {
		if valid {
			return v, true, nil
		}
		var zero V
		return zero, false, nil
	}
	h.init.Do(func() { h.group.Timeout = h.Timeout })
	_, _, err = h.group.Do(ctx, Key{}, func(lctx context.Context) (struct{}, error) {
		return struct{}{}, h.fetch(lctx, force, fetch)
	})
	h.mu.Lock()
	v, valid = h.value, h.validLocked(h.now())
	h.mu.Unlock()
	if !valid {
		var zero V
		return zero, false, err
	}
	return v, true, err
}

// fetch runs one fetch under the Group, unless a fetch that ended between
// the caller's look and now made it unnecessary, or it may not start yet.
func (h *Holder[V]) fetch(ctx context.Context, force bool, fetch func(context.Context) (Fetched[V], error)) error {
	h.mu.Lock()
	now := h.now()
	valid := h.validLocked(now)
	if (valid && !force && now.Before(h.refreshAt)) || !h.mayFetchLocked(now, valid) {
		h.mu.Unlock()
		return nil
	}
	h.triedAt, h.loading = now, true
	h.mu.Unlock()

	var f Fetched[V]
	err := errFetchPanicked // until fetch returns
	defer func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.loading = false
		switch {
		case err == nil:
			h.value, h.have, h.refreshAt, h.expires, h.retryAt = f.Value, true, f.RefreshAt, f.Expires, time.Time{}
		case errors.Is(ctx.Err(), context.Canceled):
			// Every caller left: nothing was learnt about the source,
			// so the next caller may try at once.
		default:
			h.retryAt = h.now().Add(h.RetryInterval)
		}
	}()
	f, err = fetch(ctx)
	return err
}

// errFetchPanicked marks a fetch that panicked, as a failure; the Group
// hands its waiters a *PanicError.
var errFetchPanicked = errors.New("cache: fetch panicked")
