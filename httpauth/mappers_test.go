package httpauth_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/reviewauth/reviewauth/httpauth"
)

var alice = &user.DefaultInfo{Name: "alice", UID: "uid-alice", Groups: []string{"readers", "system:authenticated"}}

func mapOne(t *testing.T, m httpauth.AttributesMapper, method, target string) (authorizer.AttributesRecord, error) {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	attrs, err := m.Attributes(r, alice)
	if err != nil {
		return authorizer.AttributesRecord{}, err
	}
	if len(attrs) != 1 {
		t.Fatalf("Attributes(%s %s) returned %d sets; want 1", method, target, len(attrs))
	}
	return record(attrs[0]), nil
}

// record copies any Attributes into a comparable record.
func record(a authorizer.Attributes) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User:            a.GetUser(),
		Verb:            a.GetVerb(),
		Namespace:       a.GetNamespace(),
		APIGroup:        a.GetAPIGroup(),
		APIVersion:      a.GetAPIVersion(),
		Resource:        a.GetResource(),
		Subresource:     a.GetSubresource(),
		Name:            a.GetName(),
		ResourceRequest: a.IsResourceRequest(),
		Path:            a.GetPath(),
	}
}

func TestKubelet(t *testing.T) {
	t.Parallel()
	node := func(verb, sub, path string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{
			User: alice, Verb: verb, APIVersion: "v1", Resource: "nodes", Subresource: sub,
			Name: "node-1", ResourceRequest: true, Path: path,
		}
	}
	tests := []struct {
		method, path string
		want         authorizer.AttributesRecord
	}{
		{"GET", "/metrics", node("get", "metrics", "/metrics")},
		{"GET", "/metrics/", node("get", "metrics", "/metrics/")},
		{"GET", "/metrics/cadvisor", node("get", "metrics", "/metrics/cadvisor")},
		{"GET", "/metrics/resource", node("get", "metrics", "/metrics/resource")},
		{"GET", "/metrics/probes", node("get", "metrics", "/metrics/probes")},
		{"GET", "/metricsx", node("get", "proxy", "/metricsx")},
		{"GET", "/stats/summary", node("get", "stats", "/stats/summary")},
		{"GET", "/stats/", node("get", "stats", "/stats/")},
		{"GET", "/stats", node("get", "stats", "/stats")},
		{"GET", "/statsx", node("get", "proxy", "/statsx")},
		{"GET", "/logs/", node("get", "log", "/logs/")},
		{"GET", "/logs/syslog", node("get", "log", "/logs/syslog")},
		{"GET", "/logs", node("get", "log", "/logs")},
		{"GET", "/logsx", node("get", "proxy", "/logsx")},
		{"POST", "/checkpoint/ns/pod/c", node("create", "checkpoint", "/checkpoint/ns/pod/c")},
		{"GET", "/pods", node("get", "proxy", "/pods")},
		{"GET", "/healthz", node("get", "proxy", "/healthz")},
		{"GET", "/spec/", node("get", "proxy", "/spec/")},
		{"GET", "/configz", node("get", "proxy", "/configz")},
		{"GET", "/statusz", node("get", "statusz", "/statusz")},
		{"GET", "/statusz/x", node("get", "statusz", "/statusz/x")},
		{"GET", "/statuszx", node("get", "proxy", "/statuszx")},
		{"GET", "/flagz", node("get", "configz", "/flagz")},
		{"GET", "/flagz/", node("get", "configz", "/flagz/")},
		{"GET", "/Metrics", node("get", "proxy", "/Metrics")},
		{"POST", "/exec/ns/pod/c", node("create", "proxy", "/exec/ns/pod/c")},
		{"GET", "/", node("get", "proxy", "/")},
		{"HEAD", "/metrics", node("get", "metrics", "/metrics")},
		{"POST", "/metrics", node("create", "metrics", "/metrics")},
		{"PUT", "/logs/x", node("update", "log", "/logs/x")},
		{"PATCH", "/logs/x", node("patch", "log", "/logs/x")},
		{"DELETE", "/logs/x", node("delete", "log", "/logs/x")},
	}
	m := httpauth.Kubelet("node-1")
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			got, err := mapOne(t, m, tt.method, tt.path)
			if err != nil {
				t.Fatalf("Kubelet.Attributes(%s %s) error %v; want nil", tt.method, tt.path, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Kubelet.Attributes(%s %s) mismatch (-want +got):\n%s", tt.method, tt.path, diff)
			}
		})
	}
	for _, method := range []string{"OPTIONS", "CONNECT", "TRACE", "PROPFIND", "get"} {
		t.Run("method "+method, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/metrics", nil)
			r.Method = method
			attrs, err := m.Attributes(r, alice)
			if !errors.Is(err, httpauth.ErrMethodNotAllowed) || attrs != nil {
				t.Errorf("Kubelet.Attributes(%s /metrics) = %v, %v; want nil, ErrMethodNotAllowed", method, attrs, err)
			}
		})
	}
}

