package authz

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"strings"
	"sync"

	"k8s.io/apiserver/pkg/authentication/user"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/internal/cache"
)

// CredentialIDExtra is the user extra in which the API server names the
// credential a request was authenticated with: "JTI=<token ID>" for a
// bound service-account token, "X509SHA256=<fingerprint>" for a client
// certificate. It differs for every token a client mints, so it is left out
// of the cache key by default (see [Options.CacheKeyIgnoredExtras]). It is
// k8s.io/apiserver's user.CredentialIDKey.
const CredentialIDExtra = user.CredentialIDKey

// Tags of the canonical encoding of a review (see [keys]).
const (
	tagVersion     = 1 // bump when the encoding changes
	tagNoUser      = 0
	tagUser        = 1
	tagResource    = 1
	tagNonResource = 2
)

// sarSpec builds the spec of the SubjectAccessReview that asks about a, the
// way k8s.io/apiserver's webhook authorizer does: selectors are sent as
// authorization.k8s.io/v1 requirements, with operators the API does not know
// dropped (requirements are ANDed, so dropping one only widens the check),
// and a selector that failed to parse is sent without the requirements that
// could not be parsed.
func sarSpec(a authorizer.Attributes) authorizationv1.SubjectAccessReviewSpec {
	var spec authorizationv1.SubjectAccessReviewSpec
	if u := a.GetUser(); u != nil {
		spec.User = u.GetName()
		spec.UID = u.GetUID()
		spec.Groups = slices.Clone(u.GetGroups())
		if extra := u.GetExtra(); extra != nil {
			spec.Extra = make(map[string]authorizationv1.ExtraValue, len(extra))
			for k, v := range extra {
				spec.Extra[k] = authorizationv1.ExtraValue(slices.Clone(v))
			}
		}
	}
	if !a.IsResourceRequest() {
		spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{
			Path: a.GetPath(),
			Verb: a.GetVerb(),
		}
		return spec
	}
	ra := &authorizationv1.ResourceAttributes{
		Namespace:   a.GetNamespace(),
		Verb:        a.GetVerb(),
		Group:       a.GetAPIGroup(),
		Version:     a.GetAPIVersion(),
		Resource:    a.GetResource(),
		Subresource: a.GetSubresource(),
		Name:        a.GetName(),
	}
	fieldReqs, _ := a.GetFieldSelector()
	var frs []metav1.FieldSelectorRequirement
	for _, r := range fieldReqs {
		op, ok := fieldOp(r.Operator)
		if !ok {
			continue
		}
		frs = append(frs, metav1.FieldSelectorRequirement{Key: r.Field, Operator: op, Values: []string{r.Value}})
	}
	if len(frs) > 0 {
		ra.FieldSelector = &authorizationv1.FieldSelectorAttributes{Requirements: frs}
	}
	labelReqs, _ := a.GetLabelSelector()
	var lrs []metav1.LabelSelectorRequirement
	for _, r := range labelReqs {
		op, ok := labelOp(r.Operator())
		if !ok {
			continue
		}
		lr := metav1.LabelSelectorRequirement{Key: r.Key(), Operator: op}
		if vs := r.ValuesUnsorted(); len(vs) > 0 {
			lr.Values = vs
		}
		lrs = append(lrs, lr)
	}
	if len(lrs) > 0 {
		ra.LabelSelector = &authorizationv1.LabelSelectorAttributes{Requirements: lrs}
	}
	spec.ResourceAttributes = ra
	return spec
}

// fieldOp is labelOp for field selectors, which have only In and NotIn
// (the same strings as the label operators).
func fieldOp(op selection.Operator) (metav1.FieldSelectorOperator, bool) {
	switch lo, ok := labelOp(op); {
	case ok && (lo == metav1.LabelSelectorOpIn || lo == metav1.LabelSelectorOpNotIn):
		return metav1.FieldSelectorOperator(lo), true
	}
	return "", false
}

func labelOp(op selection.Operator) (metav1.LabelSelectorOperator, bool) {
	switch op {
	case selection.Equals, selection.DoubleEquals, selection.In:
		return metav1.LabelSelectorOpIn, true
	case selection.NotEquals, selection.NotIn:
		return metav1.LabelSelectorOpNotIn, true
	case selection.Exists:
		return metav1.LabelSelectorOpExists, true
	case selection.DoesNotExist:
		return metav1.LabelSelectorOpDoesNotExist, true
	}
	return "", false
}

