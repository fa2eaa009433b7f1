package cache

import (
	"crypto/fips140"
	"crypto/rand"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"hash"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/crypto/blake2b"
)

// Key is a cache key: the 32-byte output of a [Keyer]'s keyed PRF.
type Key [32]byte

// The keyed PRFs a Keyer can use; see [PRF].
const (
	// PRFSHA256 is SHA-256 keyed by a secret block, over prefix-free
	// encodings.
	PRFSHA256 = "sha256"
	// PRFBLAKE2b is BLAKE2b-256 in its keyed mode (RFC 7693).
	PRFBLAKE2b = "blake2b"
)

// secretSize is the size of a Keyer's random secret: one SHA-256 block, and
// BLAKE2b's largest key. Either way 512 bits.
const secretSize = 64

// chosen is the PRF of this process, picked once by [PRF].
var chosen = sync.OnceValue(choosePRF)

// PRF returns the name of the keyed pseudorandom function every [Keyer] in
// this process uses: [PRFSHA256] or [PRFBLAKE2b]. The choice is made once,
// at the first call of PRF or [NewKeyer], for the CPU the process runs on,
// and never changes afterwards.
//
// Both are 256-bit PRFs keyed by a 512-bit random secret (see [Keyer]); they
// differ only in speed. SHA-256 is fastest where the CPU hashes it in
// hardware (x86 SHA extensions, ARMv8 SHA2), about 0.5 to 0.7 µs for a
// 866-byte service-account token; without them it takes 2.5 to 5 µs, and
// keyed BLAKE2b (x/crypto, SIMD) 1.15 to 1.7 µs. Go's crypto/sha256 decides
// which code it runs from internal CPU flags that GODEBUG can change (for
// example GODEBUG=cpu.sha=off), and that golang.org/x/sys/cpu cannot see, so
// the choice is measured rather than read from feature flags: the first call
// times both on a 1 KiB input, a few rounds each, and keeps the fastest
// round of each. BLAKE2b is chosen only if it is more than 20% faster than
// SHA-256, so a CPU where the two are close keeps SHA-256, and the
// measurement costs about 0.1 ms once per process. In FIPS 140 mode
// (crypto/fips140.Enabled) SHA-256 is always chosen.
//
// PRF is safe for concurrent use. The metrics package exports the choice
// as reviewauth_cache_key_prf_info{prf="sha256"|"blake2b"}.
func PRF() string { return chosen() }

// choosePRF times SHA-256 and keyed BLAKE2b on the same input and returns
// the one to use.
func choosePRF() string {
	if fips140.Enabled() {
		return PRFSHA256
	}
	const rounds, perRound = 16, 2
	in := make([]byte, 1024) // about one service-account JWT
	var out [32]byte
	s := sha256.New()
	b, err := blake2b.New256(make([]byte, secretSize))
	if err != nil {
		return PRFSHA256
	}
	run := func(h hash.Hash) time.Duration {
		start := time.Now()
		for range perRound {
			h.Reset()
			h.Write(in)
			h.Sum(out[:0])
		}
		return time.Since(start)
	}
	run(s) // warm up: page faults, code and data caches
	run(b)
	bestS, bestB := time.Duration(1<<62), time.Duration(1<<62)
	for range rounds {
		bestS = min(bestS, run(s))
		bestB = min(bestB, run(b))
	}
	if bestB*10 < bestS*8 {
		return PRFBLAKE2b
	}
	return PRFSHA256
}

