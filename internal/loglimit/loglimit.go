// Package loglimit bounds how many lines a log site writes: a burst at
// once, then one per interval, with a count of the lines it left out. It is
// what keeps refusals visible at the default verbosity without letting a
// client looping on a bad token (or an attacker) fill the log with a line
// per request.
package loglimit

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Limiter admits at most Burst lines at once and one per Interval after
// that: a token bucket of Burst lines refilled one per Interval, kept as the
// time it is full again (the generic cell rate algorithm) in integer
// nanoseconds, so that its edges are exact (golang.org/x/time/rate works in
// float64 tokens and admits a line up to a nanosecond early). A Limiter is
// safe for concurrent use; its zero value is not usable, call [New].
type Limiter struct {
	burst    int
	interval time.Duration
	clock    clock.PassiveClock

	mu         sync.Mutex
	tat        time.Time // when the bucket is full again
	suppressed int
}

// New returns a Limiter of burst lines at once and one per interval. A
// burst below 1 is 1; an interval of zero or less admits every line. A nil
// clock means the real clock.
func New(burst int, interval time.Duration, clk clock.PassiveClock) *Limiter {
	if burst < 1 {
		burst = 1
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Limiter{burst: burst, interval: interval, clock: clk}
}

// Allow reports whether a line may be written now. When it may, suppressed
// is the number of lines refused since the last one admitted, for the line
// to say so; when it may not, the refusal is counted and suppressed is 0.
func (l *Limiter) Allow() (ok bool, suppressed int) {
	if l.interval <= 0 {
		return true, 0
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	tat := l.tat
	if tat.Before(now) {
		tat = now
	}
	if tat.Sub(now) > time.Duration(l.burst-1)*l.interval {
		l.suppressed++
		return false, 0
	}
	l.tat = tat.Add(l.interval)
	n := l.suppressed
	l.suppressed = 0
	return true, n
}
