package cache_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
	"weak"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/internal/cache"
)

// TestPeekHasNoSideEffects: Peek counts no hit or miss, leaves the LRU
// order alone and does not drop an expired entry.
func TestPeekHasNoSideEffects(t *testing.T) {
	t.Parallel()
	start := time.Unix(0, 0)
	clk := clocktesting.NewFakePassiveClock(start)
	c := cache.New[int](cache.Options{Clock: clk, MaxEntries: 2})
	c.Set(key(1), 1, time.Second)
	c.Set(key(2), 2, time.Hour)
	if v, ok := c.Peek(key(1)); !ok || v != 1 {
		t.Fatalf("Peek(live) = %d, %v; want 1, true", v, ok)
	}
	if _, ok := c.Peek(key(3)); ok {
		t.Fatal("Peek(absent) = true")
	}
	clk.SetTime(start.Add(time.Second - time.Nanosecond))
	if _, ok := c.Peek(key(1)); !ok {
		t.Fatal("Peek 1ns before the TTL = false; want true")
	}
	clk.SetTime(start.Add(time.Second))
	if _, ok := c.Peek(key(1)); ok {
		t.Fatal("Peek at the TTL = true; want false")
	}
	if st := c.Stats(); st.Hits != 0 || st.Misses != 0 || st.Expired != 0 || st.Entries != 2 {
		t.Fatalf("Stats() after Peeks = %+v; want no hits, misses or expiries, 2 entries", st)
	}
	// Peek did not refresh key(1): it is still the least recently used.
	clk.SetTime(start)
	c.Peek(key(1))
	c.Set(key(3), 3, time.Hour)
	if _, ok := c.Peek(key(1)); ok {
		t.Error("key(1) survived an eviction after Peek; Peek must not refresh LRU order")
	}
}

// TestCountersOutliveTheirCache: a cache's Counters do not keep it alive;
// once it is collected they report its final counts, no entries, and that
// it is gone.
func TestCountersOutliveTheirCache(t *testing.T) {
	t.Parallel()
	c := cache.New[[]byte](cache.Options{MaxEntries: 2048}) // sharded
	for i := range 3 {
		c.Set(key(i), make([]byte, 1<<10), time.Hour)
	}
	c.Get(key(0))
	c.Get(key(9))
	counters := c.Counters()
	if st := counters.Stats(); st.Hits != 1 || st.Misses != 1 || st.Entries != 3 || !counters.Live() {
		t.Fatalf("Stats() = %+v, Live() = %v; want 1 hit, 1 miss, 3 entries, live", st, counters.Live())
	}
	wp := weak.Make(c)
	c = nil
	for i := 0; wp.Value() != nil; i++ {
		if i == 100 {
			t.Fatal("the cache is still reachable after 100 GCs: its Counters keep it alive")
		}
		runtime.GC()
	}
	if counters.Live() {
		t.Error("Live() = true after the cache was collected")
	}
	if st := counters.Stats(); st.Hits != 1 || st.Misses != 1 || st.Entries != 0 {
		t.Errorf("Stats() after collection = %+v; want the final counts and no entries", st)
	}
}

// TestGroupCountsJoinsInCounters: a Group with Counters counts each caller
// that joins, as it joins.
func TestGroupCountsJoinsInCounters(t *testing.T) {
	t.Parallel()
	c := cache.New[int](cache.Options{})
	g := cache.Group[int]{Counters: c.Counters()}
	release := make(chan struct{})
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Do(context.Background(), key(1), func(context.Context) (int, error) { close(started); <-release; return 1, nil })
	}()
	<-started
	joined := make(chan struct{})
	go func() {
		defer close(joined)
		g.Do(context.Background(), key(1), func(context.Context) (int, error) { return 2, nil })
	}()
	for c.Counters().Stats().Coalesced != 1 {
		runtime.Gosched()
	}
	close(release)
	<-done
	<-joined
	if n := g.Joined(); n != 1 {
		t.Errorf("Joined() = %d; want 1", n)
	}
}

// TestGroupPostpone: when the load says its next attempt is not due before
// some time, the callers whose deadline comes first leave at once with its
// error; the others keep waiting and get the result; and when no caller is
// left the load is cancelled.
func TestGroupPostpone(t *testing.T) {
	t.Parallel()
	errLater := errors.New("retry after 1h")
	t.Run("early callers leave, later ones wait", func(t *testing.T) {
		t.Parallel()
		var g cache.Group[int]
		k := key(1)
		postponed := make(chan struct{})
		release := make(chan struct{})
		loads := 0
		fn := func(ctx context.Context) (int, error) {
			loads++
			cache.Postpone(ctx, time.Now().Add(time.Hour), errLater)
			close(postponed)
			<-release
			return 42, nil
		}
		type res struct {
			v   int
			err error
		}
		none := make(chan res, 1)
		go func() { v, _, err := g.Do(context.Background(), k, fn); none <- res{v, err} }()
		<-postponed
		// Join: a caller with a deadline before the next attempt leaves at
		// once; one with a later deadline stays.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, shared, err := g.Do(ctx, k, fn); !shared || !errors.Is(err, errLater) {
			t.Fatalf("Do(deadline in 1m) = shared %v, %v; want the load's error at once", shared, err)
		}
		late, cancelLate := context.WithTimeout(context.Background(), 2*time.Hour)
		defer cancelLate()
		lateRes := make(chan res, 1)
		go func() { v, _, err := g.Do(late, k, fn); lateRes <- res{v, err} }()
		for cache.Waiters(&g, k) < 2 {
			runtime.Gosched()
		}
		close(release)
		for _, ch := range []chan res{none, lateRes} {
			if r := <-ch; r.v != 42 || r.err != nil {
				t.Errorf("waiting caller got %d, %v; want 42, nil", r.v, r.err)
			}
		}
		if loads != 1 {
			t.Errorf("loads = %d; want 1", loads)
		}
	})
	t.Run("last caller leaves: load cancelled", func(t *testing.T) {
		t.Parallel()
		var g cache.Group[int]
		loadErr := make(chan error, 1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _, err := g.Do(ctx, key(2), func(ctx context.Context) (int, error) {
			cache.Postpone(ctx, time.Now().Add(time.Hour), errLater)
			<-ctx.Done()
			loadErr <- ctx.Err()
			return 0, ctx.Err()
		})
		if !errors.Is(err, errLater) {
			t.Fatalf("Do() = %v; want the load's error at once", err)
		}
		if err := <-loadErr; !errors.Is(err, context.Canceled) {
			t.Fatalf("load's context = %v; want cancelled once its only caller left", err)
		}
	})
	t.Run("outside a load: no-op", func(t *testing.T) {
		t.Parallel()
		cache.Postpone(context.Background(), time.Now().Add(time.Hour), errLater)
	})
}
