// Package cache holds the parts of the bounded, expiring, coalescing cache
// that every review result in reviewauth goes through, and the keyed hash
// that turns secrets into cache keys. It is internal: the public package
// cache (github.com/reviewauth/reviewauth/cache) composes these parts into
// the one cached-review flow, as decorators over any authenticator or
// authorizer; a service author configures it through the Options of that
// package, of authn and authz, and sees its counts through package metrics.
//
// Five pieces, each usable alone:
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
//   - [Holder] keeps one value that has to be fetched (a token, a key set):
//     served until its refresh point without a fetch, then refreshed while
//     it is still served, never past its expiry, with fetches shared
//     through a Group and bounded in how often they start.
//
//   - [Keyer] derives cache keys with a keyed pseudorandom function under a
//     random per-process 512-bit secret: SHA-256 keyed by a secret block
//     over prefix-free encodings (a PRF like HMAC-SHA-256 for this use, in
//     one pass instead of two), or keyed BLAKE2b-256 (RFC 7693), whichever
//     [PRF] measured to be faster on this CPU when the process first needed
//     one. Tokens are hashed under a sub-key derived from their
//     length-prefixed audiences, so a key never reveals a token, cannot be
//     predicted by a caller, and two different (token, audiences) pairs
//     never share a key. The raw token is not retained. [Keyer] documents
//     why both constructions are PRFs.
//
//   - [AttributeEncoder] appends the canonical, injective encoding of
//     authorizer attributes from which authorizer cache keys derive: every
//     attribute an authorizer can read, or exactly what a
//     SubjectAccessReview built from them carries (whose selector operator
//     mapping, [SARFieldOperator] and [SARLabelOperator], authz's review
//     shares).
//
// # Cost of a token-cache hit
//
// A hit hashes the whole token once (about 866 bytes for a service-account
// JWT), and that pass is most of its cost. With the x86 SHA extensions,
// SHA-256 takes about 0.5 to 0.7 µs; without them (older Intel Xeons, or
// GODEBUG=cpu.sha=off) 2.4 to 5 µs, where keyed BLAKE2b takes 1.15 to
// 1.7 µs. [PRF] therefore picks per process, and the metrics package
// exports the pick as reviewauth_cache_key_prf_info. BenchmarkTokenKeyPRF
// measures both; BenchmarkSHA256Floor is a bare SHA-256 pass.
package cache
