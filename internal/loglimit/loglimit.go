// Package loglimit bounds how many lines a log site writes: a burst at
// once, then one per interval, with a count of the lines it left out. It is
// what keeps refusals visible at the default verbosity without letting a
// client looping on a bad token (or an attacker) fill the log with a line
// per request. The same bucket paces other events that must not come
// faster than a rate (package serving's TLS handshakes per source, and
// streams a client resets): [Limiter.Reserve] queues them in order instead
// of refusing them.
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

// AllowKV is [Limiter.Allow] for a structured log line: it reports whether
// the line may be written now and returns kv, with "suppressed" and the
// number of lines left out before it appended when there were any.
func (l *Limiter) AllowKV(kv []any) ([]any, bool) {
	ok, suppressed := l.Allow()
	if ok && suppressed > 0 {
		kv = append(kv, "suppressed", suppressed)
	}
	return kv, ok
}

// Reserve admits one event at the time it conforms to the bucket, and
// returns how long from now that is: zero within the burst, then one
// interval after the previous reservation, so that events that reserve in
// turn are admitted in the same order (first come, first served). It never
// refuses, and counts nothing as suppressed. An event that will not happen
// after all (its caller gave up waiting) gives its place back with
// [Limiter.Unreserve].
func (l *Limiter) Reserve() time.Duration {
	if l.interval <= 0 {
		return 0
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	tat := l.tat
	if tat.Before(now) {
		tat = now
	}
	at := tat.Add(-time.Duration(l.burst-1) * l.interval)
	l.tat = tat.Add(l.interval)
	if at.Before(now) {
		return 0
	}
	return at.Sub(now)
}

// Unreserve gives back one reservation of [Limiter.Reserve] that was not
// used: the next event may come one interval sooner. It never makes room
// beyond a full bucket.
func (l *Limiter) Unreserve() {
	if l.interval <= 0 {
		return
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tat.After(now) {
		l.tat = l.tat.Add(-l.interval)
	}
}
