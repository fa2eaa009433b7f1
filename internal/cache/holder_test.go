package cache_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/internal/cache"
)

var holderStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// source is a fetch function that counts its calls and returns a value
// due for refresh after refresh and expiring after expire, or err.
type source struct {
	clk     *clocktesting.FakePassiveClock
	calls   atomic.Int32
	refresh time.Duration
	expire  time.Duration // 0: never
	mu      sync.Mutex
	err     error
}

func (s *source) fetch(context.Context) (cache.Fetched[int], error) {
	n := int(s.calls.Add(1))
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return cache.Fetched[int]{}, err
	}
	now := s.clk.Now()
	f := cache.Fetched[int]{Value: n, RefreshAt: now.Add(s.refresh)}
	if s.expire > 0 {
		f.Expires = now.Add(s.expire)
	}
	return f, nil
}

func (s *source) fail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// TestHolderRefreshAndExpiryEdges: a value is served without a fetch until
// 1ns before its refresh point, refreshed at it; a value whose refresh
// fails is served until 1ns before it expires, never at its expiry.
func TestHolderRefreshAndExpiryEdges(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakePassiveClock(holderStart)
	src := &source{clk: clk, refresh: 8 * time.Second, expire: 10 * time.Second}
	h := &cache.Holder[int]{Clock: clk, RetryInterval: time.Hour}
	get := func(wantV int, wantOK bool, wantCalls int32) {
		t.Helper()
		v, ok, _ := h.Get(context.Background(), false, src.fetch)
		if v != wantV || ok != wantOK || src.calls.Load() != wantCalls {
			t.Fatalf("at %v: Get() = %d, %v after %d fetches; want %d, %v after %d", clk.Now().Sub(holderStart), v, ok, src.calls.Load(), wantV, wantOK, wantCalls)
		}
	}
	get(1, true, 1)
	clk.SetTime(holderStart.Add(8*time.Second - time.Nanosecond))
	get(1, true, 1)
	clk.SetTime(holderStart.Add(8 * time.Second))
	get(2, true, 2) // refreshed at its refresh point
	// The next refresh fails: the held value is served, with the error,
	// and no fetch starts again within RetryInterval while it is valid.
	src.fail(errors.New("down"))
	clk.SetTime(holderStart.Add(16 * time.Second))
	if v, ok, err := h.Get(context.Background(), false, src.fetch); v != 2 || !ok || err == nil {
		t.Fatalf("Get() with a failing refresh = %d, %v, %v; want the held 2, true and the error", v, ok, err)
	}
	clk.SetTime(holderStart.Add(18*time.Second - time.Nanosecond))
	get(2, true, 3) // 1ns before expiry: still served, no new fetch
	// At its expiry the value may no longer be served: the caller fetches
	// at once, RetryInterval notwithstanding, and gets no value.
	clk.SetTime(holderStart.Add(18 * time.Second))
	if v, ok, err := h.Get(context.Background(), false, src.fetch); ok || v != 0 || err == nil || src.calls.Load() != 4 {
		t.Fatalf("Get() at expiry = %d, %v, %v after %d fetches; want no value, the error, 4 fetches", v, ok, err, src.calls.Load())
	}
	src.fail(nil)
	get(5, true, 5)
}

// TestHolderMinInterval: fetches start at most once per MinInterval,
// whatever their outcome, with a value held or not; force does not lift it.
func TestHolderMinInterval(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakePassiveClock(holderStart)
	src := &source{clk: clk, refresh: time.Hour}
	h := &cache.Holder[int]{Clock: clk, MinInterval: 30 * time.Second}
	src.fail(errors.New("down"))
	if _, ok, err := h.Get(context.Background(), false, src.fetch); ok || err == nil {
		t.Fatalf("Get() = %v, %v; want no value and the error", ok, err)
	}
	clk.SetTime(holderStart.Add(30*time.Second - time.Nanosecond))
	if _, ok, err := h.Get(context.Background(), true, src.fetch); ok || err != nil || src.calls.Load() != 1 {
		t.Fatalf("Get() 1ns before MinInterval = %v, %v after %d fetches; want no value, no error, 1 fetch", ok, err, src.calls.Load())
	}
	src.fail(nil)
	clk.SetTime(holderStart.Add(30 * time.Second))
	if v, ok, err := h.Get(context.Background(), false, src.fetch); v != 2 || !ok || err != nil {
		t.Fatalf("Get() at MinInterval = %d, %v, %v; want 2, true, nil", v, ok, err)
	}
	// A held value that lacks something (force) is not refetched before
	// MinInterval either: the held one is returned.
	clk.SetTime(holderStart.Add(59 * time.Second))
	if v, ok, _ := h.Get(context.Background(), true, src.fetch); v != 2 || !ok || src.calls.Load() != 2 {
		t.Fatalf("forced Get() within MinInterval = %d, %v after %d fetches; want the held 2 and no fetch", v, ok, src.calls.Load())
	}
	clk.SetTime(holderStart.Add(60 * time.Second))
	if v, _, _ := h.Get(context.Background(), true, src.fetch); v != 3 {
		t.Fatalf("forced Get() at MinInterval = %d; want a new value, 3", v)
	}
}

