package cluster_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters/impersonation"
	"k8s.io/apiserver/pkg/endpoints/request"
	"sigs.k8s.io/yaml"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// recordingAuthorizer allows everything and records what it was asked.
type recordingAuthorizer struct {
	mu    sync.Mutex
	asked []string
}

func (r *recordingAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, cluster.DescribeAttributes(a))
	return authorizer.DecisionAllow, "", nil
}

// sinkFunc is an audit.Sink.
type sinkFunc func(...*auditinternal.Event) bool

func (f sinkFunc) ProcessEvents(evs ...*auditinternal.Event) bool { return f(evs...) }

// TestAuditedChecksMatchAPIServer runs k8s.io/apiserver's own
// impersonation filter (constrained impersonation, with legacy
// impersonation as its last mode, as kube-apiserver v1.37 runs it) with an
// authorizer that allows everything and records what it is asked, and
// checks that AuditedChecks, reading the audit event the filter wrote,
// names exactly those checks: every one it returns for sure was made,
// and every one made is among those or those it could not tell.
func TestAuditedChecksMatchAPIServer(t *testing.T) {
	t.Parallel()
	draproxy := &user.DefaultInfo{Name: "system:serviceaccount:dra-system:draproxy", UID: "u-1", Groups: cluster.ServiceAccountGroups("dra-system"),
		Extra: map[string][]string{"authentication.kubernetes.io/node-name": {"node-a"}, "authentication.kubernetes.io/pod-name": {"draproxy-x"}}}
	slices := &request.RequestInfo{IsResourceRequest: true, Verb: "create", APIGroup: "resource.k8s.io", APIVersion: "v1", Resource: "resourceslices", Path: "/apis/resource.k8s.io/v1/resourceslices"}
	getSlice := &request.RequestInfo{IsResourceRequest: true, Verb: "get", APIGroup: "resource.k8s.io", APIVersion: "v1", Resource: "resourceslices", Name: "s-1", Path: "/apis/resource.k8s.io/v1/resourceslices/s-1"}
	tests := []struct {
		name       string
		info       *request.RequestInfo
		header     http.Header
		constraint string
	}{
		{name: "legacy: a ServiceAccount with its groups, UID and extras, as draproxy sends them", info: slices, header: http.Header{
			authenticationv1.ImpersonateUserHeader:                       {"system:serviceaccount:gpu:kubelet-plugin"},
			authenticationv1.ImpersonateUIDHeader:                        {"uid-1"},
			authenticationv1.ImpersonateGroupHeader:                      {"system:serviceaccounts", "system:serviceaccounts:gpu"},
			"Impersonate-Extra-Authentication.kubernetes.io%2fnode-Name": {"node-a"},
			"Impersonate-Extra-Authentication.kubernetes.io%2fpod-Name":  {"plugin-x"},
		}},
		{name: "legacy: a ServiceAccount without groups", info: slices, header: http.Header{
			authenticationv1.ImpersonateUserHeader:                       {"system:serviceaccount:gpu:kubelet-plugin"},
			"Impersonate-Extra-Authentication.kubernetes.io%2fnode-Name": {"node-a"},
		}},
		{name: "legacy: a ServiceAccount with another group", info: slices, header: http.Header{
			authenticationv1.ImpersonateUserHeader:  {"system:serviceaccount:gpu:kubelet-plugin"},
			authenticationv1.ImpersonateGroupHeader: {"admins"},
		}},
		{name: "associated-node: the node of draproxy's pod", info: getSlice, constraint: "impersonate:associated-node", header: http.Header{
			authenticationv1.ImpersonateUserHeader: {"system:node:node-a"},
		}},
		{name: "arbitrary-node: another node", info: getSlice, constraint: "impersonate:arbitrary-node", header: http.Header{
			authenticationv1.ImpersonateUserHeader: {"system:node:node-b"},
		}},
		{name: "serviceaccount: the name only", info: getSlice, constraint: "impersonate:serviceaccount", header: http.Header{
			authenticationv1.ImpersonateUserHeader: {"system:serviceaccount:gpu:kubelet-plugin"},
		}},
		{name: "user-info: a user with groups and extras", info: slices, constraint: "impersonate:user-info", header: http.Header{
			authenticationv1.ImpersonateUserHeader:  {"alice"},
			authenticationv1.ImpersonateGroupHeader: {"team-a"},
			"Impersonate-Extra-Example.com%2fscope": {"read"},
		}},
	}
	codecs := serializer.NewCodecFactory(runtime.NewScheme())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recordingAuthorizer{}
			var events []auditv1.Event
			sink := sinkFunc(func(evs ...*auditinternal.Event) bool {
				for _, ev := range evs {
					var out auditv1.Event
					if err := auditv1.Convert_audit_Event_To_v1_Event(ev, &out, nil); err != nil {
						t.Error(err)
					}
					events = append(events, out)
				}
				return true
			})
			served := false
			h := impersonation.WithConstrainedImpersonation(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served = true }), rec, codecs)
			req := httptest.NewRequest(http.MethodGet, tc.info.Path, nil)
			req.Header = tc.header
			ctx := audit.WithAuditContext(req.Context())
			ac := audit.AuditContextFrom(ctx)
			if err := ac.Init(audit.RequestAuditConfig{Level: auditinternal.LevelMetadata}, sink); err != nil {
				t.Fatal(err)
			}
			ctx = request.WithUser(request.WithRequestInfo(ctx, tc.info), draproxy)
			h.ServeHTTP(httptest.NewRecorder(), req.WithContext(ctx))
			if !served {
				t.Fatal("the impersonation filter refused the request")
			}
			ac.ProcessEventStage(ctx, auditinternal.StageResponseComplete)
			if len(events) != 1 {
				t.Fatalf("%d audit events; want 1", len(events))
			}
			ev := events[0]
			ev.User = authenticationv1.UserInfo{Username: draproxy.Name, UID: draproxy.UID, Groups: draproxy.Groups}
			ev.Verb = tc.info.Verb
			ev.ObjectRef = &auditv1.ObjectReference{APIGroup: tc.info.APIGroup, APIVersion: tc.info.APIVersion, Resource: tc.info.Resource, Name: tc.info.Name}
			if got := constraintOf(ev); got != tc.constraint {
				t.Errorf("the filter used %q; the test expects %q", got, tc.constraint)
			}
			checks, maybe := cluster.AuditedChecks(&ev)
			sure, could := describeAll(checks), describeAll(maybe)
			asked := sets.New(rec.asked...)
			if missing := sure.Difference(asked); missing.Len() > 0 {
				t.Errorf("AuditedChecks names %q, which the API server did not check (it checked %q)", sets.List(missing), sets.List(asked))
			}
			if extra := asked.Difference(sure).Difference(could); extra.Len() > 0 {
				t.Errorf("the API server checked %q, which AuditedChecks misses (sure %q, could not tell %q)", sets.List(extra), sets.List(sure), sets.List(could))
			}
		})
	}
}

