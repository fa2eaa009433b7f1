package cache_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reviewauth/reviewauth/internal/cache"
)

func TestGroupCoalescesConcurrentCalls(t *testing.T) {
	t.Parallel()
	var g cache.Group[int]
	var calls atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{})
	k := key(1)
	const n = 100
	var wg sync.WaitGroup
	results := make(chan int, n)
	var sharedCount atomic.Int32
	// The first caller starts the load; the rest join while it is blocked.
	wg.Add(1)
	go func() {
		defer wg.Done()
		v, _, err := g.Do(context.Background(), k, func(context.Context) (int, error) {
			calls.Add(1)
			close(started)
			<-release
			return 42, nil
		})
		if err != nil {
			t.Errorf("Do = %v", err)
		}
		results <- v
	}()
	<-started
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, shared, err := g.Do(context.Background(), k, func(context.Context) (int, error) {
				calls.Add(1)
				return -1, nil
			})
			if err != nil {
				t.Errorf("Do = %v", err)
			}
			if shared {
				sharedCount.Add(1)
			}
			results <- v
		}()
	}
	// Wait until every joiner is registered, without sleeping: joiners only
	// ever block in Do, so poll the group's state via a second probe key.
	for sharedCountWaiting(&g, k) < n {
		runtimeGosched()
	}
	close(release)
	wg.Wait()
	close(results)
	for v := range results {
		if v != 42 {
			t.Errorf("a caller got %d; want 42", v)
		}
	}
	if c := calls.Load(); c != 1 {
		t.Errorf("loads = %d; want 1", c)
	}
	if s := sharedCount.Load(); s != n-1 {
		t.Errorf("shared = %d; want %d", s, n-1)
	}
}

func TestGroupCallerReturnsOnOwnCancel(t *testing.T) {
	t.Parallel()
	var g cache.Group[int]
	release := make(chan struct{})
	loadDone := make(chan error, 1)
	started := make(chan struct{})
	k := key(2)
	// A patient caller keeps the load alive.
	patient := make(chan int, 1)
	go func() {
		v, _, _ := g.Do(context.Background(), k, func(ctx context.Context) (int, error) {
			close(started)
			select {
			case <-release:
				loadDone <- nil
				return 7, nil
			case <-ctx.Done():
				loadDone <- ctx.Err()
				return 0, ctx.Err()
			}
		})
		patient <- v
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := g.Do(ctx, k, func(context.Context) (int, error) { return 0, errors.New("must not run") })
		errc <- err
	}()
	for sharedCountWaiting(&g, k) < 2 {
		runtimeGosched()
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller's Do = %v; want context.Canceled", err)
	}
	close(release)
	if err := <-loadDone; err != nil {
		t.Fatalf("load saw %v; want it to keep running while a waiter remains", err)
	}
	if v := <-patient; v != 7 {
		t.Fatalf("patient caller got %d; want 7", v)
	}
}

func TestGroupCancelsAbandonedLoad(t *testing.T) {
	t.Parallel()
	var g cache.Group[int]
	k := key(3)
	loadErr := make(chan error, 1)
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := g.Do(ctx, k, func(lctx context.Context) (int, error) {
			close(started)
			<-lctx.Done()
			loadErr <- lctx.Err()
			return 0, lctx.Err()
		})
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v; want context.Canceled", err)
	}
	if err := <-loadErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned load's context error = %v; want context.Canceled", err)
	}
	// A new call for the key starts a fresh load.
	v, shared, err := g.Do(context.Background(), k, func(context.Context) (int, error) { return 9, nil })
	if v != 9 || shared || err != nil {
		t.Fatalf("Do after abandonment = (%d, %v, %v); want (9, false, nil)", v, shared, err)
	}
}

func TestGroupLoadIsDetachedButKeepsValuesAndTimeout(t *testing.T) {
	t.Parallel()
	g := cache.Group[string]{Timeout: time.Hour}
	type ctxKey struct{}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), ctxKey{}, "v"), time.Hour*100)
	defer cancel()
	_, _, err := g.Do(ctx, key(4), func(lctx context.Context) (string, error) {
		if lctx.Value(ctxKey{}) != "v" {
			t.Errorf("load context lost the caller's values")
		}
		dl, ok := lctx.Deadline()
		if !ok || time.Until(dl) > time.Hour {
			t.Errorf("load deadline = %v, %v; want the group's 1h timeout, not the caller's", dl, ok)
		}
		return "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestGroupPanicBecomesErrorForEveryWaiter(t *testing.T) {
	t.Parallel()
	var g cache.Group[int]
	k := key(5)
	release := make(chan struct{})
	started := make(chan struct{})
	errs := make(chan error, 2)
	go func() {
		_, _, err := g.Do(context.Background(), k, func(context.Context) (int, error) {
			close(started)
			<-release
			panic("boom")
		})
		errs <- err
	}()
	<-started
	go func() {
		_, _, err := g.Do(context.Background(), k, nil)
		errs <- err
	}()
	for sharedCountWaiting(&g, k) < 2 {
		runtimeGosched()
	}
	close(release)
	for i := 0; i < 2; i++ {
		var pe *cache.PanicError
		if err := <-errs; !errors.As(err, &pe) || pe.Value != "boom" || len(pe.Stack) == 0 {
			t.Errorf("waiter %d got %v; want *PanicError with value boom and a stack", i, err)
		}
	}
}

func TestGroupTimeout(t *testing.T) {
	t.Parallel()
	g := cache.Group[int]{Timeout: time.Millisecond}
	_, _, err := g.Do(context.Background(), key(6), func(ctx context.Context) (int, error) {
		<-ctx.Done() // ends only through the group's own timeout
		return 0, ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v; want DeadlineExceeded from the group timeout", err)
	}
}

func sharedCountWaiting[V any](g *cache.Group[V], k cache.Key) int { return cache.Waiters(g, k) }

func runtimeGosched() { runtime.Gosched() }
