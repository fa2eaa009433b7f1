// Package cache holds the bounded, expiring, coalescing cache that every
// review result in reviewauth goes through, and the keyed hash that turns
// secrets into cache keys.
//
// Three pieces, each usable alone:
//
//   - [Cache] is a sharded LRU map from [Key] to a value, bounded by a maximum
//     number of entries, where each entry carries its own TTL. Expired entries
//     are dropped lazily, when they are read or when they reach the tail of the
//     LRU list: there is no cleanup goroutine. The clock is injected
//     (k8s.io/utils/clock), so tests step time instead of sleeping. A hit takes
//     one shard lock and allocates nothing. Its statistics live in
//     [Counters], apart from its entries: a metrics registry keeps the
//     Counters, never the cache, so a cache that is no longer used is
//     collected with its entries while its final counts stay readable.
//
//   - [Group] coalesces concurrent loads of one key into a single call. The
//     shared call is detached from any one caller's cancellation and runs with
//     its own timeout; each caller still returns as soon as its own context is
//     done, and when every caller has given up the shared call is cancelled,
//     so an abandoned review does not keep retrying. No caller's deadline
//     bounds the shared call for the others; a load that must wait before
//     its next attempt tells the callers ([Postpone]), and those whose
//     deadline comes first leave at once with its error. A panic in the load
//     is recovered and handed to every waiter as a *[PanicError].
//
//   - [Keyer] derives cache keys with SHA-256 keyed by a random per-process
//     secret (a PRF on its prefix-free encodings, like HMAC-SHA-256 for this
//     use, in one pass instead of two). Tokens are hashed together with their length-prefixed audiences, so
//     a key never reveals a token, cannot be predicted by a caller, and two
//     different (token, audiences) pairs never share a key. The raw token is
//     not retained.
package cache
