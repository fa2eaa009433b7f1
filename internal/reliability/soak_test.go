package reliability_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
)

// Soak parameters. The caches are small, so that the token churn keeps
// evicting and the TTLs short, so that identities and decisions are reviewed
// again and again while the load runs.
const (
	soakCacheEntries = 512
	soakTTL          = 2 * time.Second
	// soakUniverse is how many tokens the soak draws from, in a cycle:
	// several times the cache, so that most first uses are misses.
	soakUniverse = 3000
	// soakWorkers call through each transport.
	soakWorkers = 16
	// bytesPerEntry is the memory allowed per cache entry: a key (32 B),
	// an identity or decision (a few hundred bytes) and the list node, with
	// room to spare. The heap after the soak may exceed the heap after the
	// warm-up by at most this times the entries of every cache.
	bytesPerEntry = 4 << 10
)

// soakDuration is SOAK_DURATION, or 10s.
func soakDuration(t *testing.T) time.Duration {
	v := os.Getenv("SOAK_DURATION")
	if v == "" {
		return 10 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("SOAK_DURATION=%q: want a positive Go duration", v)
	}
	return d
}

// tokenKind is what the fake API server and the policy say about a token.
type tokenKind int

const (
	kindAllowed       tokenKind = iota // clientSA, our audience: 200, or 403 for deny-*
	kindStranger                       // no RBAC binding: 403
	kindOtherAudience                  // a genuine token for someone else: 401
	kindUnknown                        // well-formed, never issued: 401
	kindRevoked                        // revoked before its first use: 401
	kindRevokedLater                   // like kindAllowed until revoked during the soak
)

// soakToken is one token of the universe. revokedAt (UnixNano) is set once,
// when a kindRevokedLater token is revoked.
type soakToken struct {
	token     string
	kind      tokenKind
	revokedAt atomic.Int64
}

// kindOf spreads the kinds over the universe: half allowed, the rest split.
func kindOf(i int) tokenKind {
	switch i % 10 {
	case 0, 1, 2, 3, 4:
		return kindAllowed
	case 5:
		return kindStranger
	case 6:
		return kindOtherAudience
	case 7:
		return kindUnknown
	case 8:
		return kindRevoked
	}
	return kindRevokedLater
}

// soakNames are the things asked for: a bounded set, so that the SAR cache
// has a working set, with some the policy denies.
var soakNames = func() []string {
	var names []string
	for i := range 24 {
		names = append(names, fmt.Sprintf("thing-%d", i))
	}
	for i := range 8 {
		names = append(names, fmt.Sprintf("%s%d", deniedPrefix, i))
	}
	return names
}()

// expect returns the outcome the token registry and the policy say a call
// for name made at sent, answered at done, must have; ok reports whether a
// revocation in between makes both the normal outcome and Unauthenticated
// acceptable.
func (tk *soakToken) expect(name string, sent, done time.Time) (want outcome, either bool) {
	normal := allowed
	if strings.HasPrefix(name, deniedPrefix) {
		normal = denied
	}
	switch tk.kind {
	case kindAllowed:
		return normal, false
	case kindStranger:
		return denied, false
	case kindOtherAudience, kindUnknown, kindRevoked:
		return unauthenticated, false
	}
	at := tk.revokedAt.Load()
	if at == 0 || done.UnixNano() < at {
		return normal, false
	}
	// A revoked token may be served from the cache for one SuccessTTL
	// (plus a second for a review that was in flight at the revocation).
	if sent.UnixNano() > at+int64(soakTTL+time.Second) {
		return unauthenticated, false
	}
	return normal, true
}

