package cache

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"k8s.io/utils/clock"
)

// DefaultMaxEntries is the bound used when [Options.MaxEntries] is zero. At a
// few hundred bytes an entry it keeps a cache under a few MiB.
const DefaultMaxEntries = 4096

// shardedThreshold is the size from which a cache is split into shards. Below
// it a single shard keeps exact LRU order, which small caches need to make
// good use of their few slots.
const shardedThreshold = 1024

const numShards = 32

// Options configures a [Cache]. The zero value is valid.
type Options struct {
	// MaxEntries bounds the number of entries. The bound is exact: the cache
	// never holds more. Zero means [DefaultMaxEntries]; a negative value is
	// treated as 1.
	MaxEntries int

	// Clock tells the time for expiry. Nil means the real clock.
	Clock clock.PassiveClock
}

// Stats counts what a [Cache] has done since it was created.
type Stats struct {
	Hits      uint64 // Get found a live entry
	Misses    uint64 // Get found nothing, or only an expired entry
	Evictions uint64 // a live entry was dropped to make room
	Expired   uint64 // an expired entry was dropped
	Entries   int    // entries held now, live or not yet found expired
	// Coalesced counts lookups that joined another caller's load instead
	// of starting their own, as reported with [Counters.AddCoalesced].
	Coalesced uint64
}

// Counters hold the statistics of one [Cache]. They live apart from the
// cache's entries and outlive it: a metrics registry keeps a cache's
// Counters, never the cache, so that a cache nobody uses any more (an
// authenticator rebuilt on a configuration reload) is garbage collected
// with its entries while its final counts stay readable. [Counters.Live]
// reports whether the cache is still reachable.
//
// Counters are safe for concurrent use. Each shard's counters share a cache
// line with that shard's lock, which lives here too: a hit counts with a
// plain increment under the lock it already holds, and Stats reads under
// the same lock, whether or not the cache still exists.
type Counters struct {
	shards    []shardCounters
	coalesced atomic.Uint64
	live      func() bool
}

// shardCounters is one shard's lock and counters: 48 bytes, padded so that
// no two shards' share a cache line.
type shardCounters struct {
	mu                               sync.Mutex // the shard's lock: guards its entries too
	hits, misses, evictions, expired uint64
	entries                          int
	_                                [80]byte
}

// Stats returns the counts, summed over the cache's shards. Entries is 0
// once the cache is no longer [Counters.Live].
func (k *Counters) Stats() Stats {
	var t Stats
	for i := range k.shards {
		s := &k.shards[i]
		s.mu.Lock()
		t.Hits += s.hits
		t.Misses += s.misses
		t.Evictions += s.evictions
		t.Expired += s.expired
		t.Entries += s.entries
		s.mu.Unlock()
	}
	t.Coalesced = k.coalesced.Load()
	if !k.Live() {
		t.Entries = 0
	}
	return t
}

// AddCoalesced counts n lookups that joined a load another caller had
// started; a [Group] with these Counters does it.
func (k *Counters) AddCoalesced(n uint64) { k.coalesced.Add(n) }

// Live reports whether the cache these Counters belong to is still
// reachable. Once it is not (the garbage collector has found it
// unreachable), it never is again.
func (k *Counters) Live() bool { return k.live() }

// Cache is a bounded LRU map from [Key] to V in which every entry has its own
// time to live. Expiry is lazy: an expired entry is dropped when it is read,
// or when it reaches the tail of the LRU list. There are no background
// goroutines.
//
// A Cache is safe for concurrent use. Large caches are split into shards by
// key, each with its own lock, so hits on different keys scale across cores;
// within a shard eviction is least-recently-used. Get does not allocate.
type Cache[V any] struct {
	clock    clock.PassiveClock
	shards   []shard[V]
	mask     uint64
	counters *Counters
}

type shard[V any] struct {
	// c holds the shard's lock and counters (see Counters).
	c        *shardCounters
	entries  map[Key]*entry[V]
	head     entry[V] // sentinel: head.next is most recent, head.prev least
	capacity int
	_        [64]byte // keep shards' LRU heads on separate cache lines
}

type entry[V any] struct {
	key        Key
	value      V
	expires    time.Time
	prev, next *entry[V]
}

// New returns an empty cache configured by opts.
func New[V any](opts Options) *Cache[V] {
	max := opts.MaxEntries
	if max == 0 {
		max = DefaultMaxEntries
	}
	if max < 1 {
		max = 1
	}
	n := 1
	if max >= shardedThreshold {
		n = numShards
	}
	c := &Cache[V]{clock: opts.Clock, shards: make([]shard[V], n), mask: uint64(n - 1),
		counters: &Counters{shards: make([]shardCounters, n)}}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.capacity = max / n
		if i < max%n {
			s.capacity++
		}
		s.entries = make(map[Key]*entry[V])
		s.head.next, s.head.prev = &s.head, &s.head
		s.c = &c.counters.shards[i]
	}
	// The counters hold the cache only weakly, so that whoever keeps them
	// (metrics) does not keep the cache and its entries alive.
	wp := weak.Make(c)
	c.counters.live = func() bool { return wp.Value() != nil }
	return c
}