// Keyer derives [Key]s with a keyed pseudorandom function (PRF) under a
// 64-byte secret drawn from crypto/rand when the Keyer is created. The PRF
// is the one [PRF] chose for this process, and is one of:
//
//   - SHA-256 keyed by a secret block: Key = SHA-256(secret || encoding),
//     where the secret fills exactly one SHA-256 block and the encoding is
//     prefix-free (every string is length-prefixed, every list
//     count-prefixed, so no encoding is a proper prefix of another). On
//     prefix-free inputs this keyed Merkle-Damgard cascade is a PRF
//     (Bellare, Canetti and Krawczyk, "Pseudorandom functions revisited: the
//     cascade construction and its concrete security", FOCS 1996). It does
//     what HMAC-SHA-256 does for this use at the cost of one SHA-256 pass
//     instead of HMAC's second, outer pass (BenchmarkTokenKey); keys never
//     leave the process, so HMAC's protection against length extension of
//     a published tag is not needed. The secret's block is hashed once,
//     when the Keyer is created.
//   - BLAKE2b-256 in its keyed mode (RFC 7693): the key length is in the
//     parameter block and the key, zero-padded to a 128-byte block, is
//     hashed before the input. Keyed BLAKE2b is a PRF and a MAC by design
//     (the BLAKE2 paper, section 2.9; RFC 7693 section 2.5), on any input:
//     its last block is processed under a finalization flag, so it has no
//     length extension and needs no prefix-free encoding. The same
//     encodings are used anyway; being injective (length- and
//     count-prefixed) is what makes distinct inputs distinct messages.
//
// Either way a Key is 256 bits under a 512-bit secret (BLAKE2b's largest
// key): keys are unpredictable to anyone without the secret, and two
// different inputs collide only with negligible probability (2^-128 after
// 2^64 keys), which is what a cache key needs. Neither the secret nor a key
// ever leaves the process.
//
// Token keys are keyed in two levels (see [Keyer.TokenKey]): the audiences
// first derive a 256-bit sub-key under the secret, which then keys the
// token: with SHA-256 as a secret block, with BLAKE2b as the BLAKE2b key
// (over a tag byte 'T', then the length-prefixed token).
// The sub-key is a PRF output, so it is as good as a fresh random key for
// the second level (a standard hybrid argument); a token key is therefore
// a PRF of (audiences, token) under the secret.
//
// Keys are stable for the life of one Keyer and unrelated across Keyers
// (and across processes), so an attacker who can choose inputs cannot
// predict or collide cache keys.
//
// A Keyer is safe for concurrent use. The zero value is not usable; call
// [NewKeyer].
type Keyer struct {
	prf string
	// pool holds *Hash keyed by the secret: with SHA-256, states restored
	// from state; with BLAKE2b, digests keyed by the secret.
	pool sync.Pool
	// state is the SHA-256 state after the secret block (SHA-256 only).
	state []byte
	// subs holds, with BLAKE2b, the TokenKeyers of the audience sets
	// TokenKey has seen, by sub-key, up to maxRememberedAudiences, so
	// that TokenKey makes no keyed state for them (x/crypto's BLAKE2b
	// cannot be re-keyed in place).
	subsMu sync.RWMutex
	subs   map[Key]*TokenKeyer
}

// NewKeyer returns a Keyer with a fresh random key, using the PRF that
// [PRF] names. It panics only if the system's random source fails, as
// crypto/rand itself does.
func NewKeyer() *Keyer {
	secret := make([]byte, secretSize)
	if _, err := rand.Read(secret); err != nil {
		panic("cache: reading random key: " + err.Error())
	}
	return newKeyer(PRF(), secret)
}

// newKeyer returns a Keyer for prf with secret, which must be secretSize
// bytes.
func newKeyer(prf string, secret []byte) *Keyer {
	k := &Keyer{prf: prf}
	switch prf {
	case PRFSHA256:
		k.state = sha256State(secret)
		k.pool.New = func() any { return &Hash{pool: &k.pool, mac: sha256.New(), state: k.state} }
	case PRFBLAKE2b:
		key := append([]byte(nil), secret...)
		k.pool.New = func() any { return &Hash{pool: &k.pool, mac: newBLAKE2b(key)} }
	default:
		panic("cache: unknown PRF " + prf)
	}
	return k
}

// PRF returns the name of the Keyer's PRF, as [PRF] does.
func (k *Keyer) PRF() string { return k.prf }

// sha256State returns the marshalled SHA-256 state after block.
func sha256State(block []byte) []byte {
	d := sha256.New()
	d.Write(block)
	state, err := d.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic("cache: saving the keyed SHA-256 state: " + err.Error())
	}
	return state
}

// newBLAKE2b returns BLAKE2b-256 keyed by key (1 to 64 bytes).
func newBLAKE2b(key []byte) hash.Hash {
	h, err := blake2b.New256(key)
	if err != nil {
		panic("cache: keying BLAKE2b: " + err.Error())
	}
	return h
}

