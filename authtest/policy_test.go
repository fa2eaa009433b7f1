package authtest_test

import (
	"context"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reviewauth/reviewauth/authtest"
)

func resourceSpec(u string, groups []string, verb, group, resource, sub, ns, name string) authorizationv1.SubjectAccessReviewSpec {
	return authorizationv1.SubjectAccessReviewSpec{
		User: u, Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: verb, Group: group, Resource: resource, Subresource: sub, Namespace: ns, Name: name,
		},
	}
}

func nonResourceSpec(u string, groups []string, verb, path string) authorizationv1.SubjectAccessReviewSpec {
	return authorizationv1.SubjectAccessReviewSpec{
		User: u, Groups: groups,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: verb, Path: path},
	}
}

func TestRules(t *testing.T) {
	t.Parallel()
	snapshots := authtest.Rule{
		Users: []string{"system:serviceaccount:default:backup"}, Verbs: []string{"get", "list"},
		APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots"}, Namespaces: []string{"default"},
	}
	metrics := authtest.Rule{
		Groups: []string{"prometheus"}, Verbs: []string{"get"},
		APIGroups: []string{""}, Resources: []string{"nodes"}, Subresources: []string{"metrics", "stats"},
	}
	healthz := authtest.Rule{Groups: []string{"system:authenticated"}, Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz", "/debug/*"}}
	admin := authtest.Rule{Users: []string{"admin"}, Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, Subresources: []string{"*"}, NonResourceURLs: []string{"*"}}
	nobody := authtest.Rule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, NonResourceURLs: []string{"*"}}
	named := authtest.Rule{Users: []string{"*"}, Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, Names: []string{"public"}}
	policy := authtest.Rules(snapshots, metrics, healthz, admin, nobody, named)

	tests := []struct {
		name        string
		spec        authorizationv1.SubjectAccessReviewSpec
		wantAllowed bool
	}{
		{"user, verb, group, resource, namespace", resourceSpec("system:serviceaccount:default:backup", nil, "get", "snapshot.storage.k8s.io", "volumesnapshots", "", "default", "snap-1"), true},
		{"other namespace", resourceSpec("system:serviceaccount:default:backup", nil, "get", "snapshot.storage.k8s.io", "volumesnapshots", "", "kube-system", "snap-1"), false},
		{"other verb", resourceSpec("system:serviceaccount:default:backup", nil, "delete", "snapshot.storage.k8s.io", "volumesnapshots", "", "default", "snap-1"), false},
		{"other user", resourceSpec("system:serviceaccount:default:other", nil, "get", "snapshot.storage.k8s.io", "volumesnapshots", "", "default", "snap-1"), false},
		{"subresource not granted by a rule without subresources", resourceSpec("system:serviceaccount:default:backup", nil, "get", "snapshot.storage.k8s.io", "volumesnapshots", "status", "default", "snap-1"), false},
		{"group match", resourceSpec("prom", []string{"system:authenticated", "prometheus"}, "get", "", "nodes", "metrics", "", "node-a"), true},
		{"group match, subresource not listed", resourceSpec("prom", []string{"prometheus"}, "get", "", "nodes", "proxy", "", "node-a"), false},
		{"group match, no subresource", resourceSpec("prom", []string{"prometheus"}, "get", "", "nodes", "", "", "node-a"), false},
		{"user name equal to a group name does not match groups", resourceSpec("prometheus", nil, "get", "", "nodes", "metrics", "", "node-a"), false},
		{"non-resource exact path", nonResourceSpec("u", []string{"system:authenticated"}, "get", "/healthz"), true},
		{"non-resource exact path does not match a longer path", nonResourceSpec("u", []string{"system:authenticated"}, "get", "/healthz/ping"), false},
		{"non-resource trailing star", nonResourceSpec("u", []string{"system:authenticated"}, "get", "/debug/pprof/heap"), true},
		{"non-resource trailing star needs the prefix", nonResourceSpec("u", []string{"system:authenticated"}, "get", "/debugger"), false},
		{"non-resource wrong verb", nonResourceSpec("u", []string{"system:authenticated"}, "post", "/healthz"), false},
		{"non-resource rule does not grant resources", resourceSpec("u", []string{"system:authenticated"}, "get", "", "pods", "", "default", ""), false},
		{"wildcards, resource", resourceSpec("admin", nil, "delete", "apps", "deployments", "scale", "prod", "web"), true},
		{"wildcards, non-resource", nonResourceSpec("admin", nil, "post", "/anything"), true},
		{"empty users and groups match nobody", nonResourceSpec("someone", []string{"system:authenticated", "system:masters"}, "put", "/x"), false},
		{"names restrict", resourceSpec("anyone", nil, "get", "", "configmaps", "", "default", "public"), true},
		{"names restrict, other name", resourceSpec("anyone", nil, "get", "", "configmaps", "", "default", "secret-ish"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			allowed, denied, reason, evalErr := policy(tt.spec)
			if allowed != tt.wantAllowed || denied || evalErr != "" {
				t.Errorf("Rules(...)(%s) = allowed %v, denied %v, evaluationError %q; want allowed %v, not denied, no error", tt.name, allowed, denied, evalErr, tt.wantAllowed)
			}
			if allowed == (reason == "") {
				t.Errorf("Rules(...)(%s) reason = %q; want a reason exactly when allowed", tt.name, reason)
			}
		})
	}
}

func TestRulesEmpty(t *testing.T) {
	t.Parallel()
	allowed, denied, _, _ := authtest.Rules()(nonResourceSpec("admin", []string{"system:masters"}, "get", "/"))
	if allowed || denied {
		t.Errorf("Rules()(...) = allowed %v, denied %v; want false, false", allowed, denied)
	}
}

func TestSubjectAccessReview(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	cs := clientset(t, s)
	spec := resourceSpec("system:serviceaccount:default:backup", []string{"system:authenticated"}, "get", "snapshot.storage.k8s.io", "volumesnapshots", "", "default", "snap-1")
	sar := func() authorizationv1.SubjectAccessReviewStatus {
		t.Helper()
		got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SubjectAccessReviews().Create() = %v; want no error", err)
		}
		return got.Status
	}
	if got := sar(); got.Allowed || got.Denied {
		t.Errorf("default policy: SAR = %+v; want not allowed, not denied", got)
	}
	s.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{spec.User}, Verbs: []string{"get"}, APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots"}}))
	if got := sar(); !got.Allowed || got.Denied || got.Reason == "" {
		t.Errorf("Rules policy: SAR = %+v; want allowed with a reason", got)
	}
	s.SetPolicy(func(authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
		return false, true, "denied by test", "partial failure"
	})
	want := authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "denied by test", EvaluationError: "partial failure"}
	if got := sar(); got != want {
		t.Errorf("func policy: SAR = %+v; want %+v", got, want)
	}
	s.SetPolicy(nil)
	if got := sar(); got.Allowed || got.Denied {
		t.Errorf("SetPolicy(nil): SAR = %+v; want not allowed, not denied", got)
	}
	recorded := s.SubjectAccessReviews()
	if len(recorded) != 4 || s.Count(authtest.SubjectAccessReviews) != 4 {
		t.Fatalf("len(SubjectAccessReviews()) = %d, Count = %d; want 4, 4", len(recorded), s.Count(authtest.SubjectAccessReviews))
	}
	if got := recorded[0].Spec.ResourceAttributes; got == nil || *got != *spec.ResourceAttributes {
		t.Errorf("SubjectAccessReviews()[0].Spec.ResourceAttributes = %+v; want %+v", got, spec.ResourceAttributes)
	}
}

func TestSubjectAccessReviewValidation(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	cs := clientset(t, s)
	tests := []struct {
		name string
		spec authorizationv1.SubjectAccessReviewSpec
	}{
		{"no user or groups", authorizationv1.SubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/"}}},
		{"no attributes", authorizationv1.SubjectAccessReviewSpec{User: "u"}},
		{"both attributes", authorizationv1.SubjectAccessReviewSpec{User: "u", NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/"}, ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{Spec: tt.spec}, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Errorf("SubjectAccessReviews().Create(%s) = %v; want an Invalid (422) error", tt.name, err)
			}
		})
	}
}
