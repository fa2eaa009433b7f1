package authtest

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Policy decides a SubjectAccessReview: the four results become the
// review's status fields allowed, denied, reason and evaluationError, as
// returned (a Policy that returns allowed and denied together gets both).
// allowed=false with denied=false is NoOpinion, what RBAC answers when no
// rule matches. A Policy is called from server goroutines and must be safe
// for concurrent use.
type Policy func(spec authorizationv1.SubjectAccessReviewSpec) (allowed, denied bool, reason, evaluationError string)

// Rule allows requests whose subject and attributes it matches. In every
// field "*" matches anything.
//
// Subject: the rule matches when Users contains spec.user or Groups shares
// an element with spec.groups. A rule with empty Users and empty Groups
// matches nobody.
//
// Resource requests match a rule that has Resources: Verbs, APIGroups and
// Resources must each contain the request's value (empty matches nothing;
// the core group is ""). Empty Subresources matches only requests without a
// subresource. Empty Namespaces matches every namespace, including
// cluster-scoped requests; empty Names matches every name.
//
// Non-resource requests match a rule that has NonResourceURLs: Verbs must
// contain the verb and NonResourceURLs the path, where an entry ending in
// "*" matches every path with the prefix before it.
type Rule struct {
	Users, Groups                             []string
	Verbs, APIGroups, Resources, Subresources []string
	Namespaces, Names                         []string
	NonResourceURLs                           []string
}

// Rules returns a [Policy] that allows a review when any rule matches, with
// reason "authtest: allowed by rule #i", and otherwise answers NoOpinion
// (not allowed, not denied, no reason), like RBAC. Rules() allows nothing.
// The rules are copied.
func Rules(rules ...Rule) Policy {
	rules = slices.Clone(rules)
	return func(spec authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
		for i, r := range rules {
			if r.matches(spec) {
				return true, false, fmt.Sprintf("authtest: allowed by rule #%d", i), ""
			}
		}
		return false, false, "", ""
	}
}

func (r Rule) matches(spec authorizationv1.SubjectAccessReviewSpec) bool {
	subject := has(r.Users, spec.User) || slices.ContainsFunc(spec.Groups, func(g string) bool { return has(r.Groups, g) })
	if !subject {
		return false
	}
	if ra := spec.ResourceAttributes; ra != nil {
		if len(r.Resources) == 0 {
			return false
		}
		subOK := has(r.Subresources, ra.Subresource) || (len(r.Subresources) == 0 && ra.Subresource == "")
		return has(r.Verbs, ra.Verb) && has(r.APIGroups, ra.Group) && has(r.Resources, ra.Resource) && subOK &&
			(len(r.Namespaces) == 0 || has(r.Namespaces, ra.Namespace)) &&
			(len(r.Names) == 0 || has(r.Names, ra.Name))
	}
	if nra := spec.NonResourceAttributes; nra != nil {
		return has(r.Verbs, nra.Verb) && slices.ContainsFunc(r.NonResourceURLs, func(u string) bool {
			if prefix, ok := strings.CutSuffix(u, "*"); ok {
				return strings.HasPrefix(nra.Path, prefix)
			}
			return u == nra.Path
		})
	}
	return false
}

// has reports whether list contains v or "*".
func has(list []string, v string) bool {
	return slices.Contains(list, v) || slices.Contains(list, "*")
}

// SetPolicy makes p decide SubjectAccessReviews from now on. A nil p
// restores the default, which allows nothing (NoOpinion: allowed=false,
// denied=false), like RBAC without bindings.
func (s *Server) SetPolicy(p Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policy = p
}

func (s *Server) serveSubjectAccessReview(w http.ResponseWriter, r *http.Request) {
	gvk := authorizationv1.SchemeGroupVersion.WithKind("SubjectAccessReview")
	var sar authorizationv1.SubjectAccessReview
	if !readBody(w, r, gvk, &sar) {
		return
	}
	s.mu.Lock()
	s.sars = append(s.sars, *sar.DeepCopy())
	s.mu.Unlock()
	if errs := validateSAR(sar.Spec); len(errs) > 0 {
		writeStatus(w, statusOf(apierrors.NewInvalid(gvk.GroupKind(), "", errs)))
		return
	}
	f, handled := s.intercept(w, r, SubjectAccessReviews)
	if handled {
		return
	}
	sar.TypeMeta = metav1.TypeMeta{Kind: gvk.Kind, APIVersion: gvk.GroupVersion().String()}
	switch {
	case f.MalformedBody:
		respondMalformed(w, r, sar.TypeMeta)
	case f.WrongKind:
		respond(w, r, http.StatusCreated, wrongKindObject(gvk.Kind))
	case f.EmptyStatus:
		respond(w, r, http.StatusCreated, &sar)
	case f.BothAllowedAndDenied:
		sar.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: true, Denied: true, Reason: "authtest: injected fault"}
		respond(w, r, http.StatusCreated, &sar)
	default:
		s.mu.Lock()
		policy := s.policy
		s.mu.Unlock()
		if policy != nil {
			st := &sar.Status
			st.Allowed, st.Denied, st.Reason, st.EvaluationError = policy(*sar.Spec.DeepCopy())
		}
		respondPadded(w, r, http.StatusCreated, &sar, f.BodyBytes)
	}
}

// validateSAR is the validation a real server applies to a
// SubjectAccessReview spec.
func validateSAR(spec authorizationv1.SubjectAccessReviewSpec) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	if spec.ResourceAttributes != nil && spec.NonResourceAttributes != nil {
		errs = append(errs, field.Invalid(p.Child("nonResourceAttributes"), spec.NonResourceAttributes, "cannot be specified in combination with resourceAttributes"))
	}
	if spec.ResourceAttributes == nil && spec.NonResourceAttributes == nil {
		errs = append(errs, field.Invalid(p.Child("resourceAttributes"), spec.NonResourceAttributes, "exactly one of nonResourceAttributes or resourceAttributes must be specified"))
	}
	if spec.User == "" && len(spec.Groups) == 0 {
		errs = append(errs, field.Invalid(p.Child("user"), spec.User, "at least one of user or group must be specified"))
	}
	return errs
}

// wrongKindObject returns a well-formed object of a kind other than kind.
func wrongKindObject(kind string) runtime.Object {
	if kind == "TokenReview" {
		return &authorizationv1.SubjectAccessReview{
			TypeMeta: metav1.TypeMeta{Kind: "SubjectAccessReview", APIVersion: authorizationv1.SchemeGroupVersion.String()},
			Status:   authorizationv1.SubjectAccessReviewStatus{Allowed: true},
		}
	}
	return &authenticationv1.TokenReview{
		TypeMeta: metav1.TypeMeta{Kind: "TokenReview", APIVersion: authenticationv1.SchemeGroupVersion.String()},
		Status:   authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "system:admin"}},
	}
}