// TokenKey returns the key for a bearer token reviewed for audiences. It
// is a two-level keyed hash: a sub-key is derived from the audiences
// (count-prefixed, each length-prefixed, in the order given), and keys the
// PRF over the length-prefixed token. Callers that treat audiences as a set
// should pass them in a canonical order. When the audiences are fixed,
// [Keyer.ForAudiences] derives the sub-key once, and computes the same key
// in one pass over the token alone: no more blocks than hashing the bare
// token. With SHA-256 TokenKey does not allocate; with BLAKE2b it keeps a
// TokenKeyer for each of the first 16 audience sets it sees, and allocates
// a keyed state per call for others (x/crypto's BLAKE2b cannot be re-keyed
// in place). [Keyer.ForAudiences] never allocates.
func (k *Keyer) TokenKey(token string, audiences []string) Key {
	sub := k.audienceKey(audiences)
	if k.prf == PRFBLAKE2b {
		if t := k.remembered(sub); t != nil {
			return t.Key(token)
		}
		h := &Hash{mac: newBLAKE2b(sub[:32])} // not pooled: keyed for these audiences only
		h.mac.Write(blake2bTokenTag)
		return h.finishToken(token)
	}
	h := k.pool.Get().(*Hash)
	h.block = sub // in h, so that sub does not escape to the heap
	h.mac.Reset()
	h.mac.Write(h.block[:])
	return h.finishToken(token)
}

// maxRememberedAudiences bounds the audience sets whose BLAKE2b TokenKeyer
// a Keyer keeps for TokenKey. Audience sets come from the service (its
// configuration, or the context its code builds), not from callers: a
// handful. Past the bound TokenKey allocates a keyed state per call, as
// without the memo.
const maxRememberedAudiences = 16

// remembered returns the TokenKeyer of the audiences whose sub-key is sub,
// making it if there is room (BLAKE2b only), or nil.
func (k *Keyer) remembered(sub [sha256.BlockSize]byte) *TokenKeyer {
	id := Key(sub[:32])
	k.subsMu.RLock()
	t := k.subs[id]
	k.subsMu.RUnlock()
	if t != nil {
		return t
	}
	k.subsMu.Lock()
	defer k.subsMu.Unlock()
	if t = k.subs[id]; t == nil && len(k.subs) < maxRememberedAudiences {
		if k.subs == nil {
			k.subs = make(map[Key]*TokenKeyer)
		}
		t = k.forSubKey(sub)
		k.subs[id] = t
	}
	return t
}

// blake2bTokenTag starts the BLAKE2b encoding of a token: a domain tag,
// written before the length-prefixed token so that a TokenKeyer can keep
// the state after it (see TokenKeyer.Key).
var blake2bTokenTag = []byte{'T'}

// audienceKey returns the sub-key that keys the tokens of audiences,
// derived under the Keyer's secret after a domain tag. With SHA-256 it is
// the 32-byte sub-key padded to one block, whose last byte is a second
// domain tag; with BLAKE2b, the first 32 bytes are the BLAKE2b key.
func (k *Keyer) audienceKey(audiences []string) (block [sha256.BlockSize]byte) {
	h := k.NewHash()
	h.WriteByte('A') // domain: audience sub-keys
	h.WriteStrings(audiences)
	sub := h.Sum()
	copy(block[:], sub[:])
	block[sha256.BlockSize-1] = 'T' // domain: token keys
	return block
}

// finishToken writes the length-prefixed token and returns the key.
func (h *Hash) finishToken(token string) Key {
	n := binary.PutUvarint(h.scratch[:], uint64(len(token)))
	h.mac.Write(h.scratch[:n])
	if len(token) > 0 {
		h.mac.Write(unsafe.Slice(unsafe.StringData(token), len(token)))
	}
	return h.Sum()
}

// ForAudiences returns a [TokenKeyer] for audiences: its Key(token) equals
// k.TokenKey(token, audiences), with the audiences' sub-key derived once,
// here.
func (k *Keyer) ForAudiences(audiences []string) *TokenKeyer {
	return k.forSubKey(k.audienceKey(audiences))
}

// forSubKey returns the TokenKeyer of the audiences whose sub-key is sub.
func (k *Keyer) forSubKey(sub [sha256.BlockSize]byte) *TokenKeyer {
	t := &TokenKeyer{}
	switch k.prf {
	case PRFBLAKE2b:
		key := append([]byte(nil), sub[:32]...)
		// The keyed state after the tag: x/crypto's BLAKE2b compresses the
		// key block when the first byte after it is written, so this state
		// has the key block hashed and the tag buffered.
		proto := newBLAKE2b(key)
		proto.Write(blake2bTokenTag)
		t.proto = reflect.ValueOf(proto).Elem()
		t.pool.New = func() any {
			h := &Hash{pool: &t.pool, mac: newBLAKE2b(key)}
			h.dst = reflect.ValueOf(h.mac).Elem()
			return h
		}
	default:
		state := sha256State(sub[:])
		t.pool.New = func() any { return &Hash{pool: &t.pool, mac: sha256.New(), state: state} }
	}
	return t
}