func TestRequestInfo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, method, target string
		want                 authorizer.AttributesRecord
	}{
		{
			name: "namespaced get", method: "GET", target: "/api/v1/namespaces/ns1/pods/p1",
			want: authorizer.AttributesRecord{User: alice, Verb: "get", Namespace: "ns1", APIVersion: "v1", Resource: "pods", Name: "p1", ResourceRequest: true, Path: "/api/v1/namespaces/ns1/pods/p1"},
		},
		{
			name: "namespaced list", method: "GET", target: "/api/v1/namespaces/ns1/pods",
			want: authorizer.AttributesRecord{User: alice, Verb: "list", Namespace: "ns1", APIVersion: "v1", Resource: "pods", ResourceRequest: true, Path: "/api/v1/namespaces/ns1/pods"},
		},
		{
			name: "grouped namespaced create", method: "POST", target: "/apis/snapshot.storage.k8s.io/v1/namespaces/ns1/volumesnapshots",
			want: authorizer.AttributesRecord{User: alice, Verb: "create", Namespace: "ns1", APIGroup: "snapshot.storage.k8s.io", APIVersion: "v1", Resource: "volumesnapshots", ResourceRequest: true, Path: "/apis/snapshot.storage.k8s.io/v1/namespaces/ns1/volumesnapshots"},
		},
		{
			name: "cluster-scoped get", method: "GET", target: "/api/v1/nodes/node-1",
			want: authorizer.AttributesRecord{User: alice, Verb: "get", APIVersion: "v1", Resource: "nodes", Name: "node-1", ResourceRequest: true, Path: "/api/v1/nodes/node-1"},
		},
		{
			name: "cluster-scoped grouped delete", method: "DELETE", target: "/apis/storage.k8s.io/v1/storageclasses/fast",
			want: authorizer.AttributesRecord{User: alice, Verb: "delete", APIGroup: "storage.k8s.io", APIVersion: "v1", Resource: "storageclasses", Name: "fast", ResourceRequest: true, Path: "/apis/storage.k8s.io/v1/storageclasses/fast"},
		},
		{
			name: "namespaced subresource", method: "GET", target: "/api/v1/namespaces/ns1/pods/p1/log",
			want: authorizer.AttributesRecord{User: alice, Verb: "get", Namespace: "ns1", APIVersion: "v1", Resource: "pods", Subresource: "log", Name: "p1", ResourceRequest: true, Path: "/api/v1/namespaces/ns1/pods/p1/log"},
		},
		{
			name: "cluster-scoped subresource", method: "PUT", target: "/api/v1/nodes/node-1/status",
			want: authorizer.AttributesRecord{User: alice, Verb: "update", APIVersion: "v1", Resource: "nodes", Subresource: "status", Name: "node-1", ResourceRequest: true, Path: "/api/v1/nodes/node-1/status"},
		},
		{
			name: "node proxy subresource", method: "GET", target: "/api/v1/nodes/node-1/proxy/metrics",
			want: authorizer.AttributesRecord{User: alice, Verb: "get", APIVersion: "v1", Resource: "nodes", Subresource: "proxy", Name: "node-1", ResourceRequest: true, Path: "/api/v1/nodes/node-1/proxy/metrics"},
		},
		{
			name: "watch", method: "GET", target: "/api/v1/namespaces/ns1/pods?watch=true",
			want: authorizer.AttributesRecord{User: alice, Verb: "watch", Namespace: "ns1", APIVersion: "v1", Resource: "pods", ResourceRequest: true, Path: "/api/v1/namespaces/ns1/pods"},
		},
		{
			name: "namespace itself", method: "GET", target: "/api/v1/namespaces/ns1",
			want: authorizer.AttributesRecord{User: alice, Verb: "get", Namespace: "ns1", APIVersion: "v1", Resource: "namespaces", Name: "ns1", ResourceRequest: true, Path: "/api/v1/namespaces/ns1"},
		},
		{
			name: "non-resource", method: "GET", target: "/healthz",
			want: authorizer.AttributesRecord{User: alice, Verb: "get", Path: "/healthz"},
		},
		{
			name: "discovery is non-resource", method: "GET", target: "/apis/storage.k8s.io/v1",
			want: authorizer.AttributesRecord{User: alice, Verb: "get", Path: "/apis/storage.k8s.io/v1"},
		},
	}
	m := httpauth.RequestInfo()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := mapOne(t, m, tt.method, tt.target)
			if err != nil {
				t.Fatalf("RequestInfo.Attributes(%s %s) error %v; want nil", tt.method, tt.target, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("RequestInfo.Attributes(%s %s) mismatch (-want +got):\n%s", tt.method, tt.target, diff)
			}
		})
	}

	t.Run("selectors", func(t *testing.T) {
		t.Parallel()
		r := httptest.NewRequest("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1&labelSelector=app%3Dweb", nil)
		attrs, err := m.Attributes(r, alice)
		if err != nil || len(attrs) != 1 {
			t.Fatalf("RequestInfo.Attributes(list with selectors) = %v, %v; want one set", attrs, err)
		}
		fs, err := attrs[0].GetFieldSelector()
		if err != nil || len(fs) != 1 || fs[0].Field != "spec.nodeName" || fs[0].Value != "node-1" || fs[0].Operator != selection.Equals {
			t.Errorf("GetFieldSelector() = %v, %v; want spec.nodeName=node-1", fs, err)
		}
		ls, err := attrs[0].GetLabelSelector()
		if err != nil || len(ls) != 1 || ls[0].Key() != "app" {
			t.Errorf("GetLabelSelector() = %v, %v; want app=web", ls, err)
		}
	})
}

