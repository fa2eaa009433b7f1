package authz_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/httpauth"
)

// driverOn is a DRA driver's pod-bound identity on node (no node binding
// when node is empty).
func driverOn(node string) *user.DefaultInfo {
	u := &user.DefaultInfo{
		Name:   "system:serviceaccount:dra:driver",
		UID:    "0b0e4c1e-0000-4000-8000-000000000007",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:dra", "system:authenticated"},
		Extra:  map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=1"}},
	}
	if node != "" {
		u.Extra["authentication.kubernetes.io/node-name"] = []string{node}
	}
	return u
}

// sliceRequest maps "METHOD target" (an API path with its query) for u, as
// httpauth's RequestInfo mapper does for a proxy in front of the API server.
func sliceRequest(t testing.TB, u user.Info, method, target string) authorizer.Attributes {
	t.Helper()
	attrs, err := httpauth.RequestInfo().Attributes(httptest.NewRequest(method, target, nil), u)
	if err != nil || len(attrs) != 1 {
		t.Fatalf("RequestInfo(%s %s) = %v, %v; want one attribute set", method, target, attrs, err)
	}
	return attrs[0]
}

// selector is the query string of a field selector.
func selector(s string) string { return "fieldSelector=" + url.QueryEscape(s) }

func TestNodeScope(t *testing.T) {
	t.Parallel()
	scope, err := authz.NodeScope(authz.NodeScopeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const slices = "/apis/resource.k8s.io/v1/resourceslices"
	// What the upstream ResourceSlice controller sends for a node-owned
	// pool: fields.Set{"spec.driver": d, "spec.nodeName": n}.String().
	controller := fields.Set{"spec.driver": "gpu.example.com", "spec.nodeName": "node-a"}.String()
	tests := []struct {
		name       string
		u          user.Info
		method     string
		target     string
		want       authorizer.Decision
		wantReason string // a substring of the reason of a Deny
	}{
		{name: "list with this node", u: driverOn("node-a"), method: "GET", target: slices + "?" + selector("spec.nodeName=node-a"), want: authorizer.DecisionAllow},
		{name: "list with ==", u: driverOn("node-a"), method: "GET", target: slices + "?" + selector("spec.nodeName==node-a"), want: authorizer.DecisionAllow},
		{name: "controller's selector", u: driverOn("node-a"), method: "GET", target: slices + "?" + selector(controller), want: authorizer.DecisionAllow},
		{name: "controller's watch", u: driverOn("node-a"), method: "GET", target: slices + "?watch=true&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&" + selector(controller), want: authorizer.DecisionAllow},
		{name: "older version", u: driverOn("node-a"), method: "GET", target: "/apis/resource.k8s.io/v1beta1/resourceslices?" + selector(controller), want: authorizer.DecisionAllow},
		{name: "deletecollection with this node", u: driverOn("node-a"), method: "DELETE", target: slices + "?" + selector(controller), want: authorizer.DecisionAllow},
		{name: "with a name", u: driverOn("node-a"), method: "GET", target: slices + "?" + selector("metadata.name=s,spec.nodeName=node-a"), want: authorizer.DecisionAllow},
		{name: "repeated this node", u: driverOn("node-a"), method: "GET", target: slices + "?" + selector("spec.nodeName=node-a,spec.nodeName=node-a"), want: authorizer.DecisionAllow},

		{name: "list without selector", u: driverOn("node-a"), method: "GET", target: slices, want: authorizer.DecisionDeny, wantReason: "requires the field selector spec.nodeName=node-a"},
		{name: "watch without selector", u: driverOn("node-a"), method: "GET", target: slices + "?watch=1", want: authorizer.DecisionDeny, wantReason: "watch of resourceslices.resource.k8s.io requires the field selector spec.nodeName=node-a"},
		{name: "deletecollection without selector", u: driverOn("node-a"), method: "DELETE", target: slices, want: authorizer.DecisionDeny, wantReason: "deletecollection of resourceslices.resource.k8s.io requires"},
		{name: "other selector only", u: driverOn("node-a"), method: "GET", target: slices + "?" + selector("spec.driver=gpu.example.com"), want: authorizer.DecisionDeny, wantReason: "has none"},
		{name: "other node", u: driverOn("node-a"), method: "GET", target: slices + "?" + selector("spec.nodeName=node-b"), want: authorizer.DecisionDeny, wantReason: `names node "node-b"`},
		{name: "this and another node", u: driverOn("node-a"), method: "GET", target: slices + "?" + selector("spec.nodeName=node-a,spec.nodeName=node-b"), want: authorizer.DecisionDeny, wantReason: `names node "node-b"`},
		{name: "empty node", u: driverOn("node-a"), method: "GET", target: slices + "?" + selector("spec.driver=gpu.example.com,spec.nodeName="), want: authorizer.DecisionDeny, wantReason: `names node ""`},
		{name: "not equal", u: driverOn("node-a"), method: "GET", target: slices + "?" + selector("spec.nodeName!=node-b"), want: authorizer.DecisionDeny, wantReason: "not an equality"},
		{name: "not equal besides equal", u: driverOn("node-a"), method: "GET", target: slices + "?" + selector("spec.nodeName=node-a,spec.nodeName!=node-b"), want: authorizer.DecisionDeny, wantReason: "not an equality"},
		{name: "selector does not parse", u: driverOn("node-a"), method: "GET", target: slices + "?" + selector("spec.nodeName"), want: authorizer.DecisionDeny, wantReason: "does not parse"},
		{name: "deprecated watch path carries no selector", u: driverOn("node-a"), method: "GET", target: "/apis/resource.k8s.io/v1/watch/resourceslices?" + selector("spec.nodeName=node-a"), want: authorizer.DecisionDeny, wantReason: "has none"},
		{name: "caller bound to no node", u: driverOn(""), method: "GET", target: slices + "?" + selector("spec.nodeName=node-a"), want: authorizer.DecisionDeny, wantReason: "not bound to a node"},
		{name: "caller bound to two nodes", u: &user.DefaultInfo{Name: "x", Extra: map[string][]string{"authentication.kubernetes.io/node-name": {"node-a", "node-b"}}}, method: "GET", target: slices + "?" + selector("spec.nodeName=node-a"), want: authorizer.DecisionDeny, wantReason: "more than one node"},
		{name: "caller's node empty", u: &user.DefaultInfo{Name: "x", Extra: map[string][]string{"authentication.kubernetes.io/node-name": {""}}}, method: "GET", target: slices + "?" + selector("spec.nodeName="), want: authorizer.DecisionDeny, wantReason: "empty"},

		// Not restricted: NodeScope is a restriction on collections, not a grant.
		{name: "get one slice", u: driverOn("node-a"), method: "GET", target: slices + "/s", want: authorizer.DecisionAllow},
		{name: "create", u: driverOn("node-a"), method: "POST", target: slices, want: authorizer.DecisionAllow},
		{name: "delete one", u: driverOn("node-a"), method: "DELETE", target: slices + "/s", want: authorizer.DecisionAllow},
		{name: "other resource", u: driverOn("node-a"), method: "GET", target: "/apis/resource.k8s.io/v1/deviceclasses", want: authorizer.DecisionAllow},
		{name: "same resource, other group", u: driverOn("node-a"), method: "GET", target: "/apis/example.com/v1/resourceslices", want: authorizer.DecisionAllow},
		{name: "non-resource", u: driverOn(""), method: "GET", target: "/version", want: authorizer.DecisionAllow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, reason, err := scope.Authorize(context.Background(), sliceRequest(t, tt.u, tt.method, tt.target))
			if d != tt.want || err != nil {
				t.Fatalf("Authorize(%s %s) = %v, %q, %v; want %v", tt.method, tt.target, d, reason, err, tt.want)
			}
			if d == authorizer.DecisionDeny && !strings.Contains(reason, tt.wantReason) {
				t.Errorf("Authorize(%s %s) reason = %q; want it to contain %q", tt.method, tt.target, reason, tt.wantReason)
			}
		})
	}
}

