package cache_test

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/internal/cache"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var keyer = cache.NewKeyer()

func key(i int) cache.Key { return keyer.TokenKey(fmt.Sprint("token-", i), nil) }

func TestCacheTTLEdges(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const ttl = 10 * time.Second
	tests := []struct {
		name    string
		elapsed time.Duration
		wantHit bool
	}{
		{"fresh", 0, true},
		{"ttl minus 1ns", ttl - time.Nanosecond, true},
		{"exactly ttl", ttl, false},
		{"past ttl", ttl + time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakePassiveClock(start)
			c := cache.New[string](cache.Options{Clock: clk})
			c.Set(key(1), "v", ttl)
			clk.SetTime(start.Add(tt.elapsed))
			v, ok := c.Get(key(1))
			if ok != tt.wantHit {
				t.Fatalf("Get after %v = (%q, %v); want hit %v", tt.elapsed, v, ok, tt.wantHit)
			}
			if ok && v != "v" {
				t.Fatalf("Get = %q; want %q", v, "v")
			}
			if !ok && c.Len() != 0 {
				t.Fatalf("Len after expired Get = %d; want 0 (expired entries are dropped on read)", c.Len())
			}
		})
	}
}

func TestCachePerEntryTTL(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	clk := clocktesting.NewFakePassiveClock(start)
	c := cache.New[int](cache.Options{Clock: clk})
	c.Set(key(1), 1, time.Second)
	c.Set(key(2), 2, time.Minute)
	clk.SetTime(start.Add(2 * time.Second))
	if _, ok := c.Get(key(1)); ok {
		t.Errorf("Get(short) after its TTL = hit; want miss")
	}
	if v, ok := c.Get(key(2)); !ok || v != 2 {
		t.Errorf("Get(long) = (%d, %v); want (2, true)", v, ok)
	}
}

func TestCacheNonPositiveTTLStoresNothingAndRemoves(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{0, -time.Second} {
		c := cache.New[int](cache.Options{})
		c.Set(key(1), 1, time.Minute)
		c.Set(key(1), 2, ttl)
		if v, ok := c.Get(key(1)); ok {
			t.Errorf("Set(ttl=%v) then Get = (%d, true); want miss: the old entry must not survive", ttl, v)
		}
	}
}

func TestCacheBoundExactAtEdge(t *testing.T) {
	t.Parallel()
	for _, max := range []int{1, 3, 1023, 1024, 4096} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			t.Parallel()
			c := cache.New[int](cache.Options{MaxEntries: max})
			for i := 0; i < max*3; i++ {
				c.Set(key(i), i, time.Hour)
				if n := c.Len(); n > max {
					t.Fatalf("Len after %d sets = %d; want <= %d", i+1, n, max)
				}
			}
			st := c.Stats()
			if st.Entries > max || st.Evictions == 0 {
				t.Fatalf("Stats = %+v; want Entries <= %d and some evictions", st, max)
			}
		})
	}
}

func TestCacheDeleteFunc(t *testing.T) {
	t.Parallel()
	start := time.Unix(0, 0)
	// Below and above the sharding threshold, with expired entries too.
	for _, max := range []int{4, 4096} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakePassiveClock(start)
			c := cache.New[int](cache.Options{Clock: clk, MaxEntries: max})
			n := min(max, 100)
			for i := range n {
				c.Set(key(i), i, time.Duration(1+i%2)*time.Second)
			}
			clk.SetTime(start.Add(time.Second)) // the even ones expired
			odd := func(v int) bool { return v%2 == 1 }
			if got := c.DeleteFunc(odd); got != n/2 {
				t.Fatalf("DeleteFunc(odd) = %d; want %d", got, n/2)
			}
			if c.Len() != n-n/2 || c.Stats().Entries != n-n/2 {
				t.Fatalf("Len after DeleteFunc(odd) = %d (Stats %+v); want %d", c.Len(), c.Stats(), n-n/2)
			}
			for i := range n {
				if _, ok := c.Peek(key(i)); ok {
					t.Fatalf("Peek(%d) after DeleteFunc = hit; want miss", i)
				}
			}
			if got := c.DeleteFunc(nil); got != n-n/2 || c.Len() != 0 {
				t.Fatalf("DeleteFunc(nil) = %d, Len %d; want %d, 0", got, c.Len(), n-n/2)
			}
			// The cache still works, to its bound.
			for i := range max + 1 {
				c.Set(key(i), i, time.Hour)
			}
			if c.Len() > max {
				t.Fatalf("Len = %d; want <= %d", c.Len(), max)
			}
		})
	}
}

func TestCacheLRUOrder(t *testing.T) {
	t.Parallel()
	// Below the sharding threshold eviction is exact LRU.
	c := cache.New[int](cache.Options{MaxEntries: 3})
	for i := 1; i <= 3; i++ {
		c.Set(key(i), i, time.Hour)
	}
	// At the limit: nothing evicted.
	for i := 1; i <= 3; i++ {
		if _, ok := c.Get(key(i)); !ok {
			t.Fatalf("Get(%d) at the limit = miss; want hit", i)
		}
	}
	c.Get(key(1)) // 1 is now the most recent; 2 the least.
	c.Set(key(4), 4, time.Hour)
	if _, ok := c.Get(key(2)); ok {
		t.Errorf("Get(2) after limit+1 = hit; want miss (least recently used)")
	}
	for _, i := range []int{1, 3, 4} {
		if _, ok := c.Get(key(i)); !ok {
			t.Errorf("Get(%d) = miss; want hit", i)
		}
	}
	if st := c.Stats(); st.Evictions != 1 {
		t.Errorf("Evictions = %d; want 1", st.Evictions)
	}
}

