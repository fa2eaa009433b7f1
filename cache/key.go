package cache

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"hash"
	"sync"
	"unsafe"
)

// Key is a cache key: the 32-byte output of a [Keyer]'s keyed SHA-256.
type Key [32]byte

// Keyer derives [Key]s with SHA-256 keyed by a 64-byte secret drawn from
// crypto/rand when the Keyer is created: Key = SHA-256(secret || encoding),
// where the secret fills exactly one SHA-256 block and the encoding is
// prefix-free (every string is length-prefixed, every list count-prefixed,
// so no encoding is a proper prefix of another). On prefix-free inputs this
// keyed Merkle-Damgard cascade is a pseudorandom function (Bellare, Canetti
// and Krawczyk, "Pseudorandom functions revisited: the cascade construction
// and its concrete security", FOCS 1996), which is what a cache key needs:
// keys are unpredictable to anyone without the secret, and two different
// inputs collide only with negligible probability. It does what HMAC-SHA-256
// does for this use at the cost of one SHA-256 pass instead of HMAC's
// second, outer pass (BenchmarkTokenKey); keys never leave the process, so
// HMAC's protection against length extension of a published tag is not
// needed. The secret's block is hashed once, when the Keyer is created.
// Token keys are keyed the same way, in two levels (see [Keyer.TokenKey]):
// the audiences first derive a sub-key, which then keys the token.
//
// Keys are stable for the life of one Keyer and unrelated across Keyers
// (and across processes), so an attacker who can choose inputs cannot
// predict or collide cache keys.
//
// A Keyer is safe for concurrent use. The zero value is not usable; call
// [NewKeyer].
type Keyer struct {
	state []byte // SHA-256 state after the secret block
	pool  sync.Pool
}

// NewKeyer returns a Keyer with a fresh random key. It panics only if the
// system's random source fails, as crypto/rand itself does.
func NewKeyer() *Keyer {
	secret := make([]byte, sha256.BlockSize)
	if _, err := rand.Read(secret); err != nil {
		panic("cache: reading random key: " + err.Error())
	}
	d := sha256.New()
	d.Write(secret)
	state, err := d.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic("cache: saving the keyed SHA-256 state: " + err.Error())
	}
	k := &Keyer{state: state}
	k.pool.New = func() any {
		return &Hash{keyer: k, mac: sha256.New()}
	}
	return k
}

// TokenKey returns the key for a bearer token reviewed for audiences. It
// is a two-level keyed hash: a sub-key is derived from the audiences
// (count-prefixed, each length-prefixed, in the order given), and the key is
// SHA-256 of that sub-key's block followed by the length-prefixed token.
// Callers that treat audiences as a set should pass them in a canonical
// order. TokenKey does not allocate. When the audiences are fixed,
// [Keyer.ForAudiences] derives the sub-key once, and computes the same key
// in one SHA-256 pass over the token alone: no more blocks than hashing the
// bare token.
func (k *Keyer) TokenKey(token string, audiences []string) Key {
	h := k.pool.Get().(*Hash)
	h.block = k.audienceKey(audiences)
	h.mac.Reset()
	h.mac.Write(h.block[:])
	return h.finishToken(token)
}

// audienceKey returns the SHA-256 block that keys the tokens of audiences:
// a sub-key derived under the Keyer's secret, then a domain tag.
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
	sub := k.audienceKey(audiences)
	d := sha256.New()
	d.Write(sub[:])
	state, err := d.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic("cache: saving the keyed SHA-256 state: " + err.Error())
	}
	return &TokenKeyer{keyer: k, state: state}
}

// TokenKeyer derives token keys for one fixed set of audiences. It is safe
// for concurrent use.
type TokenKeyer struct {
	keyer *Keyer
	state []byte // SHA-256 state after the audiences' sub-key block
}

// Key returns the key of token, as [Keyer.TokenKey] with the TokenKeyer's
// audiences. It does not allocate, and hashes only the token and its
// varint length.
func (t *TokenKeyer) Key(token string) Key {
	h := t.keyer.pool.Get().(*Hash)
	if err := h.mac.(encoding.BinaryUnmarshaler).UnmarshalBinary(t.state); err != nil {
		panic("cache: restoring the keyed SHA-256 state: " + err.Error())
	}
	return h.finishToken(token)
}

// NewHash returns a pooled keyed hash, ready for writes. Finish it with
// [Hash.Sum], which returns it to the pool.
func (k *Keyer) NewHash() *Hash {
	h := k.pool.Get().(*Hash)
	if err := h.mac.(encoding.BinaryUnmarshaler).UnmarshalBinary(k.state); err != nil {
		panic("cache: restoring the keyed SHA-256 state: " + err.Error())
	}
	return h
}

// Hash accumulates a length-prefixed encoding of its inputs under its
// [Keyer]'s secret. Callers must write a self-delimiting sequence (a fixed
// schema of WriteString, WriteStrings, WriteUint64 and WriteByte calls), so
// that the encoding stays prefix-free. Every write is prefixed with its length, so
// ("ab", "c") and ("a", "bc") hash differently. A Hash is not safe for
// concurrent use, and must not be used after [Hash.Sum].
type Hash struct {
	keyer   *Keyer
	mac     hash.Hash
	scratch [binary.MaxVarintLen64]byte
	out     [sha256.Size]byte
	block   [sha256.BlockSize]byte
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

// Sum returns the key for everything written and returns h to its Keyer's
// pool. h must not be used afterwards.
func (h *Hash) Sum() Key {
	var k Key
	copy(k[:], h.mac.Sum(h.out[:0]))
	h.keyer.pool.Put(h)
	return k
}
