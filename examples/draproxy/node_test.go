package main

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/httpauth"
)

// TestMutationLog: every write draproxy forwards is one log line naming
// the driver, its pod, the verb, the object, the UID precondition
// draproxy added and the API server's status and Audit-ID (the key of
// the request's event in the API server's audit log); reads and refused
// writes are not; no token is ever in it.
func TestMutationLog(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	f.addSlice("a-1", "node-a")
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{})
	inner := testHandler(t, f)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(w, r.WithContext(klog.NewContext(r.Context(), logger)))
	}))
	t.Cleanup(srv.Close)
	h := &harness{f: f, url: srv.URL}
	token := f.token(driverOn("node-a"))
	// The fake answers writes with an Audit-ID, as the API server does.
	hook := func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		w.Header().Set("Audit-Id", "audit-"+r.Method)
		return false
	}
	f.fault.Store(&hook)
	json := http.Header{"Content-Type": {mediaJSON}}
	for _, req := range []struct {
		method, path, body string
		header             http.Header
		want               string // "" for no line
	}{
		{http.MethodPost, sliceCollection, sliceBody("new", "node-a", testDriver), json,
			`"verb"="create" "resource"="resourceslices" "subresource"="" "namespace"="" "name"="" "uidPrecondition"="" "status"=201 "auditID"="audit-POST"`},
		{http.MethodPatch, slicePath("a-1"), `{"metadata":{"labels":{"x":"y"}}}`, http.Header{"Content-Type": {mediaMergePatch}},
			`"verb"="patch" "resource"="resourceslices" "subresource"="" "namespace"="" "name"="a-1" "uidPrecondition"="uid-a-1" "status"=200 "auditID"="audit-PATCH"`},
		{http.MethodDelete, slicePath("a-1"), "", nil,
			`"verb"="delete" "resource"="resourceslices" "subresource"="" "namespace"="" "name"="a-1" "uidPrecondition"="uid-a-1" "status"=200 "auditID"="audit-DELETE"`},
		{http.MethodGet, slicePath("new"), "", nil, ""},
		{http.MethodPost, sliceCollection, sliceBody("b", "node-b", testDriver), json, ""}, // refused by draproxy: not forwarded
	} {
		mu.Lock()
		lines = nil
		mu.Unlock()
		code, body := h.do(t, req.method, req.path, token, []byte(req.body), req.header)
		mu.Lock()
		var logged []string
		for _, l := range lines {
			if strings.Contains(l, "forwarded a write as the node") {
				logged = append(logged, l)
			}
			if strings.Contains(l, token) {
				t.Errorf("a log line holds the driver's token: %s", l)
			}
		}
		mu.Unlock()
		switch {
		case req.want == "" && len(logged) != 0:
			t.Errorf("%s %s = %d: logged %q; want no write logged", req.method, req.path, code, logged)
		case req.want != "" && (len(logged) != 1 || !strings.Contains(logged[0], req.want) ||
			!strings.Contains(logged[0], `"driver"="system:serviceaccount:dra:driver" "pod"="dra/driver-node-a" "podUID"="pod-uid-node-a"`) ||
			!strings.Contains(logged[0], `"as"="system:node:node-a"`)):
			t.Errorf("%s %s = %d %s: logged %q; want one line with %s", req.method, req.path, code, body, logged, req.want)
		}
	}
}

