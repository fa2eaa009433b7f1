package cache

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"sync"
	"unsafe"
)

// Key is a cache key: the 32-byte output of a [Keyer]'s HMAC-SHA-256.
type Key [32]byte

// Keyer derives [Key]s with HMAC-SHA-256 under a key drawn from crypto/rand
// when the Keyer is created. Keys are stable for the life of one Keyer and
// unrelated across Keyers (and across processes), so an attacker who can
// choose inputs cannot predict or collide cache keys.
//
// A Keyer is safe for concurrent use. The zero value is not usable; call
// [NewKeyer].
type Keyer struct {
	pool sync.Pool
}

// NewKeyer returns a Keyer with a fresh random key. It panics only if the
// system's random source fails, as crypto/rand itself does.
func NewKeyer() *Keyer {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		panic("cache: reading random key: " + err.Error())
	}
	k := &Keyer{}
	k.pool.New = func() any {
		return &Hash{keyer: k, mac: hmac.New(sha256.New, secret)}
	}
	return k
}

// TokenKey returns the key for a bearer token reviewed for audiences. The
// token and every audience are length-prefixed, and the audiences are hashed
// in the order given: callers that treat audiences as a set should pass them
// in a canonical order. TokenKey does not allocate.
func (k *Keyer) TokenKey(token string, audiences []string) Key {
	h := k.NewHash()
	h.WriteString(token)
	h.WriteStrings(audiences)
	return h.Sum()
}

// NewHash returns a pooled keyed hash, ready for writes. Finish it with
// [Hash.Sum], which returns it to the pool.
func (k *Keyer) NewHash() *Hash {
	h := k.pool.Get().(*Hash)
	h.mac.Reset()
	return h
}

// Hash accumulates a length-prefixed encoding of its inputs under its
// [Keyer]'s secret. Every write is prefixed with its length, so
// ("ab", "c") and ("a", "bc") hash differently. A Hash is not safe for
// concurrent use, and must not be used after [Hash.Sum].
type Hash struct {
	keyer   *Keyer
	mac     hash.Hash
	scratch [binary.MaxVarintLen64]byte
	out     [sha256.Size]byte
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
