package loglimit_test

import (
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/internal/loglimit"
)

// TestLimiterEdges: a burst at once, then one line per interval, exactly at
// the interval and not 1ns before; the first line after a pause counts the
// lines left out.
func TestLimiterEdges(t *testing.T) {
	t.Parallel()
	const burst, interval = 3, time.Second
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	l := loglimit.New(burst, interval, clk)
	for i := range burst {
		if ok, n := l.Allow(); !ok || n != 0 {
			t.Fatalf("Allow() #%d of the burst = %v, %d; want true, 0", i, ok, n)
		}
	}
	for i := range 4 {
		if ok, _ := l.Allow(); ok {
			t.Fatalf("Allow() #%d past the burst = true; want false", i)
		}
	}
	clk.SetTime(clk.Now().Add(interval - time.Nanosecond))
	if ok, _ := l.Allow(); ok {
		t.Fatalf("Allow() 1ns before the interval = true; want false")
	}
	clk.SetTime(clk.Now().Add(time.Nanosecond))
	if ok, n := l.Allow(); !ok || n != 5 {
		t.Fatalf("Allow() at the interval = %v, %d; want true, 5 suppressed", ok, n)
	}
	if ok, _ := l.Allow(); ok {
		t.Fatalf("Allow() right after = true; want false")
	}
	// A long pause refills the whole burst, no more.
	clk.SetTime(clk.Now().Add(time.Hour))
	for i := range burst {
		if ok, _ := l.Allow(); !ok {
			t.Fatalf("Allow() #%d after a pause = false; want true", i)
		}
	}
	if ok, _ := l.Allow(); ok {
		t.Fatalf("Allow() past the refilled burst = true; want false")
	}
}

func TestLimiterZeroInterval(t *testing.T) {
	t.Parallel()
	l := loglimit.New(0, 0, nil)
	for range 100 {
		if ok, _ := l.Allow(); !ok {
			t.Fatal("Allow() with no interval = false; want true")
		}
	}
}

// TestLimiterConcurrent: under concurrent use exactly the burst is admitted
// while the clock stands still, and every refusal is counted once.
func TestLimiterConcurrent(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	l := loglimit.New(10, time.Second, clk)
	var (
		mu      sync.Mutex
		allowed int
		wg      sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if ok, _ := l.Allow(); ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if allowed != 10 {
		t.Errorf("allowed = %d; want 10", allowed)
	}
	clk.SetTime(clk.Now().Add(time.Second))
	if ok, n := l.Allow(); !ok || n != 790 {
		t.Errorf("Allow() after a second = %v, %d; want true, 790", ok, n)
	}
}

// TestLimiterReserve: a burst is admitted at once, then each reservation
// one interval after the previous, in order, exactly at the interval; an
// unused reservation gives its place back, and a pause refills the burst,
// no more. Allow and Reserve share the bucket.
func TestLimiterReserve(t *testing.T) {
	t.Parallel()
	const burst, interval = 2, 100 * time.Millisecond
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	l := loglimit.New(burst, interval, clk)
	for i, want := range []time.Duration{0, 0, interval, 2 * interval, 3 * interval} {
		if got := l.Reserve(); got != want {
			t.Fatalf("Reserve() #%d = %v; want %v", i, got, want)
		}
	}
	l.Unreserve()
	if got := l.Reserve(); got != 3*interval {
		t.Fatalf("Reserve() after Unreserve = %v; want %v (the place given back)", got, 3*interval)
	}
	if ok, _ := l.Allow(); ok {
		t.Fatal("Allow() with reservations queued = true; want false")
	}
	clk.SetTime(clk.Now().Add(4*interval - time.Nanosecond))
	if got := l.Reserve(); got != time.Nanosecond {
		t.Fatalf("Reserve() 1ns before its turn = %v; want 1ns", got)
	}
	clk.SetTime(clk.Now().Add(time.Hour))
	l.Unreserve() // nothing reserved: no room beyond a full bucket
	for i := range burst {
		if got := l.Reserve(); got != 0 {
			t.Fatalf("Reserve() #%d after a pause = %v; want 0", i, got)
		}
	}
	if got := l.Reserve(); got != interval {
		t.Fatalf("Reserve() past the refilled burst = %v; want %v", got, interval)
	}
	if got := loglimit.New(1, 0, nil).Reserve(); got != 0 {
		t.Fatalf("Reserve() with no interval = %v; want 0", got)
	}
}

// TestLimiterAllowKV: a line allowed after some were left out says how
// many; one allowed after none adds nothing; one refused is refused.
func TestLimiterAllowKV(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	l := loglimit.New(1, time.Second, clk)
	base := []any{"user", "alice"}
	for _, step := range []struct {
		name   string
		after  time.Duration
		wantOK bool
		want   []any
	}{
		{"first", 0, true, []any{"user", "alice"}},
		{"refused", 0, false, nil},
		{"refused again", time.Second - 1, false, nil},
		{"an interval after the first", 1, true, []any{"user", "alice", "suppressed", 2}},
		{"an interval later, none left out", time.Second, true, []any{"user", "alice"}},
	} {
		clk.SetTime(clk.Now().Add(step.after))
		kv, ok := l.AllowKV(slices.Clone(base))
		if ok != step.wantOK {
			t.Fatalf("%s: ok = %v; want %v", step.name, ok, step.wantOK)
		}
		if ok && !reflect.DeepEqual(kv, step.want) {
			t.Errorf("%s: kv = %v; want %v", step.name, kv, step.want)
		}
	}
}