// Counters returns the cache's statistics, which outlive it: see
// [Counters].
func (c *Cache[V]) Counters() *Counters { return c.counters }

func (c *Cache[V]) shard(k Key) *shard[V] {
	// Keys are keyed SHA-256 outputs: any 8 bytes are uniformly distributed.
	return &c.shards[binary.LittleEndian.Uint64(k[:8])&c.mask]
}

// Get returns the value stored under k if it has not expired. An entry
// expires at exactly its insertion time plus its TTL.
func (c *Cache[V]) Get(k Key) (V, bool) {
	now := c.clock.Now()
	s := c.shard(k)
	s.c.mu.Lock()
	e, ok := s.entries[k]
	if !ok {
		s.c.misses++
		s.c.mu.Unlock()
		var zero V
		return zero, false
	}
	if !now.Before(e.expires) {
		s.remove(e)
		s.c.expired++
		s.c.misses++
		s.c.mu.Unlock()
		var zero V
		return zero, false
	}
	s.moveToFront(e)
	v := e.value
	s.c.hits++
	s.c.mu.Unlock()
	return v, true
}

// Peek is Get without its side effects: it counts neither a hit nor a
// miss, does not refresh the entry's LRU position, and leaves an expired
// entry in place. It is for a second look at a key within one lookup (after
// waiting for a coalesced load, say), which must not count twice.
func (c *Cache[V]) Peek(k Key) (V, bool) {
	now := c.clock.Now()
	s := c.shard(k)
	s.c.mu.Lock()
	e, ok := s.entries[k]
	if !ok || !now.Before(e.expires) {
		s.c.mu.Unlock()
		var zero V
		return zero, false
	}
	v := e.value
	s.c.mu.Unlock()
	return v, true
}

// Set stores v under k for ttl, replacing any previous entry. A ttl of zero
// or less stores nothing and removes any previous entry: a value that may not
// be cached must not leave an older one behind. When the cache (or the key's
// shard) is full, Set drops the least recently used entry.
func (c *Cache[V]) Set(k Key, v V, ttl time.Duration) {
	s := c.shard(k)
	if ttl <= 0 {
		s.c.mu.Lock()
		if e, ok := s.entries[k]; ok {
			s.remove(e)
		}
		s.c.mu.Unlock()
		return
	}
	now := c.clock.Now()
	expires := now.Add(ttl)
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if e, ok := s.entries[k]; ok {
		e.value, e.expires = v, expires
		s.moveToFront(e)
		return
	}
	for len(s.entries) >= s.capacity {
		tail := s.head.prev
		s.remove(tail)
		if !now.Before(tail.expires) {
			s.c.expired++
		} else {
			s.c.evictions++
		}
	}
	e := &entry[V]{key: k, value: v, expires: expires}
	s.entries[k] = e
	s.pushFront(e)
}

// Delete removes the entry stored under k, if any.
func (c *Cache[V]) Delete(k Key) {
	s := c.shard(k)
	s.c.mu.Lock()
	if e, ok := s.entries[k]; ok {
		s.remove(e)
	}
	s.c.mu.Unlock()
}

// DeleteFunc removes every entry whose value del reports true for (nil del:
// every entry), expired or not, and returns how many it removed. It walks
// the whole cache, one shard at a time under that shard's lock, so it costs
// one call of del per entry held: at most the cache's bound. del must not
// use the cache. An entry set concurrently in a shard already walked stays.
func (c *Cache[V]) DeleteFunc(del func(V) bool) int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.c.mu.Lock()
		for e := s.head.next; e != &s.head; {
			next := e.next
			if del == nil || del(e.value) {
				s.remove(e)
				n++
			}
			e = next
		}
		s.c.mu.Unlock()
	}
	return n
}

// Len returns the number of entries held, including expired entries that
// have not been dropped yet.
func (c *Cache[V]) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.c.mu.Lock()
		n += len(s.entries)
		s.c.mu.Unlock()
	}
	return n
}

// Stats returns the cache's counters, summed over its shards; the same as
// c.Counters().Stats().
func (c *Cache[V]) Stats() Stats { return c.counters.Stats() }

func (s *shard[V]) pushFront(e *entry[V]) {
	e.prev = &s.head
	e.next = s.head.next
	e.next.prev = e
	s.head.next = e
	s.c.entries++
}

func (s *shard[V]) moveToFront(e *entry[V]) {
	if s.head.next == e {
		return
	}
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev = &s.head
	e.next = s.head.next
	e.next.prev = e
	s.head.next = e
}

func (s *shard[V]) remove(e *entry[V]) {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
	delete(s.entries, e.key)
	s.c.entries--
}