// TestHolderConcurrentFetches: callers without a value share one fetch;
// while it runs, a caller with a valid value is served at once, and a
// forced caller waits for it.
func TestHolderConcurrentFetches(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakePassiveClock(holderStart)
	h := &cache.Holder[int]{Clock: clk}
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var calls atomic.Int32
	fetch := func(context.Context) (cache.Fetched[int], error) {
		n := int(calls.Add(1))
		started <- struct{}{}
		<-release
		return cache.Fetched[int]{Value: n, RefreshAt: clk.Now().Add(time.Minute)}, nil
	}
	const n = 20
	var wg sync.WaitGroup
	results := make(chan int, n)
	for range n {
		wg.Go(func() {
			v, _, _ := h.Get(context.Background(), false, fetch)
			results <- v
		})
	}
	<-started
	for cache.Waiters(h.Group(), cache.Key{}) < n {
		runtimeGosched()
	}
	close(release)
	wg.Wait()
	close(results)
	for v := range results {
		if v != 1 {
			t.Fatalf("a caller got %d; want 1", v)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("fetches = %d; want 1", calls.Load())
	}

	// Due for refresh, a fetch running: a plain caller is served the held
	// value at once; a forced one waits for the new value.
	clk.SetTime(holderStart.Add(time.Minute))
	release = make(chan struct{})
	first := make(chan int)
	go func() {
		v, _, _ := h.Get(context.Background(), false, fetch)
		first <- v
	}()
	<-started
	if v, ok, _ := h.Get(context.Background(), false, fetch); v != 1 || !ok {
		t.Fatalf("Get() during a refresh = %d, %v; want the held 1 at once", v, ok)
	}
	forced := make(chan int)
	go func() {
		v, _, _ := h.Get(context.Background(), true, fetch)
		forced <- v
	}()
	for cache.Waiters(h.Group(), cache.Key{}) < 2 {
		runtimeGosched()
	}
	close(release)
	if v1, v2 := <-first, <-forced; v1 != 2 || v2 != 2 {
		t.Fatalf("refreshing and forced callers got %d, %d; want 2, 2", v1, v2)
	}
}

// TestHolderPanicAndAbandon: a panicking fetch is a failure handed to its
// waiters; a fetch every caller abandoned is not a failure, so the next
// caller may fetch at once.
func TestHolderPanicAndAbandon(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakePassiveClock(holderStart)
	h := &cache.Holder[int]{Clock: clk, RetryInterval: time.Hour}
	_, ok, err := h.Get(context.Background(), false, func(context.Context) (cache.Fetched[int], error) { panic("boom") })
	var pe *cache.PanicError
	if ok || !errors.As(err, &pe) {
		t.Fatalf("Get() with a panicking fetch = %v, %v; want a *PanicError", ok, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan error)
	go func() {
		_, _, err := h.Get(ctx, false, func(fctx context.Context) (cache.Fetched[int], error) {
			close(started)
			<-fctx.Done()
			return cache.Fetched[int]{}, fctx.Err()
		})
		done <- err
	}()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned Get() = %v; want context.Canceled", err)
	}
	for h.Group().InFlight() > 0 {
		runtimeGosched()
	}
	v, ok, err := h.Get(context.Background(), false, func(context.Context) (cache.Fetched[int], error) {
		return cache.Fetched[int]{Value: 7, RefreshAt: clk.Now().Add(time.Minute)}, nil
	})
	if v != 7 || !ok || err != nil {
		t.Fatalf("Get() after an abandoned fetch = %d, %v, %v; want 7, true, nil", v, ok, err)
	}
}