// attributeBytes returns the size of the attributes of a that the caller
// controls: everything k8s.io/apiserver's webhook counts, plus the field and
// label selectors it forgets (kubernetes#141457). User data is not counted:
// it comes from the authenticator, not from the request.
func attributeBytes(a authorizer.Attributes) int {
	n := len(a.GetNamespace()) + len(a.GetVerb()) + len(a.GetAPIGroup()) +
		len(a.GetAPIVersion()) + len(a.GetResource()) + len(a.GetSubresource()) +
		len(a.GetName()) + len(a.GetPath())
	if !a.IsResourceRequest() {
		return n
	}
	fieldReqs, _ := a.GetFieldSelector()
	for _, r := range fieldReqs {
		n += len(r.Field) + len(r.Operator) + len(r.Value)
	}
	labelReqs, _ := a.GetLabelSelector()
	for i := range labelReqs {
		n += labelRequirementBytes(&labelReqs[i])
	}
	return n
}

func labelRequirementBytes(r *labels.Requirement) int {
	n := len(r.Key()) + len(r.Operator())
	for _, v := range r.ValuesUnsorted() {
		n += len(v)
	}
	return n
}

// sortBuf is the number of groups (and half of it the number of extra keys)
// sorted on the stack when encoding; longer lists cost one allocation.
const sortBuf = 32

// maxPooledKeyBuf bounds the encoding buffers kept for reuse, so that one
// huge request does not pin a huge buffer.
const maxPooledKeyBuf = 64 << 10

var keyBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// The cache keys of an [Authorizer].
//
// Every review is first encoded canonically (appendKey): user name, UID,
// groups sorted (the API server treats them as a set), extra keys sorted
// with each key's values in order, then every attribute the spec carries,
// selectors included. Every string is prefixed with its length and every
// list with its count (uvarints), in a fixed field order, so the encoding
// is injective: two specs that differ in anything but the order of groups
// or of extra keys encode differently.
//
// Extras named in [Options.CacheKeyIgnoredExtras] (by default
// [CredentialIDExtra], which differs for every token) are left out of the
// encoding, so that callers who differ only in them share an entry; the
// review sent to the API server still carries every extra.
//
// Two keys are derived from the encoding:
//
//   - the lookup key (keys.lookup) locates the cache entry: two 64-bit
//     hash/maphash sums under random per-Authorizer seeds. It is fast but
//     not collision-resistant, so every entry stores the full encoding and
//     a hit counts only if the stored encoding equals the request's (a
//     full-key compare on every hit). A collision can only cost a miss.
//   - the review key (keys.review) coalesces concurrent misses in a
//     cache.Group, where a collision would hand one review's answer to
//     another: it is a PRF keyed by a random per-process secret
//     (cache.Keyer), computed on misses only.
type keys struct {
	seed1, seed2 maphash.Seed
	keyer        *cache.Keyer
	ignored      []string // extra keys left out of the encoding, no duplicates
	collide      bool     // tests only: every encoding gets the same lookup key
}

// newKeys returns keys that leave the extras named in ignored out of the
// encoding; nil ignored means [CredentialIDExtra].
func newKeys(ignored []string) keys {
	if ignored == nil {
		ignored = []string{CredentialIDExtra}
	}
	k := keys{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(), keyer: cache.NewKeyer()}
	for _, x := range ignored {
		if !slices.Contains(k.ignored, x) {
			k.ignored = append(k.ignored, x)
		}
	}
	return k
}

// ignores reports whether the extra key is left out of the encoding. The
// list is short (one key by default): a linear scan of string compares
// costs less than hashing the key for a map lookup.
func (k *keys) ignores(key string) bool {
	for _, x := range k.ignored {
		if x == key {
			return true
		}
	}
	return false
}