// TestNodeImpersonation: draproxy impersonates its node by name alone
// (the associated-node mode takes nothing else), whoever the driver is;
// every header it writes is one of Names, which the middleware deletes
// from the driver's request in every spelling; the transport refuses a
// request that impersonates anything but the node alone. The User-Agent
// names the driver and its pod before what the driver sent, which is
// bounded.
func TestNodeImpersonation(t *testing.T) {
	t.Parallel()
	n := newNodeImpersonation("node-a")
	u := driverOn("node-a")
	got := http.Header{}
	n.Set(got, u)
	if want := (http.Header{"Impersonate-User": {"system:node:node-a"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("Set = %v; want %v", got, want)
	}
	fw, err := httpauth.NewForwarder(httpauth.ForwarderOptions{Identity: n})
	if err != nil {
		t.Fatal(err)
	}
	out := http.Header{"Impersonate-Group": {"system:masters"}, "Impersonate-Extra-Authentication.kubernetes.io%2fnode-Name": {"node-b"}}
	fw.Header(out, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(request.WithUser(t.Context(), u)))
	if want := (http.Header{"Impersonate-User": {"system:node:node-a"}}); !reflect.DeepEqual(out, want) {
		t.Errorf("Forwarder.Header = %v; want %v", out, want)
	}
	for k := range got {
		if !slices.ContainsFunc(n.Names(), func(name string) bool {
			return k == name || (strings.HasSuffix(name, "*") && strings.HasPrefix(k, strings.TrimSuffix(name, "*")))
		}) {
			t.Errorf("Set writes %s, which Names %q does not name", k, n.Names())
		}
	}
	req := func(h http.Header, u user.Info) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if u != nil {
			r = r.WithContext(request.WithUser(t.Context(), u))
		}
		r.Header = h
		return r
	}
	rt := impersonating{base: roundTripperFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	}), node: n}
	for name, r := range map[string]*http.Request{
		"no impersonation":   req(http.Header{}, u),
		"another node":       req(http.Header{"Impersonate-User": {"system:node:node-b"}}, u),
		"the driver":         req(http.Header{"Impersonate-User": {driverSA}}, u),
		"the node and group": req(http.Header{"Impersonate-User": {"system:node:node-a"}, "Impersonate-Group": {"system:masters"}}, u),
		"the node twice":     req(http.Header{"Impersonate-User": {"system:node:node-a", "system:node:node-a"}}, u),
		"no driver":          req(http.Header{"Impersonate-User": {"system:node:node-a"}}, nil),
	} {
		if _, err := rt.RoundTrip(r); err == nil {
			t.Errorf("impersonating.RoundTrip(%s) = nil error; want a refusal", name)
		}
	}
	if res, err := rt.RoundTrip(req(http.Header{"Impersonate-User": {"system:node:node-a"}}, u)); err != nil {
		t.Errorf("impersonating.RoundTrip(the node) = %v", err)
	} else {
		res.Body.Close()
	}

	for _, tt := range []struct {
		u    user.Info
		sent []string
		want string
	}{
		{u, []string{"driver/1.0"}, "draproxy/node-a (driver=" + driverSA + "; pod=dra/driver-node-a; pod-uid=pod-uid-node-a) driver/1.0"},
		{u, nil, "draproxy/node-a (driver=" + driverSA + "; pod=dra/driver-node-a; pod-uid=pod-uid-node-a)"},
		{driverOn(""), []string{""}, "draproxy/node-a (driver=" + driverSA + ")"},
		{u, []string{strings.Repeat("x", 1000)}, "draproxy/node-a (driver=" + driverSA + "; pod=dra/driver-node-a; pod-uid=pod-uid-node-a) " + strings.Repeat("x", maxDriverUserAgent)},
	} {
		if got := forwardedUserAgent("node-a", tt.u, tt.sent); got != tt.want {
			t.Errorf("forwardedUserAgent(%s, %q) = %q; want %q", tt.u.GetName(), tt.sent, got, tt.want)
		}
	}
}

// TestServiceAccountNamespace: the namespace of a user name as the API
// server's serviceaccount.SplitUsername reads it (the oracle).
func TestServiceAccountNamespace(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"system:serviceaccount:ns:sa", "system:serviceaccount:ns:", "system:serviceaccount::sa", "system:serviceaccount:ns:sa:x",
		"system:serviceaccount:ns", "system:node:a", "admin", "", "system:serviceaccount:a:b:c"} {
		ns, _, err := serviceaccount.SplitUsername(name)
		if err != nil {
			ns = ""
		}
		if got := serviceAccountNamespace(name); got != ns {
			t.Errorf("serviceAccountNamespace(%q) = %q; want %q (serviceaccount.SplitUsername)", name, got, ns)
		}
	}
}