func constraintOf(ev auditv1.Event) string {
	if ev.AuthenticationMetadata == nil {
		return ""
	}
	return ev.AuthenticationMetadata.ImpersonationConstraint
}

func describeAll(as []authorizer.AttributesRecord) sets.Set[string] {
	s := sets.New[string]()
	for _, a := range as {
		s.Insert(cluster.DescribeAttributes(a))
	}
	return s
}

// TestReviewedAttributes reads the SubjectAccessReview of a create
// audited at level Request.
func TestReviewedAttributes(t *testing.T) {
	t.Parallel()
	ev := &auditv1.Event{Verb: "create", ObjectRef: &auditv1.ObjectReference{APIGroup: "authorization.k8s.io", Resource: "subjectaccessreviews"},
		RequestObject: &runtime.Unknown{Raw: []byte(`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"system:serviceaccount:m:scraper","resourceAttributes":{"verb":"get","resource":"nodes","subresource":"metrics","name":"node-a"}}}`)}}
	u, a, ok := cluster.ReviewedAttributes(ev)
	if !ok || u != "system:serviceaccount:m:scraper" || cluster.DescribeAttributes(a) != "get nodes/metrics node-a" {
		t.Errorf("ReviewedAttributes = %q, %q, %v; want the scraper and get nodes/metrics node-a", u, cluster.DescribeAttributes(a), ok)
	}
	ev.ObjectRef.Resource = "tokenreviews"
	if _, _, ok := cluster.ReviewedAttributes(ev); ok {
		t.Error("ReviewedAttributes(a TokenReview) = ok; want not a review of access")
	}
}

