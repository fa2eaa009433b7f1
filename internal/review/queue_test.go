package review_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/reviewauth/reviewauth/internal/review"
)

// TestQueueOrder: with every in-flight slot taken, waiting reviews are
// granted the verified token first (its class takes up to VerifiedShare
// turns in a row), then one per address in turn, then one per connection
// of an address in turn, each connection first come, first served; a
// waiter whose context ends leaves the queue and is never sent.
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

// waiterSpec is one waiter of a queue test: its class and source.
type waiterSpec struct {
	verified   bool
	addr, conn string
}

func (w waiterSpec) ctx(parent context.Context) context.Context {
	ctx := review.WithSource(parent, review.Source{Address: w.addr, Conn: w.conn})
	if w.verified {
		ctx = review.WithVerified(ctx)
	}
	return ctx
}

// flood returns n waiters of one address over conns connections.
func flood(n, conns int, verified bool, addr string) []waiterSpec {
	out := make([]waiterSpec, n)
	for i := range out {
		out[i] = waiterSpec{verified: verified, addr: addr, conn: fmt.Sprintf("%s:%d", addr, i%conns)}
	}
	return out
}

// TestQueueShare (issue #30) drives a queue of one slot one Release at a
// time (no goroutines, no waiting) with floods of waiters in either class
// and checks the turn at which a caller from another address is served
// against the bound Queue states: with n other addresses waiting in its
// class, within (n+1)*(VerifiedShare+1) slots freed, never starved. Before
// issue #30 the verified class was served strictly first: a flood of
// verified junk starved every other review for as long as it lasted.
func TestQueueShare(t *testing.T) {
	t.Parallel()
	const w = review.VerifiedShare
	genuine := waiterSpec{addr: "192.0.2.7", conn: "192.0.2.7:1"}
	genuineVerified := waiterSpec{verified: true, addr: "192.0.2.7", conn: "192.0.2.7:1"}
	for _, tt := range []struct {
		name   string
		before []waiterSpec // waiting when the caller arrives
		caller waiterSpec
		after  []waiterSpec // arriving after it
		want   int          // the Release that serves the caller
	}{
		{"unverified caller, verified flood", flood(300, 32, true, "192.0.2.66"), genuine, nil, w + 1},
		{"unverified caller, verified flood that keeps coming", flood(10, 2, true, "192.0.2.66"), genuine, flood(300, 32, true, "192.0.2.67"), w + 1},
		{"unverified caller, both classes flooded from one address",
			append(flood(300, 32, true, "192.0.2.66"), flood(300, 32, false, "192.0.2.66")...), genuine, nil, 2 * (w + 1)},
		{"unverified caller, both classes flooded from four addresses",
			append(append(flood(120, 8, true, "192.0.2.66"), flood(120, 8, false, "192.0.2.66")...),
				append(append(flood(120, 8, false, "192.0.2.67"), flood(120, 8, false, "192.0.2.68")...), flood(120, 8, false, "192.0.2.69")...)...),
			genuine, flood(300, 8, false, "192.0.2.70"), 5 * (w + 1)},
		{"verified caller, unverified flood", flood(300, 32, false, "192.0.2.66"), genuineVerified, nil, 1},
		{"verified caller, verified flood", flood(300, 32, true, "192.0.2.66"), genuineVerified, nil, 2},
		{"verified caller, both classes flooded",
			append(flood(300, 32, false, "192.0.2.66"), flood(300, 32, true, "192.0.2.66")...), genuineVerified, nil, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := review.NewQueue(1)
			if err := q.Acquire(t.Context()); err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.before {
				q.Enqueue(s.ctx(t.Context()))
			}
			served, _ := q.Enqueue(tt.caller.ctx(t.Context()))
			for _, s := range tt.after {
				q.Enqueue(s.ctx(t.Context()))
			}
			got := 0
			for i := 1; i <= len(tt.before)+len(tt.after)+1; i++ {
				q.Release()
				if served() {
					got = i
					break
				}
			}
			if got != tt.want {
				t.Errorf("the caller was served by Release #%d (0: never); want #%d", got, tt.want)
			}
		})
	}
}

// TestQueueBound checks the bound Queue states on random traffic (a seeded
// generator, so every run is the same): waiters of both classes from a few
// addresses and connections arrive, leave and are served in any order; each
// waiter that arrived alone on its address in its class is served within
// (n+1)*(VerifiedShare+1) Releases, n the other addresses waiting in its
// class when it arrived; everyone who stays is served.
func TestQueueBound(t *testing.T) {
	t.Parallel()
	type tracked struct {
		spec    waiterSpec
		served  func() bool
		leave   func()
		arrived int // Releases so far when it arrived
		bound   int // 0: none stated (its address had company)
	}
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 1))
		q := review.NewQueue(1)
		if err := q.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
		var waiting []*tracked // in arrival order
		releases, served := 0, 0
		release := func() {
			q.Release()
			releases++
			for i, x := range waiting {
				if !x.served() {
					continue
				}
				if x.bound > 0 && releases-x.arrived > x.bound {
					t.Fatalf("seed %d: %+v served %d Releases after it arrived; bound %d", seed, x.spec, releases-x.arrived, x.bound)
				}
				waiting = append(waiting[:i], waiting[i+1:]...)
				served++
				return // one slot, one waiter
			}
		}
		for range 1500 {
			switch op := rng.IntN(10); {
			case op < 5: // arrive
				s := waiterSpec{verified: rng.IntN(3) > 0, addr: fmt.Sprint("a", rng.IntN(4))}
				s.conn = fmt.Sprint(s.addr, "/c", rng.IntN(3))
				others, company := map[string]bool{}, false
				for _, x := range waiting {
					if x.spec.verified == s.verified {
						company = company || x.spec.addr == s.addr
						others[x.spec.addr] = x.spec.addr != s.addr
					}
				}
				x := &tracked{spec: s, arrived: releases}
				if !company {
					x.bound = (len(others) + 1) * (review.VerifiedShare + 1)
				}
				x.served, x.leave = q.Enqueue(s.ctx(t.Context()))
				waiting = append(waiting, x)
			case op < 6 && len(waiting) > 0: // one leaves
				i := rng.IntN(len(waiting))
				waiting[i].leave()
				waiting = append(waiting[:i], waiting[i+1:]...)
			default:
				release()
			}
		}
		for len(waiting) > 0 {
			if q.Waiting() != len(waiting) {
				t.Fatalf("seed %d: Waiting() = %d; want %d", seed, q.Waiting(), len(waiting))
			}
			release()
		}
		if served == 0 {
			t.Fatalf("seed %d: no one served", seed)
		}
	}
}
