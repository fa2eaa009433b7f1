package cache

import (
	"encoding/binary"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Tags of the canonical encoding of authorizer attributes.
const (
	attrVersion     = 1 // bump when the encoding changes
	attrNoUser      = 0
	attrUser        = 1
	attrResource    = 1
	attrNonResource = 2
	attrAll         = 3 // every attribute (not a SubjectAccessReview's)
)

// AttributeEncoder appends the canonical encoding of [authorizer.Attributes],
// from which the authorizer cache derives its keys. The encoding is
// injective on what it covers: every string is prefixed with its length and
// every list with its count (uvarints), in a fixed field order, so two
// attribute sets that differ in anything covered but the order of groups
// (a set, to the API server) or of extra keys encode differently.
//
// What is covered depends on SubjectAccessReview:
//
//   - false (any authorizer): every attribute an authorizer can read: the
//     user (name, UID, groups sorted, extra keys sorted with each key's
//     values in order), IsResourceRequest, IsReadOnly, the path, the verb,
//     every resource attribute, and every field and label selector
//     requirement with its operator as given, and any selector parse error.
//   - true: exactly what the authorization.k8s.io/v1 SubjectAccessReview
//     built from the attributes carries (see authz): the user, then for a
//     non-resource request the path and verb only, for a resource request
//     the resource attributes and the selector requirements a review can
//     express, with the operators mapped as [SARFieldOperator] and
//     [SARLabelOperator] map them (others dropped, as the review drops
//     them). Two attribute sets encode the same exactly when they make the
//     same review. Only for an authorizer that decides on that review.
//
// Extras named in Ignored are left out of either encoding.
//
// An AttributeEncoder is read-only after it is built and safe for concurrent
// use. Append does not allocate when b has room, unless the user has more
// than 32 groups or 16 extra keys.
type AttributeEncoder struct {
	// Ignored lists user extra keys left out of the encoding.
	Ignored []string
	// SubjectAccessReview encodes what a SubjectAccessReview carries rather
	// than every attribute.
	SubjectAccessReview bool
}

// ignores reports whether the extra key is left out of the encoding. The
// list is short (one key for authz): a linear scan of string compares
// costs less than hashing the key for a map lookup.
func (e *AttributeEncoder) ignores(key string) bool {
	for _, x := range e.Ignored {
		if x == key {
			return true
		}
	}
	return false
}

// sortBuf is the number of groups (and half of it the number of extra keys)
// sorted on the stack when encoding; longer lists cost one allocation.
const sortBuf = 32

type extraKV struct {
	key    string
	values []string
}

// Append appends the canonical encoding of a to b.
func (e *AttributeEncoder) Append(b []byte, a authorizer.Attributes) []byte {
	b = append(b, attrVersion)
	if u := a.GetUser(); u == nil {
		b = append(b, attrNoUser)
	} else {
		b = append(b, attrUser)
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
		var kvBuf [sortBuf / 2]extraKV
		kvs := kvBuf[:0]
		for key, v := range u.GetExtra() {
			if !e.ignores(key) {
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
	if !e.SubjectAccessReview {
		return appendAll(b, a)
	}
	if !a.IsResourceRequest() {
		b = append(b, attrNonResource)
		b = appendString(b, a.GetPath())
		return appendString(b, a.GetVerb())
	}
	b = append(b, attrResource)
	// appendResource, by hand: a call here costs about 5% of a cache hit
	// (BenchmarkSARHit), and the compiler does not inline it.
	b = appendString(b, a.GetNamespace())
	b = appendString(b, a.GetVerb())
	b = appendString(b, a.GetAPIGroup())
	b = appendString(b, a.GetAPIVersion())
	b = appendString(b, a.GetResource())
	b = appendString(b, a.GetSubresource())
	b = appendString(b, a.GetName())

	// Selectors exactly as a SubjectAccessReview carries them: the count
	// of kept requirements, then each one.
	fieldReqs, _ := a.GetFieldSelector()
	n := 0
	for _, r := range fieldReqs {
		if _, ok := SARFieldOperator(r.Operator); ok {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for _, r := range fieldReqs {
		op, ok := SARFieldOperator(r.Operator)
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
		if _, ok := SARLabelOperator(labelReqs[i].Operator()); ok {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for i := range labelReqs {
		op, ok := SARLabelOperator(labelReqs[i].Operator())
		if !ok {
			continue
		}
		b = appendString(b, labelReqs[i].Key())
		b = appendString(b, string(op))
		b = appendStrings(b, labelReqs[i].ValuesUnsorted())
	}
	return b
}

// appendResource appends the resource attributes of a.
func appendResource(b []byte, a authorizer.Attributes) []byte {
	b = appendString(b, a.GetNamespace())
	b = appendString(b, a.GetVerb())
	b = appendString(b, a.GetAPIGroup())
	b = appendString(b, a.GetAPIVersion())
	b = appendString(b, a.GetResource())
	b = appendString(b, a.GetSubresource())
	return appendString(b, a.GetName())
}

// appendAll appends every attribute of a but the user, selectors with their
// operators as given and their parse errors.
func appendAll(b []byte, a authorizer.Attributes) []byte {
	var flags byte
	if a.IsResourceRequest() {
		flags |= 1
	}
	if a.IsReadOnly() {
		flags |= 2
	}
	b = append(b, attrAll, flags)
	b = appendString(b, a.GetPath())
	b = appendResource(b, a)
	fieldReqs, err := a.GetFieldSelector()
	b = appendError(b, err)
	b = binary.AppendUvarint(b, uint64(len(fieldReqs)))
	for _, r := range fieldReqs {
		b = appendString(b, r.Field)
		b = appendString(b, string(r.Operator))
		b = appendString(b, r.Value)
	}
	labelReqs, err := a.GetLabelSelector()
	b = appendError(b, err)
	b = binary.AppendUvarint(b, uint64(len(labelReqs)))
	for i := range labelReqs {
		b = appendString(b, labelReqs[i].Key())
		b = appendString(b, string(labelReqs[i].Operator()))
		b = appendStrings(b, labelReqs[i].ValuesUnsorted())
	}
	return b
}

// appendError appends whether err is set, and its message.
func appendError(b []byte, err error) []byte {
	if err == nil {
		return append(b, 0)
	}
	return appendString(append(b, 1), err.Error())
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

// AttributeBytes returns the size of the attributes of a that the caller
// controls: everything k8s.io/apiserver's webhook authorizer counts
// (namespace, verb, group, version, resource, subresource, name, path),
// plus the field and label selectors it forgets (kubernetes#141457): those
// of a resource request, or, unless sarOnly, of any request, with their
// parse errors. User data is not counted: it comes from the authenticator,
// not from the request.
func AttributeBytes(a authorizer.Attributes, sarOnly bool) int {
	n := len(a.GetNamespace()) + len(a.GetVerb()) + len(a.GetAPIGroup()) +
		len(a.GetAPIVersion()) + len(a.GetResource()) + len(a.GetSubresource()) +
		len(a.GetName()) + len(a.GetPath())
	if sarOnly && !a.IsResourceRequest() {
		return n
	}
	fieldReqs, ferr := a.GetFieldSelector()
	for _, r := range fieldReqs {
		n += len(r.Field) + len(r.Operator) + len(r.Value)
	}
	labelReqs, lerr := a.GetLabelSelector()
	for i := range labelReqs {
		n += labelRequirementBytes(&labelReqs[i])
	}
	if !sarOnly {
		for _, err := range []error{ferr, lerr} {
			if err != nil {
				n += len(err.Error())
			}
		}
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

// SARFieldOperator maps a field selector operator to the one a
// SubjectAccessReview carries, as k8s.io/apiserver's webhook authorizer
// does: field selectors have only In and NotIn there (the same strings as
// the label operators). ok is false for an operator a review cannot carry;
// the review drops such a requirement (requirements are ANDed, so dropping
// one only widens the check).
func SARFieldOperator(op selection.Operator) (_ metav1.FieldSelectorOperator, ok bool) {
	switch lo, ok := SARLabelOperator(op); {
	case ok && (lo == metav1.LabelSelectorOpIn || lo == metav1.LabelSelectorOpNotIn):
		return metav1.FieldSelectorOperator(lo), true
	}
	return "", false
}

// SARLabelOperator maps a label selector operator to the one a
// SubjectAccessReview carries; ok is false for one it cannot carry
// (GreaterThan, LessThan), which the review drops.
func SARLabelOperator(op selection.Operator) (_ metav1.LabelSelectorOperator, ok bool) {
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

// maxPooledKeyBuf bounds the encoding buffers kept for reuse, so that one
// huge request does not pin a huge buffer.
const maxPooledKeyBuf = 64 << 10

var keyBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// GetKeyBuf returns a pooled buffer for an encoding; [PutKeyBuf] returns
// it, with the encoding it grew into.
func GetKeyBuf() *[]byte { return keyBufPool.Get().(*[]byte) }

// PutKeyBuf returns bp to the pool, keeping b's (possibly grown) storage,
// unless b is too large to keep.
func PutKeyBuf(bp *[]byte, b []byte) {
	if cap(b) <= maxPooledKeyBuf {
		*bp = b[:0]
		keyBufPool.Put(bp)
	}
}

// Encode returns the encoding of a as a new string.
func (e *AttributeEncoder) Encode(a authorizer.Attributes) string {
	bp := GetKeyBuf()
	b := e.Append((*bp)[:0], a)
	enc := string(b)
	PutKeyBuf(bp, b)
	return enc
}