// TestNodeScopeOperators covers operators a field selector string cannot
// express but an authorizer.Attributes may carry (an "in" from another
// source): only equality is accepted.
func TestNodeScopeOperators(t *testing.T) {
	t.Parallel()
	scope, err := authz.NodeScope(authz.NodeScopeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []selection.Operator{selection.In, selection.NotIn, selection.Exists, selection.DoesNotExist, selection.NotEquals, selection.GreaterThan, ""} {
		a := authorizer.AttributesRecord{
			User: driverOn("node-a"), Verb: "list", APIGroup: "resource.k8s.io", APIVersion: "v1", Resource: "resourceslices", ResourceRequest: true,
			FieldSelectorRequirements: fields.Requirements{{Field: "spec.nodeName", Operator: op, Value: "node-a"}},
		}
		if d, reason, err := scope.Authorize(context.Background(), a); d != authorizer.DecisionDeny || err != nil || !strings.Contains(reason, "not an equality") {
			t.Errorf("Authorize(spec.nodeName %q node-a) = %v, %q, %v; want Deny, not an equality", op, d, reason, err)
		}
	}
	a := authorizer.AttributesRecord{
		User: driverOn("node-a"), Verb: "watch", APIGroup: "resource.k8s.io", APIVersion: "v1", Resource: "resourceslices", ResourceRequest: true,
		FieldSelectorParsingErr: errors.New("boom"),
	}
	if d, reason, err := scope.Authorize(context.Background(), a); d != authorizer.DecisionDeny || err != nil || !strings.Contains(reason, "boom") {
		t.Errorf("Authorize(selector parsing error) = %v, %q, %v; want Deny naming the error", d, reason, err)
	}
	if d, _, err := scope.Authorize(context.Background(), authorizer.AttributesRecord{Verb: "list", APIGroup: "resource.k8s.io", Resource: "resourceslices", ResourceRequest: true}); d != authorizer.DecisionDeny || err != nil {
		t.Errorf("Authorize(no user) = %v, %v; want Deny", d, err)
	}
}

func TestNodeScopeResources(t *testing.T) {
	t.Parallel()
	pods, err := authz.NodeScope(authz.NodeScopeOptions{Resources: []authz.NodeScopedResource{{Resource: "pods", Field: "spec.nodeName"}}})
	if err != nil {
		t.Fatal(err)
	}
	none, err := authz.NodeScope(authz.NodeScopeOptions{Resources: []authz.NodeScopedResource{}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		az     authorizer.Authorizer
		target string
		want   authorizer.Decision
	}{
		{name: "pods without selector", az: pods, target: "/api/v1/pods", want: authorizer.DecisionDeny},
		{name: "pods in a namespace without selector", az: pods, target: "/api/v1/namespaces/ns/pods", want: authorizer.DecisionDeny},
		{name: "pods with this node", az: pods, target: "/api/v1/pods?" + selector("spec.nodeName=node-a"), want: authorizer.DecisionAllow},
		{name: "slices not configured", az: pods, target: "/apis/resource.k8s.io/v1/resourceslices", want: authorizer.DecisionAllow},
		{name: "nothing configured", az: none, target: "/apis/resource.k8s.io/v1/resourceslices", want: authorizer.DecisionAllow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if d, reason, err := tt.az.Authorize(context.Background(), sliceRequest(t, driverOn("node-a"), "GET", tt.target)); d != tt.want || err != nil {
				t.Errorf("Authorize(GET %s) = %v, %q, %v; want %v", tt.target, d, reason, err, tt.want)
			}
		})
	}

	for _, bad := range [][]authz.NodeScopedResource{
		{{APIGroup: "resource.k8s.io", Field: "spec.nodeName"}},
		{{APIGroup: "resource.k8s.io", Resource: "resourceslices"}},
		{{Resource: "pods", Field: "spec.nodeName"}, {Resource: "pods", Field: "spec.other"}},
	} {
		if _, err := authz.NodeScope(authz.NodeScopeOptions{Resources: bad}); err == nil {
			t.Errorf("NodeScope(%+v) = nil error; want one", bad)
		}
	}
	if got := authz.DefaultNodeScopedResources()[0].String(); got != "resourceslices.resource.k8s.io" {
		t.Errorf("DefaultNodeScopedResources()[0] = %q; want resourceslices.resource.k8s.io", got)
	}
}

// TestNodeScopeComposes puts NodeScope between NodeLocal and a real
// SubjectAccessReview authorizer: a driver on this node with RBAC for
// resourceslices lists its own node's slices; another node, no selector,
// or no RBAC is refused, and a refusal by NodeLocal or NodeScope costs no
// SubjectAccessReview.
func TestNodeScopeComposes(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	s.SetPolicy(authtest.Rules(authtest.Rule{
		Users: []string{"system:serviceaccount:dra:driver"}, Verbs: []string{"list", "watch"},
		APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"},
	}))
	sar, err := authz.NewForConfig(s.Config(), authz.Options{})
	if err != nil {
		t.Fatal(err)
	}
	scope, err := authz.NodeScope(authz.NodeScopeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	chain := authz.All(authz.NodeLocal(authz.NodeLocalOptions{NodeName: "node-a"}), scope, sar)
	const slices = "/apis/resource.k8s.io/v1/resourceslices"
	tests := []struct {
		name     string
		u        user.Info
		target   string
		wantErr  error
		wantSARs int
	}{
		{name: "own node", u: driverOn("node-a"), target: slices + "?" + selector("spec.nodeName=node-a"), wantSARs: 1},
		{name: "no selector", u: driverOn("node-a"), target: slices, wantErr: reviewauth.ErrDenied},
		{name: "other node's selector", u: driverOn("node-a"), target: slices + "?" + selector("spec.nodeName=node-b"), wantErr: reviewauth.ErrDenied},
		{name: "caller on another node", u: driverOn("node-b"), target: slices + "?" + selector("spec.nodeName=node-b"), wantErr: reviewauth.ErrDenied},
		{name: "no RBAC", u: &user.DefaultInfo{Name: "system:serviceaccount:dra:other", Extra: map[string][]string{"authentication.kubernetes.io/node-name": {"node-a"}}}, target: slices + "?" + selector("spec.nodeName=node-a"), wantErr: reviewauth.ErrDenied, wantSARs: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.Count(authtest.SubjectAccessReviews)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := authz.Check(ctx, chain, sliceRequest(t, tt.u, "GET", tt.target))
			if (tt.wantErr == nil) != (err == nil) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("Check(GET %s) = %v; want %v", tt.target, err, tt.wantErr)
			}
			if n := s.Count(authtest.SubjectAccessReviews) - before; n != tt.wantSARs {
				t.Errorf("Check(GET %s) sent %d SubjectAccessReviews; want %d", tt.target, n, tt.wantSARs)
			}
		})
	}
}
