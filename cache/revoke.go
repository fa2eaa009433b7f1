package cache

import (
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/reviewauth/reviewauth"
	icache "github.com/reviewauth/reviewauth/internal/cache"
)

// Defaults of the revocation fields of [TokenOptions].
const (
	// DefaultRevocationRetention is how long [TokenAuthenticator.Revoke]
	// keeps refusing identities bound to a revoked UID. The API server
	// itself keeps accepting a deleted pod's or service account's token
	// for up to 10 s after the delete (kube-apiserver v1.37.2 caches token
	// authentications for a fixed 10 s), so forgetting alone would let the
	// next review bring the identity back; past that, the API server
	// refuses the token on its own. One minute is six times that window,
	// with room for an API server that answers from a lagging cache, and
	// equals [DefaultSuccessTTL], the window a revoked token has without
	// revocation. Refusing longer is never wrong (pod, node and service
	// account UIDs are never reused); it only costs memory, bounded by
	// [DefaultMaxRevoked].
	DefaultRevocationRetention = time.Minute

	// DefaultMaxRevoked bounds how many revoked UIDs a
	// [TokenAuthenticator] remembers: at about 150 bytes each, 4096 take
	// some 600 KiB. A node runs at most a few hundred pods; when more UIDs
	// than this are revoked within the retention, the oldest are forgotten
	// early (and then refused by the API server itself once its own cache
	// has let go, at most 10 s after their deletion).
	DefaultMaxRevoked = 4096
)

// The extras of a service-account token that name the objects it is bound
// to (k8s.io/apiserver's serviceaccount package). The ServiceAccount's own
// UID is the user's UID.
var boundUIDExtras = [...]string{serviceaccount.PodUIDKey, serviceaccount.NodeUIDKey}

// boundUIDs returns the UIDs u is bound to: its UID and the values of its
// pod-uid and node-uid extras, without empty ones.
func boundUIDs(u user.Info) []string {
	var uids []string
	if uid := u.GetUID(); uid != "" {
		uids = append(uids, uid)
	}
	extra := u.GetExtra()
	for _, k := range boundUIDExtras {
		for _, v := range extra[k] {
			if v != "" {
				uids = append(uids, v)
			}
		}
	}
	return uids
}

// revocations is a [TokenAuthenticator]'s record of revoked UIDs: a bounded
// LRU of keyed hashes of UIDs, each kept for the retention, and a
// generation that every Revoke moves. mu orders Revoke against the stores
// of reviews in flight: a review stores an identity under mu's read lock
// only if none of its UIDs is revoked and the generation has not moved
// since the review started, and Revoke records UIDs and moves the
// generation under its write lock before it forgets cached identities. So
// an identity is either refused or kept out by its review, or stored
// before Revoke's sweep, which removes it; and a review in flight across a
// Revoke is never cached, even when the retention is disabled or its UID
// has already been forgotten.
type revocations struct {
	mu        sync.RWMutex
	uids      *icache.Cache[struct{}] // nil: retention disabled
	keyer     *icache.Keyer
	retention time.Duration
	any       atomic.Bool   // a UID was ever recorded: checks cost nothing until then
	gen       atomic.Uint64 // moved by every Revoke
}

func (r *revocations) init(keyer *icache.Keyer, opts *TokenOptions) {
	r.keyer = keyer
	r.retention = opts.RevocationRetention
	if r.retention > 0 {
		r.uids = icache.New[struct{}](icache.Options{MaxEntries: opts.MaxRevoked, Clock: opts.Clock})
	}
}

// key returns the key of uid in r.uids.
func (r *revocations) key(uid string) icache.Key {
	h := r.keyer.NewHash()
	_ = h.WriteByte('R') // apart from any other use of the Keyer
	h.WriteString(uid)
	return h.Sum()
}

// record remembers uids as revoked and moves the generation, under mu.
func (r *revocations) record(uids []types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen.Add(1)
	if r.uids == nil {
		return
	}
	for _, uid := range uids {
		if uid != "" {
			r.uids.Set(r.key(string(uid)), struct{}{}, r.retention)
			r.any.Store(true)
		}
	}
}

