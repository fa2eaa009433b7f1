package authtest

import (
	"fmt"
	"net/http"
	"slices"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The endpoints that tell a client about its own credentials.
const (
	// SelfSubjectAccessReviews is POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews,
	// answered by the administrator policy ([Server.SetAdminPolicy]).
	SelfSubjectAccessReviews Endpoint = "selfsubjectaccessreviews"
	// SelfSubjectReviews is POST /apis/authentication.k8s.io/v1/selfsubjectreviews,
	// answered with the administrator's identity ([WithAdminUser]).
	SelfSubjectReviews Endpoint = "selfsubjectreviews"
)

// DefaultAdminUser is who the administrator token authenticates as without
// [WithAdminUser].
const DefaultAdminUser = "authtest-admin"

// WithAdminUser sets who the administrator token ([Server.AdminToken])
// authenticates as: the user name and groups a SelfSubjectReview answers,
// and the subject [Server.SetAdminPolicy]'s policy decides for. The group
// system:authenticated is always added, as a real server does. No
// WithAdminUser means [DefaultAdminUser] in system:masters.
func WithAdminUser(name string, groups ...string) Option {
	return func(s *Server) {
		if name != "" {
			s.adminUser = name
			s.adminGroups = slices.Clone(groups)
		}
	}
}

// WithHTTP2 makes the server speak HTTP/2 as well as HTTP/1.1, chosen by
// ALPN, as a real API server does (client-go then uses HTTP/2). A request
// aborted by a fault (DropConnection, or a client that went away) then
// resets its stream (RST_STREAM) rather than the connection.
func WithHTTP2() Option {
	return func(s *Server) { s.http2 = true }
}

// SetAdminPolicy makes p decide what the administrator token may do, as
// RBAC decides for a real client. Before a TokenReview, SubjectAccessReview
// or TokenRequest is served, p is asked whether the administrator may
// create tokenreviews.authentication.k8s.io,
// subjectaccessreviews.authorization.k8s.io or serviceaccounts/token in the
// namespace; a request it does not allow is answered 403 Forbidden with the
// message a real API server sends, before its body is read (it counts in
// [Server.Count] but is not recorded in [Server.TokenReviews] or
// [Server.SubjectAccessReviews]). p also answers SelfSubjectAccessReviews.
// The spec p sees names the administrator ([WithAdminUser]) as its user and
// groups. A nil p, the default, allows everything, like system:masters.
func (s *Server) SetAdminPolicy(p Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.adminPolicy = p
}

// adminSpec returns the spec the administrator policy decides for attrs.
func (s *Server) adminSpec(ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes) authorizationv1.SubjectAccessReviewSpec {
	return authorizationv1.SubjectAccessReviewSpec{
		User: s.adminUser, Groups: s.adminGroupsAll(),
		ResourceAttributes: ra, NonResourceAttributes: nra,
	}
}

func (s *Server) adminGroupsAll() []string {
	groups := slices.Clone(s.adminGroups)
	if !slices.Contains(groups, "system:authenticated") {
		groups = append(groups, "system:authenticated")
	}
	return groups
}

// adminDecide applies the administrator policy; nil allows everything.
func (s *Server) adminDecide(spec authorizationv1.SubjectAccessReviewSpec) (allowed, denied bool, reason, evaluationError string) {
	s.mu.Lock()
	p := s.adminPolicy
	s.mu.Unlock()
	if p == nil {
		return true, false, "authtest: the administrator may do anything", ""
	}
	return p(spec)
}

// adminForbidden answers 403 and returns true when the administrator may
// not create resource (with subresource, in namespace ns).
func (s *Server) adminForbidden(w http.ResponseWriter, group, resource, subresource, ns string) bool {
	ra := &authorizationv1.ResourceAttributes{Verb: "create", Group: group, Resource: resource, Subresource: subresource, Namespace: ns}
	if allowed, denied, _, _ := s.adminDecide(s.adminSpec(ra, nil)); allowed && !denied {
		return false
	}
	res := resource
	if subresource != "" {
		res += "/" + subresource
	}
	scope := "at the cluster scope"
	if ns != "" {
		scope = fmt.Sprintf("in the namespace %q", ns)
	}
	// The wording of k8s.io/apiserver's responsewriters.forbiddenMessage.
	msg := fmt.Sprintf("User %q cannot create resource %q in API group %q %s", s.adminUser, res, group, scope)
	writeStatus(w, statusOf(apierrors.NewForbidden(schema.GroupResource{Group: group, Resource: res}, "", fmt.Errorf("%s", msg))))
	return true
}

func (s *Server) serveSelfSubjectReview(w http.ResponseWriter, r *http.Request) {
	gvk := authenticationv1.SchemeGroupVersion.WithKind("SelfSubjectReview")
	var ssr authenticationv1.SelfSubjectReview
	if !readBody(w, r, gvk, &ssr) {
		return
	}
	if _, handled := s.intercept(w, r, SelfSubjectReviews); handled {
		return
	}
	ssr.TypeMeta = metav1.TypeMeta{Kind: gvk.Kind, APIVersion: gvk.GroupVersion().String()}
	ssr.Status.UserInfo = authenticationv1.UserInfo{Username: s.adminUser, Groups: s.adminGroupsAll()}
	respond(w, r, http.StatusCreated, &ssr)
}

func (s *Server) serveSelfSubjectAccessReview(w http.ResponseWriter, r *http.Request) {
	gvk := authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview")
	var ssar authorizationv1.SelfSubjectAccessReview
	if !readBody(w, r, gvk, &ssar) {
		return
	}
	spec := s.adminSpec(ssar.Spec.ResourceAttributes, ssar.Spec.NonResourceAttributes)
	if errs := validateSAR(spec); len(errs) > 0 {
		writeStatus(w, statusOf(apierrors.NewInvalid(gvk.GroupKind(), "", errs)))
		return
	}
	if _, handled := s.intercept(w, r, SelfSubjectAccessReviews); handled {
		return
	}
	ssar.TypeMeta = metav1.TypeMeta{Kind: gvk.Kind, APIVersion: gvk.GroupVersion().String()}
	st := &ssar.Status
	st.Allowed, st.Denied, st.Reason, st.EvaluationError = s.adminDecide(*spec.DeepCopy())
	respond(w, r, http.StatusCreated, &ssar)
}