// TestGrants reads what a ServiceAccount of rendered manifests holds,
// with the comments beside each rule, keyed as the files write it.
func TestGrants(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "deploy")
	files := map[string]string{
		"kustomization.yaml": "namespace: app\nresources: [rbac.yaml]\n",
		"rbac.yaml": `apiVersion: v1
kind: ServiceAccount
metadata: {name: server}
---
# The role's head comment.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader}
rules:
# Not narrowed: the first rule's reason.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [list]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get] # Exercised by TestThere.
---
# Binding comment.
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}
subjects:
- kind: ServiceAccount
  name: server
`,
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, s := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m, err := cluster.Render(dir, cluster.RenderOptions{Namespace: "ns-1", NameSuffix: "-x"})
	if err != nil {
		t.Fatal(err)
	}
	grants := (&cluster.Cluster{}).Grants(t, "ns-1", "server-x", m)
	if len(grants) != 2 {
		t.Fatalf("Grants = %v; want the role's two rules", grants)
	}
	for i, want := range []string{"Not narrowed: the first rule's reason", "Exercised by TestThere"} {
		g := grants[i]
		if g.Namespace != "ns-1" || g.Index != i || !strings.HasSuffix(g.Key, "rbac.yaml Role reader rule "+string(rune('0'+i))) ||
			!strings.Contains(g.Comments, want) || !strings.Contains(g.Comments, "The role's head comment") || !strings.Contains(g.Comments, "Binding comment") {
			t.Errorf("grant %d = %+v; want namespace ns-1, key ...rbac.yaml Role reader rule %d, comments with %q and the documents' heads", i, g, i, want)
		}
	}
	if strings.Contains(grants[0].Comments, "Exercised by") || strings.Contains(grants[1].Comments, "Not narrowed") {
		t.Errorf("a rule's comments hold another rule's: %q, %q", grants[0].Comments, grants[1].Comments)
	}
	if g := (&cluster.Cluster{}).Grants(t, "ns-1", "other", m); len(g) != 0 {
		t.Errorf("Grants(another ServiceAccount) = %v; want none", g)
	}

	// Manifests read from one file, as kubectl apply -f sends them
	// (draproxy's admission-policy-check.yaml): the comments are that
	// file's.
	file := filepath.Join(t.TempDir(), "check.yaml")
	text := `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: lister}
rules:
- apiGroups: [admissionregistration.k8s.io]
  resources: [validatingadmissionpolicies]
  verbs: [list] # Exercised by TestElsewhere.
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: lister}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lister}
subjects:
- kind: ServiceAccount
  name: server-x
  namespace: ns-1
`
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	one := &cluster.Manifests{Dir: file}
	for _, doc := range strings.Split(text, "---\n") {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			t.Fatal(err)
		}
		one.Objects = append(one.Objects, obj)
	}
	grants = (&cluster.Cluster{}).Grants(t, "ns-1", "server-x", m, one)
	if len(grants) != 3 || !strings.HasSuffix(grants[2].Key, "check.yaml ClusterRole lister rule 0") || !strings.Contains(grants[2].Comments, "Exercised by TestElsewhere") {
		t.Errorf("Grants(with a one-file manifest) = %+v; want its rule keyed by its file, with its comments", grants)
	}
}

// FuzzAuditedChecks reads arbitrary audit events: AuditedChecks never
// panics, every check it returns is made as the event's user, and an
// impersonated request's checks are the impersonation's (the request
// itself is authorized as the impersonated user).
func FuzzAuditedChecks(f *testing.F) {
	f.Add(`{"verb":"create","user":{"username":"system:serviceaccount:dra-system:draproxy"},"objectRef":{"apiGroup":"resource.k8s.io","resource":"resourceslices","name":"s"},"impersonatedUser":{"username":"system:serviceaccount:gpu:plugin","uid":"u","groups":["system:serviceaccounts","system:serviceaccounts:gpu","system:authenticated"],"extra":{"authentication.kubernetes.io/node-name":["a"]}}}`)
	f.Add(`{"verb":"get","user":{"username":"system:serviceaccount:dra-system:draproxy"},"objectRef":{"apiGroup":"resource.k8s.io","resource":"resourceslices","name":"s"},"impersonatedUser":{"username":"system:node:a","groups":["system:nodes","system:authenticated"]},"authenticationMetadata":{"impersonationConstraint":"impersonate:associated-node"}}`)
	f.Add(`{"verb":"get","user":{"username":"x"},"requestURI":"/openid/v1/jwks?x=1"}`)
	f.Add(`{"verb":"create","user":{"username":"x"},"objectRef":{"apiGroup":"authorization.k8s.io","resource":"subjectaccessreviews"},"requestObject":{"spec":{"user":"y","nonResourceAttributes":{"path":"/metrics","verb":"get"}}}}`)
	f.Fuzz(func(t *testing.T, raw string) {
		var ev auditv1.Event
		if json.Unmarshal([]byte(raw), &ev) != nil {
			return
		}
		checks, maybe := cluster.AuditedChecks(&ev)
		for _, a := range slices.Concat(checks, maybe) {
			if a.GetUser() == nil || a.GetUser().GetName() != ev.User.Username {
				t.Fatalf("AuditedChecks(%s) has a check as %v; want %q", raw, a.GetUser(), ev.User.Username)
			}
			if ev.ImpersonatedUser != nil && !strings.HasPrefix(a.GetVerb(), "impersonate") {
				t.Fatalf("AuditedChecks(%s) of an impersonated request checks %s; want only the impersonation's", raw, cluster.DescribeAttributes(a))
			}
		}
		_, _, _ = cluster.ReviewedAttributes(&ev)
	})
}