// revoked reports whether one of uids is remembered as revoked. The caller
// holds mu's read lock when the answer decides a store.
func (r *revocations) revoked(uids []string) bool {
	if !r.any.Load() {
		return false
	}
	for _, uid := range uids {
		if _, ok := r.uids.Peek(r.key(uid)); ok {
			return true
		}
	}
	return false
}

// errRevoked is the rejection of an identity bound to a revoked UID.
var errRevoked = &reviewauth.RejectedError{Reason: "the token is bound to an object that was deleted"}

// Revoke forgets every cached identity bound to one of uids and refuses,
// for [TokenOptions].RevocationRetention, any identity bound to them that a
// review in flight or a later review returns: such a review is a rejection
// (an error matching reviewauth.ErrUnauthenticated), cached as one. An
// identity is bound to a UID when its user.Info's GetUID() equals it (a
// ServiceAccount's UID) or its extra "authentication.kubernetes.io/pod-uid"
// or "authentication.kubernetes.io/node-uid" holds it. A revoked identity
// is never served stale-if-error. Empty UIDs are ignored.
//
// When Revoke returns, no call that starts afterwards is answered with a
// revoked identity while its UID is remembered: the cache no longer holds
// it, and a review that returns it, even one in flight, is refused. Calls
// that run concurrently with Revoke may still see it. Revoke walks the
// identity cache once (at most MaxEntries identities) and starts no
// goroutine. It is safe for concurrent use.
func (c *TokenAuthenticator) Revoke(uids ...types.UID) {
	uids = slices.DeleteFunc(slices.Clone(uids), func(u types.UID) bool { return u == "" })
	if len(uids) == 0 {
		return
	}
	c.revoked.record(uids)
	c.ok.DeleteFunc(func(id *identity) bool {
		for _, b := range id.bound {
			if slices.Contains(uids, types.UID(b)) {
				return true
			}
		}
		return false
	})
}

// forgetting is an [Authorizer]'s record of forgotten decisions, which
// makes decisions in flight uncacheable: a generation per user (in one of
// a fixed number of slots, by a hash of the name) and one for all. A shared
// call reads the generation of its user before it asks the wrapped
// authorizer, and stores the decision under mu's read lock only if the
// generation has not moved; ForgetUser and ForgetAll move it under mu's
// write lock before they sweep the cache. A forget thus either finds the
// decision in the cache or keeps it out. Two users in one slot only cost
// an extra call now and then.
type forgetting struct {
	mu   sync.RWMutex
	seed maphash.Seed
	all  atomic.Uint64
	user [64]atomic.Uint64
}

func (f *forgetting) slot(name string) *atomic.Uint64 {
	return &f.user[maphash.String(f.seed, name)%uint64(len(f.user))]
}

// generation returns the generation of decisions about user name.
func (f *forgetting) generation(name string) uint64 {
	return f.all.Load() + f.slot(name).Load()
}

// ForgetUser forgets every cached decision about the user named name (the
// attributes' GetUser().GetName()), stale ones included, and makes the
// decisions in flight for that user uncacheable: they are returned to the
// callers waiting for them, and not cached. When ForgetUser returns, no
// call that starts afterwards is answered from a decision made before it.
// It walks the cache once (at most MaxEntries decisions) and starts no
// goroutine. It is safe for concurrent use.
func (a *Authorizer) ForgetUser(name string) {
	a.forget.mu.Lock()
	a.forget.slot(name).Add(1)
	a.forget.mu.Unlock()
	a.cache.DeleteFunc(func(d decision) bool { return d.user == name })
}

// ForgetAll forgets every cached decision and makes every decision in
// flight uncacheable, as [Authorizer.ForgetUser] does for one user. It is
// safe for concurrent use.
func (a *Authorizer) ForgetAll() {
	a.forget.mu.Lock()
	a.forget.all.Add(1)
	a.forget.mu.Unlock()
	a.cache.DeleteFunc(nil)
}