// TokenKeyer derives token keys for one fixed set of audiences. It is safe
// for concurrent use.
type TokenKeyer struct {
	// pool holds *Hash keyed by the audiences' sub-key.
	pool sync.Pool
	// proto is, with BLAKE2b, the digest value keyed by the sub-key with
	// the token tag written; Key copies it into a pooled digest.
	proto reflect.Value
}

// Key returns the key of token, as [Keyer.TokenKey] with the TokenKeyer's
// audiences. It does not allocate, and hashes only the token and its
// varint length after the keyed state.
func (t *TokenKeyer) Key(token string) Key {
	h := t.pool.Get().(*Hash)
	if t.proto.IsValid() {
		// BLAKE2b. x/crypto cannot save or restore a keyed BLAKE2b state
		// (MarshalBinary refuses keyed digests), and Reset would hash the
		// 128-byte key block again for every token, one compression in
		// eight for a service-account JWT (BenchmarkTokenKeyPRF). Copying
		// the digest value (arrays and integers) restores the state after
		// the key block instead.
		h.dst.Set(t.proto)
	} else {
		h.reset()
	}
	return h.finishToken(token)
}

// NewHash returns a pooled keyed hash, ready for writes. Finish it with
// [Hash.Sum], which returns it to the pool.
func (k *Keyer) NewHash() *Hash {
	h := k.pool.Get().(*Hash)
	h.reset()
	return h
}

// Hash accumulates a length-prefixed encoding of its inputs under its
// [Keyer]'s secret. Callers must write a self-delimiting sequence (a fixed
// schema of WriteString, WriteStrings, WriteUint64 and WriteByte calls), so
// that the encoding stays prefix-free. Every write is prefixed with its length, so
// ("ab", "c") and ("a", "bc") hash differently. A Hash is not safe for
// concurrent use, and must not be used after [Hash.Sum].
type Hash struct {
	pool    *sync.Pool // where Sum returns the Hash; nil: nowhere
	mac     hash.Hash
	state   []byte // SHA-256: the keyed state reset restores; nil for BLAKE2b
	scratch [binary.MaxVarintLen64]byte
	out     [sha256.Size]byte
	block   [sha256.BlockSize]byte // SHA-256 TokenKey: the sub-key block
	dst     reflect.Value          // BLAKE2b TokenKeyer: the digest value mac points to
}

// reset returns h to its keyed initial state: the secret (or sub-key)
// already absorbed, nothing written yet.
func (h *Hash) reset() {
	if h.state == nil {
		h.mac.Reset() // keyed BLAKE2b: Reset keeps the key
		return
	}
	if err := h.mac.(encoding.BinaryUnmarshaler).UnmarshalBinary(h.state); err != nil {
		panic("cache: restoring the keyed SHA-256 state: " + err.Error())
	}
}

// WriteUint64 writes v in a fixed 8-byte encoding.
func (h *Hash) WriteUint64(v uint64) {
	binary.BigEndian.PutUint64(h.scratch[:8], v)
	h.mac.Write(h.scratch[:8])
}

// WriteByte writes one byte (a tag or a flag). It never fails; it returns an
// error only to satisfy io.ByteWriter.
func (h *Hash) WriteByte(b byte) error {
	h.scratch[0] = b
	h.mac.Write(h.scratch[:1])
	return nil
}

// WriteString writes s, prefixed with its length. It does not copy s.
func (h *Hash) WriteString(s string) {
	h.WriteUint64(uint64(len(s)))
	if len(s) > 0 {
		// The MAC reads the bytes and retains nothing: no copy needed.
		h.mac.Write(unsafe.Slice(unsafe.StringData(s), len(s)))
	}
}

// WriteStrings writes the number of strings, then each one length-prefixed.
func (h *Hash) WriteStrings(ss []string) {
	h.WriteUint64(uint64(len(ss)))
	for _, s := range ss {
		h.WriteString(s)
	}
}

// Sum returns the key for everything written and returns h to its pool.
// h must not be used afterwards.
func (h *Hash) Sum() Key {
	var k Key
	copy(k[:], h.mac.Sum(h.out[:0]))
	if h.pool != nil {
		h.pool.Put(h)
	}
	return k
}