// TestSoak runs a bounded loopback load through the HTTP middleware
// (httptest server, real client) and the gRPC interceptor (real TCP
// listener) for SOAK_DURATION, with soakWorkers goroutines on each, token
// churn (a universe of tokens several times the cache, introduced
// continuously; some revoked while in use, some for other audiences, some
// unknown, some denied by policy) and short TTLs. It checks that:
//
//   - every decision matches the authtest token registry and policy: the
//     code, and for an allow the identity the handler saw;
//   - the heap after the soak exceeds the heap after the warm-up by less
//     than bytesPerEntry per cache entry;
//   - the goroutine count does not grow: the same under load at the end
//     as after the warm-up, and back to the start once the servers close.
func TestSoak(t *testing.T) {
	// Not parallel: it measures goroutines and memory.
	duration := soakDuration(t)
	goroutinesAtStart := runtime.NumGoroutine()
	atStart := goleak.IgnoreCurrent()

	s := authtest.NewServer()
	defer s.Close()
	s.SetPolicy(policy)
	st := newStack(t, s,
		authn.Options{SuccessTTL: soakTTL, FailureTTL: soakTTL, MaxEntries: soakCacheEntries},
		authz.Options{AllowedTTL: soakTTL, DeniedTTL: soakTTL, MaxEntries: soakCacheEntries})
	hs := newHTTP(t, st)
	gs := newGRPC(t, st, true)

	exp := time.Now().Add(time.Hour)
	universe := make([]*soakToken, soakUniverse)
	for i := range universe {
		tk := &soakToken{kind: kindOf(i)}
		switch tk.kind {
		case kindAllowed, kindRevokedLater:
			tk.token = s.MintToken(clientSA, []string{audience}, exp)
		case kindStranger:
			tk.token = s.MintToken(strangerSA, []string{audience}, exp)
		case kindOtherAudience:
			tk.token = s.MintToken(clientSA, []string{"someone-else.example"}, exp)
		case kindUnknown:
			tk.token = unknownJWT(1_000_000 + i)
		case kindRevoked:
			tk.token = s.MintToken(clientSA, []string{audience}, exp)
			s.RevokeToken(tk.token)
		}
		universe[i] = tk
	}

	var (
		cursor            atomic.Int64 // next token of the universe to introduce
		calls, wrongCalls atomic.Int64
		perKind           [kindRevokedLater + 1]atomic.Int64
		mu                sync.Mutex
		wrongs            []string
	)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	worker := func(tp transport, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 7))
		pool := make([]*soakToken, 4)
		for i := range pool {
			pool[i] = universe[int(cursor.Add(1))%len(universe)]
		}
		for ctx.Err() == nil {
			if rng.IntN(8) == 0 { // churn: a token the library has likely not seen
				pool[rng.IntN(len(pool))] = universe[int(cursor.Add(1))%len(universe)]
			}
			tk := pool[rng.IntN(len(pool))]
			name := soakNames[rng.IntN(len(soakNames))]
			cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			sent := time.Now()
			got := tp.call(cctx, tk.token, name)
			done := time.Now()
			cancel()
			calls.Add(1)
			perKind[tk.kind].Add(1)
			want, either := tk.expect(name, sent, done)
			ok := got.code == want || (either && got.code == unauthenticated)
			if ok && got.code == allowed && got.user != clientSA.Name {
				ok = false
			}
			if !ok {
				wrongCalls.Add(1)
				mu.Lock()
				if len(wrongs) < 10 {
					wrongs = append(wrongs, fmt.Sprintf("kind %d, thing %s: %s as %q (%q); want %s (either %v)", tk.kind, name, got.code, got.user, got.message, want, either))
				}
				mu.Unlock()
			}
		}
	}
	var wg sync.WaitGroup
	for i := range soakWorkers {
		wg.Go(func() { worker(hs, uint64(2*i)) })
		wg.Go(func() { worker(gs, uint64(2*i+1)) })
	}
	// The revoker revokes a kindRevokedLater token already in use every
	// 20ms, the way a deleted pod invalidates its tokens.
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			hi := int(cursor.Load())
			for i := max(0, hi-64); i < hi; i++ {
				tk := universe[i%len(universe)]
				if tk.kind == kindRevokedLater && tk.revokedAt.Load() == 0 {
					s.RevokeToken(tk.token)
					tk.revokedAt.Store(time.Now().UnixNano())
					break
				}
			}
		}
	})

	// Warm-up: a fifth of the run.
	warm := time.NewTimer(duration / 5)
	<-warm.C
	reviews := s.Count(authtest.TokenReviews) + s.Count(authtest.SubjectAccessReviews)
	s.Reset()
	heapWarm := heapInuse()
	goroutinesWarm := runtime.NumGoroutine()
	callsWarm := calls.Load()
	start := time.Now()
	// Forget the reviews authtest recorded, so that its memory stays flat,
	// once a second; the server keeps only counters otherwise.
	rest := time.NewTicker(time.Second)
	// The number of goroutines under load moves with the calls in flight at
	// the instant it is read (a call holds goroutines on both ends, a
	// reconnect a few more), so one reading against another is noise. A
	// leak only grows: it shows as the fewest goroutines of the last
	// quarter of the run exceeding the fewest of the first quarter.
	sample := time.NewTicker(20 * time.Millisecond)
	var samples []int
	for end := time.After(duration - duration/5); ; {
		done := false
		select {
		case <-sample.C:
			samples = append(samples, runtime.NumGoroutine())
			continue
		case <-rest.C:
		case <-end:
			done = true
		}
		reviews += s.Count(authtest.TokenReviews) + s.Count(authtest.SubjectAccessReviews)
		s.Reset()
		if done {
			break
		}
	}
	rest.Stop()
	sample.Stop()
	samples = append([]int{goroutinesWarm}, samples...)
	quarter := max(1, len(samples)/4)
	firstLow, lastLow := slices.Min(samples[:quarter]), slices.Min(samples[len(samples)-quarter:])
	heapEnd := heapInuse()
	measured := time.Since(start)
	stop()
	wg.Wait()

	total := calls.Load()
	rate := float64(total-callsWarm) / measured.Seconds()
	t.Logf("soak: %v, %d workers on each transport: %d calls (%.0f/s after the warm-up), %d reviews, %d tokens introduced (universe %d, caches %d)",
		duration, soakWorkers, total, rate, reviews, cursor.Load(), soakUniverse, soakCacheEntries)
	t.Logf("soak: calls by token kind (allowed, stranger, other audience, unknown, revoked, revoked later): %v", loads(perKind[:]))
	if n := wrongCalls.Load(); n != 0 {
		t.Errorf("%d of %d decisions did not match the authtest registry and policy; first: %s", n, total, strings.Join(wrongs, "\n"))
	}
	if total < 100 {
		t.Errorf("soak made %d calls; want at least 100", total)
	}
	for k := range perKind {
		if perKind[k].Load() == 0 {
			t.Errorf("soak made no call with a token of kind %d", k)
		}
	}

	entries := 3 * soakCacheEntries // authn identities and rejections, authz decisions
	budget := uint64(entries * bytesPerEntry)
	t.Logf("soak: heap in use %.1f MiB after the warm-up, %.1f MiB at the end (allowed growth %.1f MiB = %d entries x %d B)",
		mib(heapWarm), mib(heapEnd), mib(budget), entries, bytesPerEntry)
	if heapEnd > heapWarm+budget {
		t.Errorf("heap in use grew from %d to %d bytes; want at most %d more", heapWarm, heapEnd, budget)
	}

	// Goroutines: the load holds a fixed number of them, and closing the
	// servers gives back every one.
	t.Logf("soak: goroutines %d at the start, %d after the warm-up; under load (%d readings) %d to %d, fewest %d in the first quarter and %d in the last",
		goroutinesAtStart, goroutinesWarm, len(samples), slices.Min(samples), slices.Max(samples), firstLow, lastLow)
	if lastLow > firstLow+soakWorkers {
		t.Errorf("goroutines under load grew: fewest %d in the first quarter of the run, %d in the last; want at most %d more", firstLow, lastLow, soakWorkers)
	}
	hs.close()
	gs.close()
	s.Close()
	if err := goleak.Find(atStart); err != nil {
		t.Errorf("goroutines left after closing the servers: %v", err)
	}
	t.Logf("soak: goroutines %d after closing the servers", runtime.NumGoroutine())
	checkLogs(t)
}

// heapInuse returns HeapInuse after a full collection.
func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func loads(xs []atomic.Int64) []int64 {
	out := make([]int64, len(xs))
	for i := range xs {
		out[i] = xs[i].Load()
	}
	return out
}
