package authz

import (
	"slices"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
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

// sarSpec builds the spec of the SubjectAccessReview that asks about a, the
// way k8s.io/apiserver's webhook authorizer does: selectors are sent as
// authorization.k8s.io/v1 requirements, with operators the API does not know
// dropped (requirements are ANDed, so dropping one only widens the check),
// and a selector that failed to parse is sent without the requirements that
// could not be parsed. The operators are mapped by internal/cache's
// SARFieldOperator and SARLabelOperator, which the cache key
// (cache.AuthorizerOptions.SubjectAccessReviewKey) shares, so that two
// requests share a cache entry exactly when they make the same review
// (FuzzCacheKey).
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
		op, ok := cache.SARFieldOperator(r.Operator)
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
		op, ok := cache.SARLabelOperator(r.Operator())
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