func TestCacheStats(t *testing.T) {
	t.Parallel()
	start := time.Unix(0, 0)
	clk := clocktesting.NewFakePassiveClock(start)
	c := cache.New[int](cache.Options{Clock: clk, MaxEntries: 10})
	c.Get(key(1))
	c.Set(key(1), 1, time.Second)
	c.Get(key(1))
	clk.SetTime(start.Add(time.Second))
	c.Get(key(1))
	got := c.Stats()
	want := cache.Stats{Hits: 1, Misses: 2, Expired: 1}
	if got != want {
		t.Errorf("Stats() = %+v; want %+v", got, want)
	}
}

func TestCacheGetDoesNotAllocate(t *testing.T) {
	c := cache.New[*int](cache.Options{MaxEntries: 8192})
	v := 1
	k := key(7)
	c.Set(k, &v, time.Hour)
	if n := testing.AllocsPerRun(1000, func() { c.Get(k) }); n != 0 {
		t.Errorf("Get allocs = %v; want 0", n)
	}
	miss := key(8)
	if n := testing.AllocsPerRun(1000, func() { c.Get(miss) }); n != 0 {
		t.Errorf("Get(miss) allocs = %v; want 0", n)
	}
}

func TestKeyerSeparatesInputs(t *testing.T) {
	t.Parallel()
	k := cache.NewKeyer()
	pairs := []struct {
		name string
		a, b func() cache.Key
	}{
		{"token boundary vs audience", func() cache.Key { return k.TokenKey("ab", []string{"c"}) }, func() cache.Key { return k.TokenKey("a", []string{"bc"}) }},
		{"audience split", func() cache.Key { return k.TokenKey("t", []string{"a", "b"}) }, func() cache.Key { return k.TokenKey("t", []string{"ab"}) }},
		{"no audience vs empty audience", func() cache.Key { return k.TokenKey("t", nil) }, func() cache.Key { return k.TokenKey("t", []string{""}) }},
		{"audience order", func() cache.Key { return k.TokenKey("t", []string{"a", "b"}) }, func() cache.Key { return k.TokenKey("t", []string{"b", "a"}) }},
		{"strings vs string", func() cache.Key {
			h := k.NewHash()
			h.WriteStrings([]string{"x"})
			return h.Sum()
		}, func() cache.Key {
			h := k.NewHash()
			h.WriteString("x")
			return h.Sum()
		}},
	}
	for _, p := range pairs {
		if p.a() == p.b() {
			t.Errorf("%s: keys are equal; want different", p.name)
		}
	}
	for _, auds := range [][]string{nil, {"a"}, {"a", "b"}, {""}} {
		for _, tok := range []string{"", "t", string(make([]byte, 1000))} {
			if k.ForAudiences(auds).Key(tok) != k.TokenKey(tok, auds) {
				t.Errorf("ForAudiences(%q).Key(%q) != TokenKey", auds, tok)
			}
		}
	}
	if k.ForAudiences([]string{"a"}).Key("t") == k.ForAudiences([]string{"b"}).Key("t") {
		t.Errorf("ForAudiences ignores the audiences")
	}
	if k.TokenKey("t", []string{"a"}) != k.TokenKey("t", []string{"a"}) {
		t.Errorf("TokenKey is not deterministic within one Keyer")
	}
	if cache.NewKeyer().TokenKey("t", nil) == k.TokenKey("t", nil) {
		t.Errorf("two Keyers produced the same key; want a random per-Keyer secret")
	}
}

func TestTokenKeyDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under -race; allocation counts are checked without it")
	}
	k := cache.NewKeyer()
	tok := string(make([]byte, 866))
	auds := []string{"snap.example"}
	k.TokenKey(tok, auds) // warm the pool
	if n := testing.AllocsPerRun(1000, func() { k.TokenKey(tok, auds) }); n != 0 {
		t.Errorf("TokenKey allocs = %v; want 0", n)
	}
	tk := k.ForAudiences(auds)
	if n := testing.AllocsPerRun(1000, func() { tk.Key(tok) }); n != 0 {
		t.Errorf("TokenKeyer.Key allocs = %v; want 0", n)
	}
}

func BenchmarkTokenKey(b *testing.B) {
	k := cache.NewKeyer()
	tok := string(make([]byte, 866))
	auds := []string{"snap.example"}
	b.Run("TokenKey", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			k.TokenKey(tok, auds)
		}
	})
	b.Run("ForAudiences", func(b *testing.B) {
		tk := k.ForAudiences(auds)
		b.ReportAllocs()
		for b.Loop() {
			tk.Key(tok)
		}
	})
}

func BenchmarkGet(b *testing.B) {
	c := cache.New[int](cache.Options{})
	k := key(1)
	c.Set(k, 1, time.Hour)
	b.ReportAllocs()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			c.Get(k)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		keys := make([]cache.Key, 64)
		for i := range keys {
			keys[i] = key(i)
			c.Set(keys[i], i, time.Hour)
		}
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				c.Get(keys[i&63])
				i++
			}
		})
	})
}

func BenchmarkSHA256Floor(b *testing.B) {
	tok := make([]byte, 866)
	b.ReportAllocs()
	for b.Loop() {
		sha256.Sum256(tok)
	}
}
