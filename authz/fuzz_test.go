package authz_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/internal/attrdesc"
)

// canonicalSpec is the SubjectAccessReview spec for a, in a form where two
// specs the API server cannot tell apart are deeply equal: groups sorted (a
// set), and empty lists and maps as nil; the extras named in ignored are
// dropped.
func canonicalSpec(a authorizer.Attributes, ignored ...string) authorizationv1.SubjectAccessReviewSpec {
	spec := authz.SARSpec(a)
	for _, k := range ignored {
		delete(spec.Extra, k)
	}
	slices.Sort(spec.Groups)
	for k, v := range spec.Extra {
		if len(v) == 0 {
			spec.Extra[k] = nil
		}
	}
	if len(spec.Groups) == 0 {
		spec.Groups = nil
	}
	if len(spec.Extra) == 0 {
		spec.Extra = nil
	}
	return spec
}

// FuzzCacheKey checks that two attribute sets have the same key encoding
// (from which the cache keys derive, and which every hit compares) exactly
// when the SubjectAccessReviews they send are the same but for the ignored
// extras: credential-id by default, none with an empty list.
func FuzzCacheKey(f *testing.F) {
	base := "system:serviceaccount:default:backup|uid-1|system:serviceaccounts,system:authenticated|authentication.kubernetes.io/node-name=node-a|get|default|pods||p|spec.nodeName=a|app=x||R"
	seeds := [][2]string{
		{base, base},
		{base, strings.Replace(base, "system:authenticated", "system:authenticated,system:masters", 1)},
		{base, strings.Replace(base, "node-a", "node-b", 1)},
		{base, strings.Replace(base, "node-a", "node-a,node-b", 1)},
		{base, strings.Replace(base, "system:serviceaccounts,system:authenticated", "system:authenticated,system:serviceaccounts", 1)},
		{"a|b|c,d|||||||||/x|", "a|b|cd|||||||||/x|"},
		{"a|b|c|k=v||||||||/x|", "a|b|c|kv||||||||/x|"},
		{"a||||get||||||||/healthz|", "a||||get||||||||/healthz/|"},
		{"a||||get|ns|pods|||||/x|R", "a||||get|ns|pods|||||/y|R"},
		{"a||||get|ns|pods|||a!=b,c=d|x in (a,b)||R", "a||||get|ns|pods|||c=d,a!=b|x in (b,a)||R"},
		{"a||g|k=;k2=v|get|||||||/x|", "a||g|k2=v;k=|get|||||||/x|"},
		{"a||g|authentication.kubernetes.io/credential-id=JTI=1|get|||||||/x|", "a||g|authentication.kubernetes.io/credential-id=JTI=2|get|||||||/x|"},
		{"a||g|authentication.kubernetes.io/credential-id=JTI=1|get|||||||/x|", "a||g||get|||||||/x|"},
		{"a||g|authentication.kubernetes.io/credential-id=x|get|||||||/x|", "a||g|authentication.kubernetes.io/credential-idx|get|||||||/x|"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, s1, s2 string) {
		a1, a2 := attrdesc.Parse(s1), attrdesc.Parse(s2)
		for _, ignored := range [][]string{nil, {}} {
			sameKey := authz.KeyEncoding(a1, ignored) == authz.KeyEncoding(a2, ignored)
			dropped := ignored
			if dropped == nil {
				dropped = []string{authz.CredentialIDExtra}
			}
			spec1, spec2 := canonicalSpec(a1, dropped...), canonicalSpec(a2, dropped...)
			if sameSpec := reflect.DeepEqual(spec1, spec2); sameKey != sameSpec {
				t.Errorf("KeyEncoding(%q, %q) == KeyEncoding(%q, %q) is %v; want %v (specs:\n%+v\n%+v)", s1, ignored, s2, ignored, sameKey, sameSpec, spec1, spec2)
			}
		}
	})
}