// lookup returns the lookup key of the encoding enc.
func (k *keys) lookup(enc []byte) cache.Key {
	var key cache.Key
	if k.collide {
		return key
	}
	binary.LittleEndian.PutUint64(key[:8], maphash.Bytes(k.seed1, enc))
	binary.LittleEndian.PutUint64(key[8:16], maphash.Bytes(k.seed2, enc))
	return key
}

// review returns the review key of the encoding enc.
func (k *keys) review(enc string) cache.Key {
	h := k.keyer.NewHash()
	h.WriteString(enc)
	return h.Sum()
}

// getKeyBuf returns a pooled buffer for an encoding; putKeyBuf returns it.
func getKeyBuf() *[]byte { return keyBufPool.Get().(*[]byte) }

func putKeyBuf(bp *[]byte, b []byte) {
	if cap(b) <= maxPooledKeyBuf {
		*bp = b[:0]
		keyBufPool.Put(bp)
	}
}

// encodeKey returns the canonical encoding of the review of a, leaving out
// the extras named in ignored (nil: [CredentialIDExtra]), as a new string.
func encodeKey(a authorizer.Attributes, ignored []string) string {
	k := keys{ignored: ignored}
	if ignored == nil {
		k.ignored = []string{CredentialIDExtra}
	}
	bp := getKeyBuf()
	b := k.appendKey((*bp)[:0], a)
	enc := string(b)
	putKeyBuf(bp, b)
	return enc
}

// appendKey appends the canonical encoding of the review of a to b.
func (k *keys) appendKey(b []byte, a authorizer.Attributes) []byte {
	b = append(b, tagVersion)
	if u := a.GetUser(); u == nil {
		b = append(b, tagNoUser)
	} else {
		b = append(b, tagUser)
		b = appendString(b, u.GetName())
		b = appendString(b, u.GetUID())

		var buf [sortBuf]string
		groups := u.GetGroups()
		if !slices.IsSorted(groups) {
			groups = append(buf[:0], groups...)
			slices.Sort(groups)
		}
		b = appendStrings(b, groups)

		// The count of kept extra keys, then each kept key and its values.
		extra := u.GetExtra()
		var kvBuf [sortBuf / 2]extraKV
		kvs := kvBuf[:0]
		for key, v := range extra {
			if !k.ignores(key) {
				kvs = append(kvs, extraKV{key, v})
			}
		}
		if len(kvs) > 1 {
			slices.SortFunc(kvs, func(x, y extraKV) int { return strings.Compare(x.key, y.key) })
		}
		b = binary.AppendUvarint(b, uint64(len(kvs)))
		for _, kv := range kvs {
			b = appendString(b, kv.key)
			b = appendStrings(b, kv.values)
		}
	}
	if !a.IsResourceRequest() {
		b = append(b, tagNonResource)
		b = appendString(b, a.GetPath())
		return appendString(b, a.GetVerb())
	}
	b = append(b, tagResource)
	b = appendString(b, a.GetNamespace())
	b = appendString(b, a.GetVerb())
	b = appendString(b, a.GetAPIGroup())
	b = appendString(b, a.GetAPIVersion())
	b = appendString(b, a.GetResource())
	b = appendString(b, a.GetSubresource())
	b = appendString(b, a.GetName())

	// Selectors exactly as sarSpec sends them: the count of kept
	// requirements, then each one.
	fieldReqs, _ := a.GetFieldSelector()
	n := 0
	for _, r := range fieldReqs {
		if _, ok := fieldOp(r.Operator); ok {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for _, r := range fieldReqs {
		op, ok := fieldOp(r.Operator)
		if !ok {
			continue
		}
		b = appendString(b, r.Field)
		b = appendString(b, string(op))
		b = binary.AppendUvarint(b, 1)
		b = appendString(b, r.Value)
	}
	labelReqs, _ := a.GetLabelSelector()
	n = 0
	for i := range labelReqs {
		if _, ok := labelOp(labelReqs[i].Operator()); ok {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for i := range labelReqs {
		op, ok := labelOp(labelReqs[i].Operator())
		if !ok {
			continue
		}
		b = appendString(b, labelReqs[i].Key())
		b = appendString(b, string(op))
		b = appendStrings(b, labelReqs[i].ValuesUnsorted())
	}
	return b
}

type extraKV struct {
	key    string
	values []string
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}