func TestNonResource(t *testing.T) {
	t.Parallel()
	m := httpauth.NonResource()
	for _, method := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			got, err := mapOne(t, m, method, "/metrics")
			want := authorizer.AttributesRecord{User: alice, Verb: strings.ToLower(method), Path: "/metrics"}
			if err != nil || !cmp.Equal(want, got) {
				t.Errorf("NonResource.Attributes(%s /metrics) = %+v, %v; want %+v", method, got, err, want)
			}
		})
	}
}

func TestStaticRoutes(t *testing.T) {
	t.Parallel()
	m, err := httpauth.StaticRoutes(
		httpauth.Route{Path: "/metrics", Methods: []string{"get"}, Attributes: []authorizer.AttributesRecord{{Path: "/metrics"}}},
		httpauth.Route{Path: "/snapshots/*", Attributes: []authorizer.AttributesRecord{
			{ResourceRequest: true, APIGroup: "snapshot.storage.k8s.io", Resource: "volumesnapshots", Namespace: "ns1", Name: "a"},
			{ResourceRequest: true, APIGroup: "snapshot.storage.k8s.io", Resource: "volumesnapshots", Namespace: "ns1", Name: "b", Verb: "list"},
		}},
		httpauth.Route{Path: "/*", Attributes: []authorizer.AttributesRecord{{Verb: "admin"}}},
	)
	if err != nil {
		t.Fatalf("StaticRoutes() error %v", err)
	}
	tests := []struct {
		name, method, path string
		want               []authorizer.AttributesRecord
		wantErr            error
	}{
		{name: "exact with method", method: "GET", path: "/metrics", want: []authorizer.AttributesRecord{{User: alice, Verb: "get", Path: "/metrics"}}},
		{name: "method mismatch falls through", method: "POST", path: "/metrics", want: []authorizer.AttributesRecord{{User: alice, Verb: "admin", Path: "/metrics"}}},
		{name: "prefix with two sets", method: "DELETE", path: "/snapshots/x", want: []authorizer.AttributesRecord{
			{User: alice, Verb: "delete", ResourceRequest: true, APIGroup: "snapshot.storage.k8s.io", Resource: "volumesnapshots", Namespace: "ns1", Name: "a", Path: "/snapshots/x"},
			{User: alice, Verb: "list", ResourceRequest: true, APIGroup: "snapshot.storage.k8s.io", Resource: "volumesnapshots", Namespace: "ns1", Name: "b", Path: "/snapshots/x"},
		}},
		{name: "resource route unknown method", method: "OPTIONS", path: "/snapshots/x", wantErr: httpauth.ErrMethodNotAllowed},
		{name: "catch-all", method: "GET", path: "/other", want: []authorizer.AttributesRecord{{User: alice, Verb: "admin", Path: "/other"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			attrs, err := m.Attributes(httptest.NewRequest(tt.method, tt.path, nil), alice)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("StaticRoutes.Attributes(%s %s) error %v; want %v", tt.method, tt.path, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("StaticRoutes.Attributes(%s %s) error %v", tt.method, tt.path, err)
			}
			var got []authorizer.AttributesRecord
			for _, a := range attrs {
				got = append(got, record(a))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("StaticRoutes.Attributes(%s %s) mismatch (-want +got):\n%s", tt.method, tt.path, diff)
			}
		})
	}

	t.Run("no match", func(t *testing.T) {
		t.Parallel()
		m, err := httpauth.StaticRoutes(httpauth.Route{Path: "/metrics", Attributes: []authorizer.AttributesRecord{{}}})
		if err != nil {
			t.Fatal(err)
		}
		attrs, err := m.Attributes(httptest.NewRequest("GET", "/logs", nil), alice)
		if err != nil || len(attrs) != 0 {
			t.Errorf("StaticRoutes.Attributes(GET /logs) = %v, %v; want no sets", attrs, err)
		}
	})

	for _, bad := range []httpauth.Route{
		{Path: "metrics", Attributes: []authorizer.AttributesRecord{{}}},
		{Path: "/a/../b", Attributes: []authorizer.AttributesRecord{{}}},
		{Path: "/a*b", Attributes: []authorizer.AttributesRecord{{}}},
		{Path: "/a"},
		{Path: "/a", Methods: []string{""}, Attributes: []authorizer.AttributesRecord{{}}},
	} {
		if _, err := httpauth.StaticRoutes(bad); err == nil {
			t.Errorf("StaticRoutes(%+v) error nil; want an error", bad)
		}
	}
}

// fuzzRequest builds a request whose URL path is path, as the middleware
// hands it to mappers after cleaning.
func fuzzRequest(t *testing.T, method, path string) (*http.Request, bool) {
	clean, err := httpauth.CleanPath(path)
	if err != nil {
		return nil, false
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Method = method
	r.URL.Path = clean
	return r, true
}

var mapperSeeds = []string{"/metrics", "/metrics/cadvisor", "/stats/summary", "/logs/", "/checkpoint/a/b/c", "/pods", "//logs", "/metrics/../logs/x",
	"/api/v1/namespaces/ns/pods/p/log", "/apis/g/v1/nodes/n/status", "/api/v1/namespaces/ns", "/apis", "/api/v1/watch/pods"}

func FuzzKubelet(f *testing.F) {
	for _, s := range mapperSeeds {
		f.Add("GET", s)
	}
	f.Add("POST", "/exec/ns/p/c")
	f.Add("BREW", "/metrics")
	m := httpauth.Kubelet("node-1")
	subs := map[string]string{"/metrics": "metrics", "/stats": "stats", "/logs": "log", "/checkpoint": "checkpoint"}
	f.Fuzz(func(t *testing.T, method, path string) {
		r, ok := fuzzRequest(t, method, path)
		if !ok {
			return
		}
		attrs, err := m.Attributes(r, alice)
		if err != nil {
			if !errors.Is(err, httpauth.ErrMethodNotAllowed) || attrs != nil {
				t.Fatalf("Kubelet.Attributes(%q %q) = %v, %v; want only ErrMethodNotAllowed errors", method, r.URL.Path, attrs, err)
			}
			return
		}
		if len(attrs) != 1 {
			t.Fatalf("Kubelet.Attributes(%q %q) = %d sets; want 1", method, r.URL.Path, len(attrs))
		}
		a := attrs[0]
		if a.GetName() != "node-1" || a.GetResource() != "nodes" || a.GetAPIGroup() != "" || a.GetAPIVersion() != "v1" || !a.IsResourceRequest() || a.GetUser() != alice {
			t.Fatalf("Kubelet.Attributes(%q %q) = %+v; want nodes node-1 v1 for alice", method, r.URL.Path, record(a))
		}
		first := "/" + strings.SplitN(r.URL.Path, "/", 3)[1]
		want, ok := subs[first]
		if !ok {
			want = "proxy"
		}
		if a.GetSubresource() != want {
			t.Fatalf("Kubelet.Attributes(%q %q).Subresource = %q; want %q", method, r.URL.Path, a.GetSubresource(), want)
		}
	})
}

func FuzzRequestInfo(f *testing.F) {
	for _, s := range mapperSeeds {
		f.Add("GET", s)
	}
	f.Add("POST", "/api/v1/namespaces/ns/pods")
	f.Add("PROPFIND", "/metrics")
	f.Add("get", "/apis")
	m := httpauth.RequestInfo()
	factory := &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	f.Fuzz(func(t *testing.T, method, path string) {
		r, ok := fuzzRequest(t, method, path)
		if !ok {
			return
		}
		attrs, err := m.Attributes(r, alice)
		if err != nil {
			return
		}
		if len(attrs) != 1 {
			t.Fatalf("RequestInfo.Attributes(%q %q) = %d sets; want 1", method, r.URL.Path, len(attrs))
		}
		a := attrs[0]
		if a.GetPath() != r.URL.Path || a.GetUser() != alice {
			t.Fatalf("RequestInfo.Attributes(%q %q) = %+v; want path %q for alice", method, r.URL.Path, record(a), r.URL.Path)
		}
		if a.IsResourceRequest() && (a.GetResource() == "" || a.GetAPIVersion() == "") {
			t.Fatalf("RequestInfo.Attributes(%q %q) = %+v; resource request without resource or version", method, r.URL.Path, record(a))
		}
		// The mapper must agree with the API server's own parsing.
		info, err := factory.NewRequestInfo(r)
		if err != nil {
			t.Fatalf("RequestInfoFactory failed where the mapper did not: %v", err)
		}
		want := authorizer.AttributesRecord{User: alice, Verb: info.Verb, Namespace: info.Namespace, APIGroup: info.APIGroup,
			APIVersion: info.APIVersion, Resource: info.Resource, Subresource: info.Subresource, Name: info.Name,
			ResourceRequest: info.IsResourceRequest, Path: info.Path}
		if diff := cmp.Diff(want, record(a)); diff != "" {
			t.Fatalf("RequestInfo.Attributes(%q %q) differs from RequestInfoFactory (-want +got):\n%s", method, r.URL.Path, diff)
		}
	})
}

func FuzzNonResource(f *testing.F) {
	for _, s := range mapperSeeds {
		f.Add("GET", s)
	}
	m := httpauth.NonResource()
	f.Fuzz(func(t *testing.T, method, path string) {
		r, ok := fuzzRequest(t, method, path)
		if !ok {
			return
		}
		attrs, err := m.Attributes(r, alice)
		if err != nil || len(attrs) != 1 {
			t.Fatalf("NonResource.Attributes(%q %q) = %v, %v; want one set", method, r.URL.Path, attrs, err)
		}
		a := attrs[0]
		if a.IsResourceRequest() || a.GetPath() != r.URL.Path || a.GetVerb() != strings.ToLower(method) {
			t.Fatalf("NonResource.Attributes(%q %q) = %+v; want non-resource %q %q", method, r.URL.Path, record(a), strings.ToLower(method), r.URL.Path)
		}
	})
}

func FuzzStaticRoutes(f *testing.F) {
	for _, s := range mapperSeeds {
		f.Add("GET", s)
	}
	m, err := httpauth.StaticRoutes(
		httpauth.Route{Path: "/metrics", Attributes: []authorizer.AttributesRecord{{Path: "/metrics"}}},
		httpauth.Route{Path: "/logs/*", Methods: []string{"GET"}, Attributes: []authorizer.AttributesRecord{{ResourceRequest: true, Resource: "nodes", Subresource: "log"}}},
	)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, path string) {
		r, ok := fuzzRequest(t, method, path)
		if !ok {
			return
		}
		attrs, err := m.Attributes(r, alice)
		if err != nil {
			t.Fatalf("StaticRoutes.Attributes(%q %q) error %v", method, r.URL.Path, err)
		}
		switch {
		case r.URL.Path == "/metrics":
			if len(attrs) != 1 || attrs[0].GetPath() != "/metrics" || attrs[0].IsResourceRequest() {
				t.Fatalf("StaticRoutes.Attributes(%q /metrics) = %v; want the /metrics route", method, attrs)
			}
		case strings.HasPrefix(r.URL.Path, "/logs/") && method == "GET":
			if len(attrs) != 1 || attrs[0].GetSubresource() != "log" || attrs[0].GetVerb() != "get" {
				t.Fatalf("StaticRoutes.Attributes(GET %q) = %v; want the /logs/* route", r.URL.Path, attrs)
			}
		default:
			if len(attrs) != 0 {
				t.Fatalf("StaticRoutes.Attributes(%q %q) = %v; want no sets", method, r.URL.Path, attrs)
			}
		}
	})
}
