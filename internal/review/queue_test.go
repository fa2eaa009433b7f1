package review_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/reviewauth/reviewauth/internal/review"
)

// TestQueueOrder: with every in-flight slot taken, waiting reviews are
// granted verified tokens first, then one per address in turn, then one
// per connection of an address in turn, each connection first come, first
// served; a waiter whose context ends leaves the queue and is never sent.
func TestQueueOrder(t *testing.T) {
	t.Parallel()
	r := review.New("TokenReview", review.Options{MaxInFlight: 1})
	release := make(chan struct{})
	held := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = r.Do(t.Context(), nil, func(context.Context) error {
			close(held)
			<-release
			return nil
		})
	})
	<-held
	var mu sync.Mutex
	var order []string
	waitFor := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for r.Waiting() != n {
			if time.Now().After(deadline) {
				t.Fatalf("Waiting() = %d; want %d", r.Waiting(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	enqueue := func(ctx context.Context, name string) {
		wg.Go(func() {
			_ = r.Do(ctx, nil, func(context.Context) error {
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				return nil
			})
		})
	}
	src := func(addr, conn string) context.Context {
		return review.WithSource(t.Context(), review.Source{Address: addr, Conn: conn})
	}
	gone, leave := context.WithCancel(src("A", "c1"))
	for i, w := range []struct {
		ctx  context.Context
		name string
	}{
		{src("A", "c1"), "a1"},
		{src("A", "c1"), "a2"},
		{gone, "gone"},
		{src("A", "c2"), "a3"},
		{src("B", "c3"), "b1"},
		{src("A", "c1"), "a4"},
		{review.WithVerified(src("C", "c4")), "v1"},
		{src("B", "c3"), "b2"},
		{t.Context(), "nosource"},
	} {
		enqueue(w.ctx, w.name)
		waitFor(i + 1)
	}
	leave()
	waitFor(8)
	close(release)
	wg.Wait()
	want := []string{"v1", "a1", "b1", "nosource", "a3", "b2", "a2", "a4"}
	if len(order) != len(want) {
		t.Fatalf("granted %q; want %q", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("granted %q; want %q", order, want)
		}
	}
	if n := r.Waiting(); n != 0 {
		t.Errorf("Waiting() after = %d; want 0", n)
	}
}

// TestQueueFreeSlotsAreTakenAtOnce: below MaxInFlight nothing waits, and
// MaxInFlight concurrent reviews run together.
func TestQueueFreeSlotsAreTakenAtOnce(t *testing.T) {
	t.Parallel()
	const max = 4
	r := review.New("TokenReview", review.Options{MaxInFlight: max})
	all := make(chan struct{})
	var running sync.WaitGroup
	running.Add(max)
	var wg sync.WaitGroup
	for range max {
		wg.Go(func() {
			_ = r.Do(t.Context(), nil, func(context.Context) error {
				running.Done()
				<-all
				return nil
			})
		})
	}
	running.Wait()
	if n := r.Waiting(); n != 0 {
		t.Errorf("Waiting() with %d of %d slots taken = %d; want 0", max, max, n)
	}
	close(all)
	wg.Wait()
	if got := r.MaxInFlightSeen(); got != max {
		t.Errorf("MaxInFlightSeen() = %d; want %d", got, max)
	}
}

// TestAttemptUnderWayOutlivesCancellation: an attempt under way when its
// context is cancelled (every caller of a shared review gave up) is not
// cut short, so that its answer can be stored; one not yet started (still
// queued for a slot) is never sent.
func TestAttemptUnderWayOutlivesCancellation(t *testing.T) {
	t.Parallel()
	r := review.New("TokenReview", review.Options{MaxInFlight: 1})
	ctx, cancel := context.WithCancel(t.Context())
	started, release := make(chan struct{}), make(chan struct{})
	var attemptErr error
	done := make(chan error, 1)
	go func() {
		done <- r.Do(ctx, nil, func(actx context.Context) error {
			close(started)
			<-release
			attemptErr = actx.Err()
			return nil
		})
	}()
	<-started
	queuedCtx, cancelQueued := context.WithCancel(t.Context())
	sent := false
	queued := make(chan error, 1)
	go func() {
		queued <- r.Do(queuedCtx, nil, func(context.Context) error { sent = true; return nil })
	}()
	waitQueued := time.Now().Add(10 * time.Second)
	for r.Waiting() != 1 && time.Now().Before(waitQueued) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	cancelQueued()
	if err := <-queued; err == nil || sent {
		t.Errorf("a queued review whose context ended = %v, sent %v; want an error, never sent", err, sent)
	}
	close(release)
	if err := <-done; err != nil || attemptErr != nil {
		t.Errorf("Do() = %v, the attempt's context %v; want the attempt under way completed", err, attemptErr)
	}
}
