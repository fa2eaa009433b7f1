package cache

import (
	"encoding/binary"
	"sync"
	"time"

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
}

// Cache is a bounded LRU map from [Key] to V in which every entry has its own
// time to live. Expiry is lazy: an expired entry is dropped when it is read,
// or when it reaches the tail of the LRU list. There are no background
// goroutines.
//
// A Cache is safe for concurrent use. Large caches are split into shards by
// key, each with its own lock, so hits on different keys scale across cores;
// within a shard eviction is least-recently-used. Get does not allocate.
type Cache[V any] struct {
	clock  clock.PassiveClock
	shards []shard[V]
	mask   uint64
}

type shard[V any] struct {
	mu       sync.Mutex
	entries  map[Key]*entry[V]
	head     entry[V] // sentinel: head.next is most recent, head.prev least
	capacity int
	stats    Stats
	_        [64]byte // keep shards' locks on separate cache lines
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
	c := &Cache[V]{clock: opts.Clock, shards: make([]shard[V], n), mask: uint64(n - 1)}
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
	}
	return c
}

func (c *Cache[V]) shard(k Key) *shard[V] {
	// Keys are keyed SHA-256 outputs: any 8 bytes are uniformly distributed.
	return &c.shards[binary.LittleEndian.Uint64(k[:8])&c.mask]
}

// Get returns the value stored under k if it has not expired. An entry
// expires at exactly its insertion time plus its TTL.
func (c *Cache[V]) Get(k Key) (V, bool) {
	now := c.clock.Now()
	s := c.shard(k)
	s.mu.Lock()
	e, ok := s.entries[k]
	if !ok {
		s.stats.Misses++
		s.mu.Unlock()
		var zero V
		return zero, false
	}
	if !now.Before(e.expires) {
		s.remove(e)
		s.stats.Expired++
		s.stats.Misses++
		s.mu.Unlock()
		var zero V
		return zero, false
	}
	s.moveToFront(e)
	v := e.value
	s.stats.Hits++
	s.mu.Unlock()
	return v, true
}

// Set stores v under k for ttl, replacing any previous entry. A ttl of zero
// or less stores nothing and removes any previous entry: a value that may not
// be cached must not leave an older one behind. When the cache (or the key's
// shard) is full, Set drops the least recently used entry.
func (c *Cache[V]) Set(k Key, v V, ttl time.Duration) {
	s := c.shard(k)
	if ttl <= 0 {
		s.mu.Lock()
		if e, ok := s.entries[k]; ok {
			s.remove(e)
		}
		s.mu.Unlock()
		return
	}
	now := c.clock.Now()
	expires := now.Add(ttl)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[k]; ok {
		e.value, e.expires = v, expires
		s.moveToFront(e)
		return
	}
	for len(s.entries) >= s.capacity {
		tail := s.head.prev
		s.remove(tail)
		if !now.Before(tail.expires) {
			s.stats.Expired++
		} else {
			s.stats.Evictions++
		}
	}
	e := &entry[V]{key: k, value: v, expires: expires}
	s.entries[k] = e
	s.pushFront(e)
}

// Delete removes the entry stored under k, if any.
func (c *Cache[V]) Delete(k Key) {
	s := c.shard(k)
	s.mu.Lock()
	if e, ok := s.entries[k]; ok {
		s.remove(e)
	}
	s.mu.Unlock()
}

// Len returns the number of entries held, including expired entries that
// have not been dropped yet.
func (c *Cache[V]) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.entries)
		s.mu.Unlock()
	}
	return n
}

// Stats returns the cache's counters, summed over its shards.
func (c *Cache[V]) Stats() Stats {
	var t Stats
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		t.Hits += s.stats.Hits
		t.Misses += s.stats.Misses
		t.Evictions += s.stats.Evictions
		t.Expired += s.stats.Expired
		t.Entries += len(s.entries)
		s.mu.Unlock()
	}
	return t
}

func (s *shard[V]) pushFront(e *entry[V]) {
	e.prev = &s.head
	e.next = s.head.next
	e.next.prev = e
	s.head.next = e
}

func (s *shard[V]) moveToFront(e *entry[V]) {
	if s.head.next == e {
		return
	}
	e.prev.next = e.next
	e.next.prev = e.prev
	s.pushFront(e)
}

func (s *shard[V]) remove(e *entry[V]) {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
	delete(s.entries, e.key)
}
