package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/examples/internal/difftest"
	"github.com/reviewauth/reviewauth/httpauth"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections close asynchronously once a server
		// is gone.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("net/http.(*http2ClientConn).readLoop"),
	)
}

// harness is a draproxy handler for node-a in front of a fakeAPI, served
// over plain HTTP on loopback.
type harness struct {
	f   *fakeAPI
	url string
	clk *clocktesting.FakeClock
}

func startProxy(t testing.TB, f *fakeAPI, mods ...func(*options)) *harness {
	t.Helper()
	h := &harness{f: f, clk: clocktesting.NewFakeClock(time.Now())}
	srv := httptest.NewServer(testHandler(t, f, append([]func(*options){func(o *options) { o.Clock = h.clk }}, mods...)...))
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// testHandler is draproxy's handler for node-a in front of f, with the
// test drivers, reviewing with f's authtest server, changed by mods.
func testHandler(t testing.TB, f *fakeAPI, mods ...func(*options)) http.Handler {
	t.Helper()
	an, err := authn.NewForConfig(f.config(), authn.Options{Audiences: []string{testAudience}})
	if err != nil {
		t.Fatal(err)
	}
	sar, err := authz.NewForConfig(f.config(), authz.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := options{NodeName: "node-a", Drivers: testDrivers(), Authenticator: an, SAR: sar, Upstream: f.config()}
	for _, m := range mods {
		m(&o)
	}
	handler, err := newProxy(o)
	if err != nil {
		t.Fatal(err)
	}
	return handler
}

// socketClients serves handler on a Unix socket as main serves it
// (HTTP/1.1 and h2c), until the test ends, and returns the socket's path
// and a client for each protocol ("HTTP/1.1", "h2c"), reaching it as
// http://localhost.
func socketClients(t testing.TB, handler http.Handler) (string, map[string]*http.Client) {
	t.Helper()
	sock := filepath.Join(shortDir(t), "draproxy.sock")
	serveUnix(t, handler, sock)
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}
	h1 := &http.Transport{DialContext: dial}
	h2c := &http.Transport{DialContext: dial, Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(h1.CloseIdleConnections)
	t.Cleanup(h2c.CloseIdleConnections)
	return sock, map[string]*http.Client{
		"HTTP/1.1": {Transport: h1, Timeout: 20 * time.Second},
		"h2c":      {Transport: h2c, Timeout: 20 * time.Second},
	}
}

// client is client-go pointed at the proxy with token, sending JSON as a
// driver configured for draproxy does.
func (h *harness) client(t testing.TB, token string, mods ...func(*rest.Config)) *kubernetes.Clientset {
	t.Helper()
	cfg := &rest.Config{Host: h.url, BearerToken: token, QPS: -1, Timeout: 10 * time.Second}
	cfg.ContentType = "application/json"
	for _, m := range mods {
		m(cfg)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// do sends one raw request to the proxy and returns its status and body.
func (h *harness) do(t testing.TB, method, target, token string, body []byte, header http.Header) (int, string) {
	t.Helper()
	resp := h.send(t, method, target, token, body, header)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// send sends one raw request to the proxy, with token as its bearer token
// unless it is empty, and returns the response, whose body the caller
// closes.
func (h *harness) send(t testing.TB, method, target, token string, body []byte, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, h.url+target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func newSlice(node string) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "gpu-"},
		Spec: resourcev1.ResourceSliceSpec{
			Driver: "gpu.example.com",
			Pool:   resourcev1.ResourcePool{Name: "pool", ResourceSliceCount: 1},
		},
	}
	if node != "" {
		s.Spec.NodeName = ptr.To(node)
	}
	return s
}

// wantStatus checks that err is a Kubernetes Status error with code whose
// message contains msg.
func wantStatus(t testing.TB, what string, err error, code int32, msg string) {
	t.Helper()
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		t.Errorf("%s = %v; want a Status error %d", what, err, code)
		return
	}
	if st := se.Status(); st.Code != code || !strings.Contains(st.Message, msg) {
		t.Errorf("%s = %d %q; want %d containing %q", what, st.Code, st.Message, code, msg)
	}
}

func TestSlices(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	h := startProxy(t, f)
	f.addSlice("a-1", "node-a")
	f.addSlice("b-1", "node-b")
	f.addSlice("none-1", "")
	rs := h.client(t, f.token(driverOn("node-a"))).ResourceV1().ResourceSlices()
	ctx := t.Context()
	const need = "requires the field selector spec.nodeName=node-a"

	t.Run("list", func(t *testing.T) {
		_, err := rs.List(ctx, metav1.ListOptions{})
		wantStatus(t, "List(no selector)", err, http.StatusForbidden, need)
		_, err = rs.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-b"})
		wantStatus(t, "List(node-b)", err, http.StatusForbidden, need)
		_, err = rs.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName!=node-b"})
		wantStatus(t, "List(!= node-b)", err, http.StatusForbidden, need)
		_, err = rs.List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=gpu.example.com"})
		wantStatus(t, "List(driver only)", err, http.StatusForbidden, need)
		for _, sel := range []string{"spec.nodeName=node-a", "spec.driver=gpu.example.com,spec.nodeName=node-a"} {
			l, err := rs.List(ctx, metav1.ListOptions{FieldSelector: sel})
			if err != nil {
				t.Fatalf("List(%s) = %v", sel, err)
			}
			if len(l.Items) != 1 || l.Items[0].Name != "a-1" {
				t.Errorf("List(%s) = %d items; want a-1 only", sel, len(l.Items))
			}
		}
	})
	t.Run("watch", func(t *testing.T) {
		_, err := rs.Watch(ctx, metav1.ListOptions{})
		wantStatus(t, "Watch(no selector)", err, http.StatusForbidden, need)
		w, err := rs.Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		f.addSlice("b-2", "node-b")
		f.addSlice("a-2", "node-a")
		select {
		case ev := <-w.ResultChan():
			if s, ok := ev.Object.(*resourcev1.ResourceSlice); !ok || s.Name != "a-2" {
				t.Errorf("watch event = %v %T; want a-2", ev.Type, ev.Object)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no watch event within 10s")
		}
	})
	t.Run("one slice", func(t *testing.T) {
		const notOurs = `not found (draproxy shows a driver only the ResourceSlices of node "node-a")`
		if _, err := rs.Get(ctx, "a-1", metav1.GetOptions{}); err != nil {
			t.Errorf("Get(a-1) = %v", err)
		}
		// Another node's slice, one bound to no node, and none at all
		// look alike: the API server's 404.
		for _, name := range []string{"b-1", "none-1", "missing"} {
			_, err := rs.Get(ctx, name, metav1.GetOptions{})
			wantStatus(t, "Get("+name+")", err, http.StatusNotFound, notOurs)
			_, err = rs.Update(ctx, &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.ResourceSliceSpec{NodeName: ptr.To("node-a"), Driver: testDriver}}, metav1.UpdateOptions{})
			wantStatus(t, "Update("+name+")", err, http.StatusNotFound, notOurs)
			_, err = rs.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			wantStatus(t, "Patch("+name+")", err, http.StatusNotFound, notOurs)
			err = rs.Delete(ctx, name, metav1.DeleteOptions{})
			wantStatus(t, "Delete("+name+")", err, http.StatusNotFound, notOurs)
		}
		if _, err := rs.Update(ctx, &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "a-1"}, Spec: resourcev1.ResourceSliceSpec{NodeName: ptr.To("node-a"), Driver: testDriver}}, metav1.UpdateOptions{}); err != nil {
			t.Errorf("Update(a-1) = %v", err)
		}
		apply := func(name, node string) error {
			_, err := rs.Patch(ctx, name, types.ApplyPatchType, []byte(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","spec":{"nodeName":"`+node+`","driver":"`+testDriver+`"}}`), metav1.PatchOptions{FieldManager: "x"})
			return err
		}
		if err := apply("a-1", "node-a"); err != nil {
			t.Errorf("Patch(a-1, apply) = %v", err)
		}
		// A partial apply (no spec.nodeName) is checked as the create it
		// may be.
		_, err := rs.Patch(ctx, "a-1", types.ApplyPatchType, []byte(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice"}`), metav1.PatchOptions{FieldManager: "x"})
		wantStatus(t, "Patch(a-1, partial apply)", err, http.StatusForbidden, "it has none")
		// Server-side apply of a slice that does not exist would create
		// it: checked as a create, then forwarded as the node, which the
		// Node authorizer lets patch only a slice of its own.
		const noEdge = `no relationship found between node "node-a"`
		wantStatus(t, "Patch(new slice of node-a, apply)", apply("new-by-apply", "node-a"), http.StatusForbidden, noEdge)
		wantStatus(t, "Patch(new slice of node-b, apply)", apply("new-by-apply-b", "node-b"), http.StatusForbidden, `must have spec.nodeName "node-a" (this node), not "node-b"`)
		wantStatus(t, "Patch(b-1, apply)", apply("b-1", "node-b"), http.StatusForbidden, `not "node-b"`)
		wantStatus(t, "Patch(b-1, apply as node-a)", apply("b-1", "node-a"), http.StatusForbidden, noEdge)
		if err := rs.Delete(ctx, "a-1", metav1.DeleteOptions{}); err != nil {
			t.Errorf("Delete(a-1) = %v", err)
		}
		if n, _ := f.sliceNode("b-1"); n != "node-b" {
			t.Errorf("b-1 is now of node %q; want node-b", n)
		}
		if n, _ := f.sliceNode("new-by-apply-b"); n != "" {
			t.Errorf("new-by-apply-b was created on node %q; want none", n)
		}
	})
	t.Run("create", func(t *testing.T) {
		if s, err := rs.Create(ctx, newSlice("node-a"), metav1.CreateOptions{}); err != nil || *s.Spec.NodeName != "node-a" {
			t.Errorf("Create(node-a) = %v, %v", s, err)
		}
		_, err := rs.Create(ctx, newSlice("node-b"), metav1.CreateOptions{})
		wantStatus(t, "Create(node-b)", err, http.StatusForbidden, `must have spec.nodeName "node-a" (this node), not "node-b"`)
		_, err = rs.Create(ctx, newSlice(""), metav1.CreateOptions{})
		wantStatus(t, "Create(no node)", err, http.StatusForbidden, `must have spec.nodeName "node-a" (this node); it has none`)
		allNodes := newSlice("")
		allNodes.Spec.AllNodes = ptr.To(true)
		_, err = rs.Create(ctx, allNodes, metav1.CreateOptions{})
		wantStatus(t, "Create(all nodes)", err, http.StatusForbidden, "it has none")
	})
	t.Run("create, protobuf", func(t *testing.T) {
		// client-go's default for built-in types.
		pb := h.client(t, f.token(driverOn("node-a")), func(c *rest.Config) { c.ContentType = "" }).ResourceV1().ResourceSlices()
		_, err := pb.Create(ctx, newSlice("node-a"), metav1.CreateOptions{})
		wantStatus(t, "Create(protobuf)", err, http.StatusUnsupportedMediaType, `set ContentType to "application/json" in the driver's rest.Config`)
		// Reads in protobuf pass through.
		if _, err := pb.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"}); err != nil {
			t.Errorf("List(protobuf) = %v", err)
		}
	})
	t.Run("deletecollection", func(t *testing.T) {
		err := rs.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		wantStatus(t, "DeleteCollection(no selector)", err, http.StatusForbidden, need)
		err = rs.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})
		wantStatus(t, "DeleteCollection(node-a, any driver)", err, http.StatusForbidden, "requires the field selector spec.driver=NAME")
		err = rs.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a,spec.driver=" + otherDriver})
		wantStatus(t, "DeleteCollection(node-a, another identity's driver)", err, http.StatusForbidden, `it has spec.driver = "other.example.com"`)
		if err := rs.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a,spec.driver=" + testDriver}); err != nil {
			t.Errorf("DeleteCollection(node-a, its driver) = %v", err)
		}
		if n, _ := f.sliceNode("b-1"); n != "node-b" {
			t.Errorf("b-1 after the deletecollections: node %q; want node-b", n)
		}
	})
}

// TestCreateBodies sends raw bodies: only a JSON object whose spec.nodeName
// is this node, said once, is forwarded, byte for byte.
func TestCreateBodies(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	h := startProxy(t, f)
	token := f.token(driverOn("node-a"))
	const target = "/apis/resource.k8s.io/v1/resourceslices"
	const d = `,"driver":"` + testDriver + `"`
	tests := []struct {
		name, contentType, body string
		want                    int
		forwarded               string // when not the body itself
	}{
		{name: "this node", contentType: "application/json", body: `{"metadata":{"name":"x1"},"spec":{"nodeName":"node-a"` + d + `}}`, want: http.StatusCreated},
		{name: "charset", contentType: "application/json; charset=utf-8", body: `{"metadata":{"name":"x2"},"spec":{"nodeName":"node-a"` + d + `}}`, want: http.StatusCreated},
		{name: "escaped key", contentType: "application/json", body: `{"metadata":{"name":"x3"},"spec":{"node\u004eame":"node-a"` + d + `}}`, want: http.StatusCreated},
		{name: "older version", contentType: "application/json", body: `{"apiVersion":"resource.k8s.io/v1beta1","spec":{"nodeName":"node-a"` + d + `}}`, want: http.StatusCreated},
		{name: "other node", contentType: "application/json", body: `{"spec":{"nodeName":"node-b"` + d + `}}`, want: http.StatusForbidden},
		{name: "null node", contentType: "application/json", body: `{"spec":{"nodeName":null` + d + `}}`, want: http.StatusForbidden},
		{name: "case differs", contentType: "application/json", body: `{"spec":{"NodeName":"node-a"` + d + `}}`, want: http.StatusForbidden},
		{name: "driver case differs", contentType: "application/json", body: `{"spec":{"nodeName":"node-a","Driver":"` + testDriver + `"}}`, want: http.StatusForbidden},
		{name: "duplicate nodeName", contentType: "application/json", body: `{"spec":{"nodeName":"node-a","nodeName":"node-b"` + d + `}}`, want: http.StatusBadRequest},
		{name: "duplicate driver", contentType: "application/json", body: `{"spec":{"nodeName":"node-a"` + d + `,"driver":"x.example.com"}}`, want: http.StatusBadRequest},
		{name: "duplicate spec", contentType: "application/json", body: `{"spec":{"nodeName":"node-b"},"spec":{"nodeName":"node-a"` + d + `}}`, want: http.StatusBadRequest},
		{name: "number", contentType: "application/json", body: `{"spec":{"nodeName":1}}`, want: http.StatusBadRequest},
		{name: "not an object", contentType: "application/json", body: `["spec"]`, want: http.StatusBadRequest},
		{name: "trailing data", contentType: "application/json", body: `{"spec":{"nodeName":"node-a"` + d + `}}{"spec":{"nodeName":"node-b"}}`, want: http.StatusBadRequest},
		{name: "empty", contentType: "application/json", body: ``, want: http.StatusBadRequest},
		{name: "yaml", contentType: "application/yaml", body: "spec:\n  nodeName: node-a\n  driver: " + testDriver + "\n", want: http.StatusCreated, forwarded: `{"spec":{"driver":"` + testDriver + `","nodeName":"node-a"}}`},
		{name: "yaml, other node", contentType: "application/yaml", body: "spec:\n  nodeName: node-b\n  driver: " + testDriver + "\n", want: http.StatusForbidden},
		{name: "protobuf", contentType: "application/vnd.kubernetes.protobuf", body: "k8s\x00", want: http.StatusUnsupportedMediaType},
		{name: "cbor", contentType: "application/cbor", body: "\xa0", want: http.StatusUnsupportedMediaType},
		{name: "no content type", contentType: "", body: `{"spec":{"nodeName":"node-a"}}`, want: http.StatusUnsupportedMediaType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.seen()
			hdr := http.Header{}
			if tt.contentType != "" {
				hdr.Set("Content-Type", tt.contentType)
			}
			code, body := h.do(t, http.MethodPost, target, token, []byte(tt.body), hdr)
			if code != tt.want {
				t.Fatalf("POST %s = %d %s; want %d", tt.body, code, body, tt.want)
			}
			var st metav1.Status
			if code != http.StatusCreated && (json.Unmarshal([]byte(body), &st) != nil || st.Kind != "Status" || int(st.Code) != code) {
				t.Errorf("POST %s answered %s; want a Status with code %d", tt.body, body, code)
			}
			var forwarded [][]byte
			for _, s := range f.seen() {
				if s.Method == http.MethodPost {
					forwarded = append(forwarded, s.Body)
				}
			}
			want := tt.body
			if tt.forwarded != "" {
				want = tt.forwarded
			}
			switch {
			case code == http.StatusCreated && (len(forwarded) != 1 || string(forwarded[0]) != want):
				t.Errorf("forwarded %q; want exactly %q", forwarded, want)
			case code != http.StatusCreated && len(forwarded) != 0:
				t.Errorf("forwarded %q; want nothing", forwarded)
			}
		})
	}
}

func TestClaims(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	h := startProxy(t, f)
	// Pods reference the claims they use (the Node authorizer's graph);
	// claims are reserved for pods by name and UID.
	f.addPod("gpu", "job-a", "uid-job-a", "node-a", "on-a", "on-a-and-b", "old-pod", "pending", "unreserved", "only-graph")
	f.addPod("gpu", "job-b", "uid-job-b", "node-b", "on-a-and-b", "on-b", "not-in-graph")
	f.addPod("gpu", "pending", "uid-pending", "", "pending")
	f.addClaim("gpu", "on-a", [2]string{"job-a", "uid-job-a"})
	f.addClaim("gpu", "on-a-and-b", [2]string{"job-b", "uid-job-b"}, [2]string{"job-a", "uid-job-a"})
	f.addClaim("gpu", "on-b", [2]string{"job-b", "uid-job-b"})
	f.addClaim("gpu", "old-pod", [2]string{"job-a", "uid-of-an-earlier-job-a"})
	f.addClaim("gpu", "gone-pod", [2]string{"gone", "uid-gone"})
	f.addClaim("gpu", "pending", [2]string{"pending", "uid-pending"})
	f.addClaim("gpu", "unreserved")
	// Reserved for job-b (node-b), referenced by job-a: the API server
	// returns it to node-a, draproxy's second line does not.
	f.addClaim("gpu", "only-graph", [2]string{"job-b", "uid-job-b"})
	// Reserved for job-a (node-a), referenced by no pod of node-a: the
	// API server does not return it to node-a.
	f.addClaim("gpu", "not-in-graph", [2]string{"job-a", "uid-job-a"})
	claims := h.client(t, f.token(driverOn("node-a"))).ResourceV1().ResourceClaims("gpu")
	ctx := t.Context()

	for _, name := range []string{"on-a", "on-a-and-b"} {
		if _, err := claims.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("Get(%s) = %v", name, err)
		}
	}
	const notOurs = `is not reserved for a pod on node "node-a", or does not exist`
	for _, name := range []string{"on-b", "old-pod", "gone-pod", "pending", "unreserved", "missing", "only-graph", "not-in-graph"} {
		_, err := claims.Get(ctx, name, metav1.GetOptions{})
		wantStatus(t, "Get("+name+")", err, http.StatusForbidden, notOurs)
	}
	// A claim's status is not forwarded: a node may not write it.
	for _, name := range []string{"on-a", "on-b"} {
		_, err := claims.UpdateStatus(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "gpu"}}, metav1.UpdateOptions{})
		wantStatus(t, "UpdateStatus("+name+")", err, http.StatusForbidden, "may not write a ResourceClaim's status")
		_, err = claims.Patch(ctx, name, types.MergePatchType, []byte(`{"status":{}}`), metav1.PatchOptions{}, "status")
		wantStatus(t, "Patch("+name+", status)", err, http.StatusForbidden, "may not write a ResourceClaim's status")
	}
	_, err := claims.List(ctx, metav1.ListOptions{})
	wantStatus(t, "List()", err, http.StatusForbidden, "draproxy refuses list of resourceclaims")
	_, err = claims.Watch(ctx, metav1.ListOptions{})
	wantStatus(t, "Watch()", err, http.StatusForbidden, "draproxy refuses watch of resourceclaims")
	_, err = claims.Update(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "on-a", Namespace: "gpu"}}, metav1.UpdateOptions{})
	wantStatus(t, "Update(on-a)", err, http.StatusForbidden, "not on its allow-list")
	err = claims.Delete(ctx, "on-a", metav1.DeleteOptions{})
	wantStatus(t, "Delete(on-a)", err, http.StatusForbidden, "not on its allow-list")
}

// TestClaimPodMoved is the sequence of issue #28: the pod a claim is
// reserved for is deleted on node-a and re-created under the same name on
// node-b, and the claim is reserved for both UIDs. Node-a's driver is
// refused the claim at once (nothing is remembered), both by the API
// server's graph and, when the graph still has the old pod (its lag, the
// graph frozen), by draproxy's own read of the pods as the node; and so
// on every read after. Each read of the claim reads the pods again.
func TestClaimPodMoved(t *testing.T) {
	t.Parallel()
	for _, lag := range []bool{false, true} {
		t.Run(fmt.Sprintf("graph lags %v", lag), func(t *testing.T) {
			t.Parallel()
			f := startFakeAPI(t)
			h := startProxy(t, f)
			f.addPod("gpu", "job", "uid-job-1", "node-a", "c")
			f.addClaim("gpu", "c", [2]string{"job", "uid-job-1"})
			claims := h.client(t, f.token(driverOn("node-a"))).ResourceV1().ResourceClaims("gpu")
			get := func() (error, int) {
				t.Helper()
				f.seen()
				_, err := claims.Get(t.Context(), "c", metav1.GetOptions{})
				podReads := 0
				for _, s := range f.seen() {
					if s.Path == podPath("gpu", "job") {
						podReads++
					}
				}
				return err, podReads
			}
			for range 2 {
				if err, reads := get(); err != nil || reads != 1 {
					t.Fatalf("Get(c) on node-a = %v, %d pod reads; want the claim, one read", err, reads)
				}
			}
			f.graphFrozen.Store(lag)
			f.remove(podPath("gpu", "job"))
			f.addPod("gpu", "job", "uid-job-2", "node-b", "c")
			f.addClaim("gpu", "c", [2]string{"job", "uid-job-1"}, [2]string{"job", "uid-job-2"})
			for range 2 {
				err, reads := get()
				wantStatus(t, "Get(c) after the pod moved to node-b", err, http.StatusForbidden, "is not reserved for a pod on node")
				if lag && reads != 1 {
					t.Errorf("Get(c), the graph lagging: %d pod reads; want 1 (the pod read again, as the node)", reads)
				}
			}
		})
	}
}

// TestCallers: tokens of other nodes, of no node, for another audience, or
// none at all never reach the API server.
func TestCallers(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	h := startProxy(t, f, func(o *options) { o.NodeUID = "uid-node-a" })
	f.addSlice("b-1", "node-b")
	earlier := driverOn("node-a")
	earlier.Extra["authentication.kubernetes.io/node-uid"] = []string{"uid-of-an-earlier-node-a"}
	tests := []struct {
		name  string
		token string
		want  int
	}{
		{name: "node-b's driver, its own selector", token: f.token(driverOn("node-b")), want: http.StatusForbidden},
		{name: "bound to no node", token: f.token(driverOn("")), want: http.StatusForbidden},
		{name: "earlier node of the same name", token: f.token(earlier), want: http.StatusForbidden},
		{name: "API server audience", token: f.auth.MintToken(driverOn("node-a"), nil, time.Now().Add(time.Hour)), want: http.StatusUnauthorized},
		{name: "unknown token", token: "not-a-token", want: http.StatusUnauthorized},
		{name: "no token", want: http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.seen()
			code, body := h.do(t, http.MethodGet, "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-b", tt.token, nil, nil)
			var st metav1.Status
			if code != tt.want || json.Unmarshal([]byte(body), &st) != nil || st.Kind != "Status" {
				t.Errorf("GET = %d %s; want a Status %d", code, body, tt.want)
			}
			if s := f.seen(); len(s) != 0 {
				t.Errorf("the API server received %d requests; want none", len(s))
			}
		})
	}
}

func TestAllowList(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	deviceClasses, err := parseAllow("get,list:deviceclasses.resource.k8s.io")
	if err != nil {
		t.Fatal(err)
	}
	h := startProxy(t, f, func(o *options) { o.Allow = []rule{deviceClasses} })
	f.put("/api/v1/nodes/node-a", map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": "node-a"}})
	f.put("/api/v1/nodes/node-b", map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": "node-b"}})
	f.put("/apis/resource.k8s.io/v1/deviceclasses/gpu", map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": map[string]any{"name": "gpu"}})
	token := f.token(driverOn("node-a"))
	tests := []struct {
		method, target string
		want           int
		msg            string
	}{
		{method: "GET", target: "/api/v1/nodes/node-a", want: http.StatusOK},
		{method: "GET", target: "/api/v1/nodes/node-b", want: http.StatusForbidden, msg: `only its own node`},
		{method: "GET", target: "/api/v1/nodes", want: http.StatusForbidden, msg: "list of nodes is not on its allow-list"},
		{method: "GET", target: "/apis/resource.k8s.io/v1/deviceclasses/gpu", want: http.StatusOK},
		{method: "GET", target: "/apis/resource.k8s.io/v1beta2/deviceclasses/gpu", want: http.StatusNotFound}, // forwarded; the fake serves v1 only
		{method: "DELETE", target: "/apis/resource.k8s.io/v1/deviceclasses/gpu", want: http.StatusForbidden, msg: "not on its allow-list"},
		{method: "GET", target: "/api/v1/namespaces/kube-system/configmaps/x", want: http.StatusForbidden, msg: "get of configmaps is not on its allow-list"},
		{method: "GET", target: "/api/v1/namespaces/kube-system/secrets/x", want: http.StatusForbidden, msg: "not on its allow-list"},
		{method: "POST", target: "/api/v1/namespaces/gpu/pods/p/exec?command=sh", want: http.StatusForbidden, msg: "pods/exec is not on its allow-list"},
		{method: "GET", target: "/version", want: http.StatusForbidden, msg: "no non-resource requests"},
		{method: "GET", target: "/apis", want: http.StatusForbidden, msg: "no non-resource requests"},
	}
	for _, tt := range tests {
		code, body := h.do(t, tt.method, tt.target, token, nil, nil)
		if code != tt.want || !strings.Contains(body, tt.msg) {
			t.Errorf("%s %s = %d %s; want %d with %q", tt.method, tt.target, code, body, tt.want, tt.msg)
		}
	}
}

func TestParseAllow(t *testing.T) {
	t.Parallel()
	good := map[string]rule{
		"get,list,watch:deviceclasses.resource.k8s.io": {group: "resource.k8s.io", resource: "deviceclasses", verbs: []string{"get", "list", "watch"}},
		"get:configmaps":                    {resource: "configmaps", verbs: []string{"get"}},
		"get:pods/log":                      {resource: "pods", subresource: "log", verbs: []string{"get"}},
		"create:leases.coordination.k8s.io": {group: "coordination.k8s.io", resource: "leases", verbs: []string{"create"}},
	}
	for s, want := range good {
		got, err := parseAllow(s)
		if err != nil || got.group != want.group || got.resource != want.resource || got.subresource != want.subresource || !slices.Equal(got.verbs, want.verbs) || got.check != sarOnly {
			t.Errorf("parseAllow(%q) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	for _, s := range []string{
		"", "get", ":configmaps", "get:", "GET:configmaps", "*:configmaps", "get:*", "get,,list:configmaps", "get:pods/log/x",
		"list:resourceclaims.resource.k8s.io", "get:resourceslices.resource.k8s.io", "list:nodes", "update:resourceclaims.resource.k8s.io/status",
	} {
		if r, err := parseAllow(s); err == nil {
			t.Errorf("parseAllow(%q) = %+v; want an error", s, r)
		}
	}
}

// TestForwardedIdentity: the API server sees the node, impersonated with
// draproxy's credentials, the driver named in the User-Agent before
// what the driver sent, and none of the identity headers the driver sent.
func TestForwardedIdentity(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	h := startProxy(t, f)
	token := f.token(driverOn("node-a"))
	spoof := http.Header{
		"Impersonate-User":  {"system:admin"},
		"Impersonate-Group": {"system:masters"},
		"Impersonate-Uid":   {"admin-uid"},
		"Impersonate-Extra-Authentication.kubernetes.io%2fnode-Name": {"node-b"},
		"X-Remote-User":   {"system:admin"},
		"X-Remote-Group":  {"system:masters"},
		"Audit-Id":        {"forged"},
		"Cookie":          {"session=1"},
		"X-Forwarded-For": {"10.0.0.1"},
		"User-Agent":      {"driver/1.0"},
		"Accept":          {"application/json"},
	}
	f.seen()
	code, body := h.do(t, http.MethodGet, "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-a", token, nil, spoof)
	if code != http.StatusOK {
		t.Fatalf("GET with spoofed headers = %d %s; want 200", code, body)
	}
	s := f.seen()
	if len(s) != 1 {
		t.Fatalf("the API server received %d requests; want 1", len(s))
	}
	got := s[0].Header
	want := http.Header{
		"Authorization":    {"Bearer " + f.proxyToken},
		"Impersonate-User": {"system:node:node-a"},
		"User-Agent":       {"draproxy/node-a (driver=" + driverSA + "; pod=dra/driver-node-a; pod-uid=pod-uid-node-a) driver/1.0"},
		"Accept":           {"application/json"},
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("forwarded %s = %q; want %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok && k != "Accept-Encoding" {
			t.Errorf("forwarded header %s = %q; want it dropped", k, got[k])
		}
	}

	// Protocol upgrades and encoded bodies are refused, not forwarded.
	for name, hdr := range map[string]http.Header{
		"upgrade":          {"Connection": {"Upgrade"}, "Upgrade": {"websocket"}},
		"content encoding": {"Content-Encoding": {"gzip"}},
	} {
		code, body := h.do(t, http.MethodGet, "/apis/resource.k8s.io/v1/resourceslices?watch=1&fieldSelector=spec.nodeName%3Dnode-a", token, nil, hdr)
		if code != http.StatusBadRequest && code != http.StatusUnsupportedMediaType {
			t.Errorf("GET with %s = %d %s; want 400 or 415", name, code, body)
		}
	}
	if s := f.seen(); len(s) != 0 {
		t.Errorf("the API server received %d requests; want none", len(s))
	}
}

// TestForwardedHeaders: the attacks of issue #21 on the headers draproxy
// authorizes and sets, over the Unix socket as drivers reach it, HTTP/1.1
// and h2c, each case once per protocol: the client's Connection header
// naming Impersonate-User and Content-Type takes away neither the
// impersonation nor the Content-Type that was authorized (HTTP/1.1: HTTP/2
// forbids Connection, and net/http's server answers an h2c request
// carrying one 400, frame by frame); Content-Type in two spellings, or
// twice, is 400 naming it, before any of draproxy's own reads; the apply
// type in variant spellings (of the header's name and of the media type)
// is either read as an apply and checked as a create, or refused, and the
// API server (the fake, reading the patch type as the API server's patch
// handler does) never applies what draproxy read as something else.
// Whatever reaches the API server carries one Content-Type, spelled
// canonically, and the driver's impersonation.
func TestForwardedHeaders(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	f.addSlice("a-1", "node-a")
	token := f.token(driverOn("node-a"))
	sock, clients := socketClients(t, testHandler(t, f))
	applyBody := func(name, node string) string {
		return fmt.Sprintf(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":%q},"spec":{"driver":%q,"nodeName":%q,"pool":{"name":"p","resourceSliceCount":1}}}`, name, testDriver, node)
	}
	type tc struct {
		name   string
		method string
		// path is a slice's path for %s, the case's own name.
		slice  bool
		node   string // the apply body's node; "" for no body
		header [][2]string
		h1Only bool // it carries a Connection header
		want   int
		// created: the write reached the API server (the case's slice,
		// node-a's, exists before it: an apply to a missing name is the
		// Node authorizer's to refuse).
		created bool
	}
	const apply = mediaApplyYAML
	cases := []tc{
		{name: "Connection names Impersonate-User and Content-Type", method: "PATCH", slice: true, node: "node-a", h1Only: true,
			header: [][2]string{{"Content-Type", apply}, {"Connection", "Impersonate-User, Content-Type"}}, want: http.StatusOK, created: true},
		{name: "Connection names every identity header and Authorization", method: "PATCH", slice: true, node: "node-a", h1Only: true,
			header: [][2]string{{"Content-Type", apply}, {"Connection", "impersonate-user, Impersonate-Group, impersonate_uid, Impersonate-Extra-Authentication.kubernetes.io%2fnode-Name, authorization, content_type"}}, want: http.StatusOK, created: true},
		{name: "Content_Type alongside Content-Type", method: "PATCH", slice: true, node: "node-b",
			header: [][2]string{{"Content-Type", mediaMergePatch}, {"Content_Type", apply}}, want: http.StatusBadRequest},
		{name: "Content_Type alongside Content-Type, same value", method: "PATCH", slice: true, node: "node-a",
			header: [][2]string{{"Content-Type", apply}, {"Content_Type", apply}}, want: http.StatusBadRequest},
		{name: "two Content-Type lines", method: "PATCH", slice: true, node: "node-b",
			header: [][2]string{{"Content-Type", mediaMergePatch}, {"Content-Type", apply}}, want: http.StatusBadRequest},
		{name: "two Content-Type lines, same value", method: "PATCH", slice: true, node: "node-a",
			header: [][2]string{{"Content-Type", apply}, {"Content-Type", apply}}, want: http.StatusBadRequest},
		{name: "two Content-Type lines on a create", method: "POST", node: "node-a",
			header: [][2]string{{"Content-Type", mediaJSON}, {"Content-Type", "application/vnd.kubernetes.protobuf"}}, want: http.StatusBadRequest},
		{name: "Content_Type only, apply of node-a", method: "PATCH", slice: true, node: "node-a",
			header: [][2]string{{"Content_Type", apply}}, want: http.StatusOK, created: true},
		{name: "Content_Type only, apply of node-b", method: "PATCH", slice: true, node: "node-b",
			header: [][2]string{{"CONTENT_TYPE", apply}}, want: http.StatusForbidden},
		{name: "apply type with a parameter, node-a", method: "PATCH", slice: true, node: "node-a",
			header: [][2]string{{"Content-Type", apply + "; charset=utf-8"}}, want: http.StatusOK, created: true},
		{name: "apply type with a parameter, node-b", method: "PATCH", slice: true, node: "node-b",
			header: [][2]string{{"Content-Type", apply + ";charset=utf-8"}}, want: http.StatusForbidden},
		// draproxy reads media types as mime does (case-insensitively),
		// the API server's patch handler compares them exactly: an apply
		// draproxy checked (and would refuse for node-b) that the API
		// server then refuses.
		{name: "apply type in upper case, node-a", method: "PATCH", slice: true, node: "node-a",
			header: [][2]string{{"Content-Type", strings.ToUpper(apply)}}, want: http.StatusUnsupportedMediaType},
		{name: "apply type in upper case, node-b", method: "PATCH", slice: true, node: "node-b",
			header: [][2]string{{"Content-Type", strings.ToUpper(apply)}}, want: http.StatusForbidden},
		{name: "apply type, space before the parameter, node-a", method: "PATCH", slice: true, node: "node-a",
			header: [][2]string{{"Content-Type", apply + " ; charset=utf-8"}}, want: http.StatusUnsupportedMediaType},
		{name: "apply type, space before the parameter, node-b", method: "PATCH", slice: true, node: "node-b",
			header: [][2]string{{"Content-Type", apply + " ; charset=utf-8"}}, want: http.StatusForbidden},
		// A trailing ';': mime ignores it, the API server cuts it off.
		{name: "apply type with an empty parameter, node-a", method: "PATCH", slice: true, node: "node-a",
			header: [][2]string{{"Content-Type", apply + ";"}}, want: http.StatusOK, created: true},
		{name: "apply type with an empty parameter, node-b", method: "PATCH", slice: true, node: "node-b",
			header: [][2]string{{"Content-Type", apply + ";"}}, want: http.StatusForbidden},
		{name: "apply type with a parameter that does not parse", method: "PATCH", slice: true, node: "node-a",
			header: [][2]string{{"Content-Type", apply + ";charset"}}, want: http.StatusUnsupportedMediaType},
		{name: "apply and merge types in one value", method: "PATCH", slice: true, node: "node-b",
			header: [][2]string{{"Content-Type", apply + ", " + mediaMergePatch}}, want: http.StatusUnsupportedMediaType},
	}
	for proto, client := range clients {
		for i, c := range cases {
			if c.h1Only && proto != "HTTP/1.1" {
				continue
			}
			name := fmt.Sprintf("fh-%s-%d", strings.ToLower(strings.ReplaceAll(proto, "/", "")), i)
			target := "/apis/resource.k8s.io/v1/resourceslices"
			if c.slice {
				target += "/" + name + "?fieldManager=driver"
			}
			var body io.Reader = http.NoBody
			if c.node != "" {
				body = strings.NewReader(applyBody(name, c.node))
			}
			req, err := http.NewRequestWithContext(t.Context(), c.method, "http://localhost"+target, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+token)
			for _, h := range c.header {
				req.Header[h[0]] = append(req.Header[h[0]], h[1])
			}
			if c.slice {
				f.addSlice(name, "node-a")
			}
			f.seen()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s, %s: %v", proto, c.name, err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want || (proto == "h2c" && resp.ProtoMajor != 2) {
				t.Errorf("%s, %s = %d %s %s; want %d", proto, c.name, resp.StatusCode, resp.Proto, got, c.want)
			}
			if c.want == http.StatusBadRequest && !strings.Contains(string(got), "Content-Type") {
				t.Errorf("%s, %s = %s; want the refusal to name Content-Type", proto, c.name, got)
			}
			if node, _ := f.sliceNode(name); c.slice && node != "node-a" {
				t.Errorf("%s, %s: the API server holds %s on node %q; want it still node-a's", proto, c.name, name, node)
			}
			received := f.seen()
			if reached := slices.ContainsFunc(received, func(s seen) bool { return s.Method == c.method && s.Path == slicePath(name) }); c.slice && reached != c.created && c.want != http.StatusUnsupportedMediaType {
				t.Errorf("%s, %s: the write reached the API server: %v; want %v", proto, c.name, reached, c.created)
			}
			if c.want == http.StatusBadRequest && len(received) != 0 {
				t.Errorf("%s, %s: refused, but the API server received %d requests (draproxy's own reads included); want none", proto, c.name, len(received))
			}
			for _, s := range received {
				if s.Method != c.method {
					continue // draproxy's own read of the slice
				}
				if got := s.Header.Get("Impersonate-User"); got != "system:node:node-a" {
					t.Errorf("%s, %s: the API server was told Impersonate-User %q; want the node", proto, c.name, got)
				}
				for k, v := range s.Header {
					if strings.EqualFold(strings.ReplaceAll(k, "_", "-"), "Content-Type") && (k != "Content-Type" || len(v) != 1) {
						t.Errorf("%s, %s: the API server received %s: %q; want Content-Type once", proto, c.name, k, v)
					}
				}
				if c.node != "" && s.Header.Get("Content-Type") == "" {
					t.Errorf("%s, %s: the API server received no Content-Type", proto, c.name)
				}
			}
		}
	}

	// HTTP/2 forbids Connection: an h2c request that carries one is
	// refused by net/http's server before draproxy, frame by frame (Go's
	// HTTP/2 client will not send it).
	for _, conn := range []string{"impersonate-user, content-type", "keep-alive"} {
		f.seen()
		if st := rawH2C(t, sock, [][2]string{{"authorization", "Bearer " + token}, {"connection", conn}}); st != "400" {
			t.Errorf("h2c with connection: %s: :status %s; want 400", conn, st)
		}
		if got := f.seen(); len(got) != 0 {
			t.Errorf("h2c with connection: %s: the API server received %d requests; want none", conn, len(got))
		}
	}
	if st := rawH2C(t, sock, [][2]string{{"authorization", "Bearer " + token}}); st != "200" {
		t.Errorf("h2c without connection: :status %s; want 200 (the frames are right)", st)
	}
}

// rawH2C sends a list of node-a's slices with fields (lower-case names,
// as HTTP/2 requires) over a new h2c connection to the Unix socket sock,
// frame by frame, and returns the answer's :status.
func rawH2C(t *testing.T, sock string, fields [][2]string) string {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, hf := range append([][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "localhost"},
		{":path", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-a"}}, fields...) {
		_ = enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	dec := hpack.NewDecoder(4096, nil)
	for {
		frame, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		switch frame := frame.(type) {
		case *http2.SettingsFrame:
			if !frame.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			hfs, err := dec.DecodeFull(frame.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, hf := range hfs {
				if hf.Name == ":status" {
					return hf.Value
				}
			}
		case *http2.RSTStreamFrame:
			return "RST_STREAM " + frame.ErrCode.String()
		case *http2.GoAwayFrame:
			return "GOAWAY " + frame.ErrCode.String()
		}
	}
}

// diffEnv is draproxy for node-a (its handler as newProxy builds it,
// served on a Unix socket as main serves it) in front of a fake API
// server, set up for the differential test: a difftest.Recorder records
// every attribute set the middleware's authorizer allows (it wraps the
// SubjectAccessReview authorizer, the last of authz.All, which is asked
// only once NodeLocal, the allow-list and NodeScope have allowed), and a
// difftest.Upstream in front of the fake records every request draproxy
// forwards for a driver (its own reads, which impersonate no one, go to
// the fake directly).
type diffEnv struct {
	f       *fakeAPI
	rec     *difftest.Recorder
	up      *difftest.Upstream
	clients map[string]*http.Client
	// tokens: the driver on node-a, on node-b, dra/other on node-a.
	driverA, driverB, otherA string
}

func newDiffEnv(t testing.TB) *diffEnv {
	t.Helper()
	f := startFakeAPI(t)
	f.addSlice("a-1", "node-a")
	f.addSlice("b-1", "node-b")
	f.addSliceOf("o-1", "node-a", otherDriver, "uid-o-1")
	f.addPod("ns", "pod-a", "pod-uid-a", "node-a", "claim-a")
	f.addPod("ns", "pod-b", "pod-uid-b", "node-b", "claim-b")
	f.addClaim("ns", "claim-a", [2]string{"pod-a", "pod-uid-a"})
	f.addClaim("ns", "claim-b", [2]string{"pod-b", "pod-uid-b"})
	f.addNode("node-a")
	e := &diffEnv{f: f, rec: &difftest.Recorder{}, up: &difftest.Upstream{Next: http.HandlerFunc(f.serve)},
		driverA: f.token(driverOn("node-a")), driverB: f.token(driverOn("node-b")), otherA: f.token(otherOn("node-a"))}
	var fw http.Handler = e.up
	f.forwarded.Store(&fw)
	_, e.clients = socketClients(t, testHandler(t, f, func(o *options) {
		o.SAR = e.rec.Authorizer(authorizer.AuthorizerFunc(o.SAR.Authorize))
	}))
	return e
}

// checker is the difftest.Proxy of e over client.
func (e *diffEnv) checker(client *http.Client) difftest.Proxy {
	return difftest.Proxy{
		Send:          func(r difftest.Request) (int, error) { return difftest.Send(client, "http://localhost", r) },
		Authorized:    e.rec,
		Upstream:      e.up,
		Read:          e.read,
		Identity:      forwardedIdentity,
		PassesAnswers: true, // checked reads are forwarded, then answered 404 or 403
	}
}

// forwardedIdentity is what draproxy tells the API server of the user it
// authorized: its node, whoever the user is (read back, as the API
// server's impersonation filter makes it, with system:authenticated).
func forwardedIdentity(u *difftest.User) *difftest.User {
	if u == nil {
		return nil
	}
	return &difftest.User{Name: "system:node:node-a", Groups: []string{"system:authenticated"}}
}

// read reads a request the API server received from draproxy as the API
// server reads it: the user it impersonates (Impersonate-*, read
// leniently, as the API server's impersonation filter makes it), and the
// attributes httpauth's RequestInfo mapper (the API server's own request
// info) gives its method, path and query for that user. Anything else in
// its header is a difference: a header that is not draproxy's own
// credential, an allow-listed one or an impersonation header, the driver's
// credential, or a Content-Type the API server could read otherwise than
// draproxy (two values, or a variant spelling).
func (e *diffEnv) read(r *http.Request) (difftest.Decision, error) {
	var d difftest.Decision
	for k, v := range r.Header {
		switch {
		case k == "Authorization":
			if len(v) != 1 || v[0] != "Bearer "+e.f.proxyToken {
				return d, fmt.Errorf("an Authorization other than draproxy's own (%d values) reached the API server", len(v))
			}
		case k == "Content-Type" || k == "Accept" || k == "Accept-Encoding" || k == "User-Agent" || k == "Content-Length":
			if len(v) != 1 {
				return d, fmt.Errorf("%s reached the API server %d times: %q", k, len(v), v)
			}
		case strings.HasPrefix(k, "Impersonate-"):
		default:
			return d, fmt.Errorf("%s: %q reached the API server", k, v)
		}
	}
	if n := len(difftest.Lenient(r.Header)["Content-Type"]); n > 1 {
		return d, fmt.Errorf("Content-Type reached the API server in %d spellings or lines", n)
	}
	u, err := difftest.ImpersonatedUser(r.Header)
	if err != nil || u == nil {
		return d, fmt.Errorf("the API server was told no user: %v", err)
	}
	d.User = u
	attrs, err := httpauth.RequestInfo().Attributes(r, &user.DefaultInfo{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra})
	for _, a := range attrs {
		d.Attributes = append(d.Attributes, difftest.AttributesOf(a))
	}
	return d, err
}

// diffIdentityHeaders are the identity headers the corpus spoofs and
// names in its Connection headers: impersonation, which the API server
// trusts from draproxy, and the front-proxy headers.
var diffIdentityHeaders = []string{"Impersonate-User", "Impersonate-Group", "Impersonate-Uid", "Impersonate-Extra-Authentication.kubernetes.io%2fnode-Name", "X-Remote-User"}

// corpus is the hand-written corpus: reads (lists, watches in both forms,
// checked gets of slices and claims, a node, what draproxy refuses), in
// unclean and encoded spellings, with several drivers' tokens, none and a
// bad one; and writes of a slice, with bodies, under every spelling of
// Content-Type (the decision header) the corpus makes.
func (e *diffEnv) corpus() []difftest.Request {
	const slices = "/apis/resource.k8s.io/v1/resourceslices"
	sel := "?fieldSelector=spec.nodeName%3Dnode-a"
	reads := difftest.Corpus(difftest.CorpusOptions{
		Methods: []string{"GET", "HEAD"},
		Targets: []string{
			slices + sel, slices, slices + "?fieldSelector=spec.nodeName%3Dnode-b",
			slices + sel + "&fieldSelector=spec.nodeName%3Dnode-b", slices + "?fieldSelector=spec.nodeName%3Dnode-b&fieldSelector=spec.nodeName%3Dnode-a",
			slices + "?fieldSelector=spec.driver%3Dgpu.example.com,spec.nodeName%3Dnode-a&labelSelector=a%3Db", slices + sel + "&watch=true",
			"/apis/resource.k8s.io/v1/watch/resourceslices" + sel, "/apis/resource.k8s.io/v1/watch/resourceslices/a-1",
			slices + "/a-1", slices + "/b-1", slices + "/o-1", slices + "/missing", "//apis/resource.k8s.io/v1/./resourceslices/a-1",
			slices + "/%61-1", slices + "/a-1/../b-1", slices + "/b-1/..%2fa-1", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/claim-a",
			"/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/claim-b", "/apis/resource.k8s.io/v1/resourceclaims/claim-a",
			"/api/v1/nodes/node-a", "/api/v1/nodes/node-b", "/api/v1/namespaces/kube-system/secrets",
		},
		Authorization:   []string{"Bearer " + e.driverA, "Bearer " + e.driverB, "Bearer " + e.otherA, "", "Bearer not-a-token-0123456789"},
		IdentityHeaders: diffIdentityHeaders,
	})
	var writes []difftest.Request
	for _, w := range []struct {
		method, target, body string
	}{
		{"PATCH", slices + "/a-1?fieldManager=driver", diffSliceBody("a-1", "node-a")},
		{"PATCH", slices + "/new-a?fieldManager=driver", diffSliceBody("new-a", "node-a")},
		{"PATCH", slices + "/new-b?fieldManager=driver", diffSliceBody("new-b", "node-b")},
		{"PATCH", slices + "/b-1", diffSliceBody("b-1", "node-a")},
		{"POST", slices, diffSliceBody("post-a", "node-a")},
		{"PUT", slices + "/a-1", diffSliceBody("a-1", "node-a")},
		{"DELETE", slices + "/missing", `{"kind":"DeleteOptions","apiVersion":"v1"}`},
	} {
		for _, r := range difftest.Corpus(difftest.CorpusOptions{
			Methods:         []string{w.method},
			Targets:         []string{w.target},
			Authorization:   []string{"Bearer " + e.driverA},
			DecisionHeader:  "Content-Type",
			DecisionValues:  []string{mediaApplyYAML, mediaMergePatch, mediaJSON, mediaYAML},
			IdentityHeaders: diffIdentityHeaders,
		}) {
			r.Body = w.body
			writes = append(writes, r)
		}
	}
	return append(reads, writes...)
}

// diffSliceBody is a ResourceSlice of the test driver on node, a body a
// create, an update, an apply and a merge patch all read.
func diffSliceBody(name, node string) string {
	return fmt.Sprintf(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":%q},"spec":{"driver":%q,"nodeName":%q,"pool":{"name":"p","resourceSliceCount":1}}}`, name, testDriver, node)
}

// TestForwardedIsAuthorized is the differential test of draproxy (issues
// #20 and #21), as examples/rbacproxy's: for a corpus of requests (lists
// and watches with their selectors in several forms, checked gets of
// slices and claims, unclean and encoded paths, multi-value queries,
// spoofed identity headers in every spelling, Connection headers naming
// the identity headers, Content-Type and Authorization, Content-Type once,
// twice, in a variant spelling and in two spellings, on writes with
// bodies, several drivers' tokens, none and a bad one), over HTTP/1.1 and
// h2c on the Unix socket, what the API server received from draproxy,
// read back as the API server reads it (the impersonated user; the
// attributes of httpauth's RequestInfo mapper over its method, path and
// query), equals what draproxy's middleware authorized for that request:
// the attributes it allowed, for the node draproxy acts as. A request draproxy
// refused never reaches the API server; a checked read that reaches it
// and is then withheld (404, 403) was authorized as it was sent.
func TestForwardedIsAuthorized(t *testing.T) {
	t.Parallel()
	e := newDiffEnv(t)
	corpus := e.corpus()
	for proto, client := range e.clients {
		if err := difftest.Check(e.checker(client), corpus); err != nil {
			t.Errorf("%s: %v", proto, err)
		}
	}
	t.Logf("%d requests, over HTTP/1.1 and h2c", len(corpus))
}

// TestBodyLimit: a body of exactly the limit is forwarded; one byte more is
// 413 and nothing is forwarded, with or without a Content-Length.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	prefix := `{"spec":{"nodeName":"node-a","driver":"` + testDriver + `"},"pad":"`
	limit := int64(len(prefix) + 100 + len(`"}`))
	h := startProxy(t, f, func(o *options) { o.MaxBodyBytes = limit })
	token := f.token(driverOn("node-a"))
	body := func(n int64) []byte { return []byte(prefix + strings.Repeat("x", int(n)-len(prefix)-2) + `"}`) }
	for _, tt := range []struct {
		size    int64
		chunked bool
		want    int
	}{
		{size: limit, want: http.StatusCreated},
		{size: limit, chunked: true, want: http.StatusCreated},
		{size: limit + 1, want: http.StatusRequestEntityTooLarge},
		{size: limit + 1, chunked: true, want: http.StatusRequestEntityTooLarge},
	} {
		f.seen()
		b := body(tt.size)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, h.url+"/apis/resource.k8s.io/v1/resourceslices", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if tt.chunked {
			req.ContentLength = -1
			req.Body = io.NopCloser(bytes.NewReader(b))
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		n := 0
		for _, s := range f.seen() {
			if s.Method == http.MethodPost {
				n++
			}
		}
		if resp.StatusCode != tt.want || (tt.want == http.StatusCreated) != (n == 1) {
			t.Errorf("POST %d bytes (chunked %v) = %d, forwarded %d; want %d", tt.size, tt.chunked, resp.StatusCode, n, tt.want)
		}
	}
}

// TestOutage: when the API server cannot answer, draproxy answers 503
// with Retry-After, never 403 or 401, whether it was reading an object for
// its own check or forwarding.
func TestOutage(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	h := startProxy(t, f)
	f.addSlice("a-1", "node-a")
	f.addPod("gpu", "job-a", "uid-job-a", "node-a", "c")
	f.addClaim("gpu", "c", [2]string{"job-a", "uid-job-a"})
	token := f.token(driverOn("node-a"))
	rs := h.client(t, token).ResourceV1().ResourceSlices()
	// Warm the review caches.
	if _, err := rs.List(t.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"}); err != nil {
		t.Fatal(err)
	}
	type call struct {
		method, target string
		body           string
		lookup         bool // draproxy reads an object for its check first
		// refused is the answer to the node's 403 on a checked read: the
		// refusal of one the driver may not see.
		refused int
	}
	calls := []call{
		{method: http.MethodGet, target: "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-a"},            // forwarded
		{method: http.MethodGet, target: "/apis/resource.k8s.io/v1/resourceslices/a-1", refused: http.StatusNotFound},               // forwarded, the answer checked
		{method: http.MethodGet, target: "/apis/resource.k8s.io/v1/namespaces/gpu/resourceclaims/c", refused: http.StatusForbidden}, // forwarded, the answer checked
		{method: http.MethodPatch, target: "/apis/resource.k8s.io/v1/resourceslices/a-1", body: `{}`, lookup: true},
	}
	for _, fault := range []int32{-1, http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusTooManyRequests, http.StatusForbidden, http.StatusUnauthorized} {
		f.fail.Store(fault)
		for _, c := range calls {
			code, b := h.do(t, c.method, c.target, token, []byte(c.body), http.Header{"Content-Type": {mediaMergePatch}})
			want := http.StatusServiceUnavailable
			switch {
			case fault == http.StatusForbidden && c.refused != 0:
				want = c.refused
			case fault > 0 && !c.lookup && fault != http.StatusUnauthorized:
				want = int(fault) // forwarded: the API server's own answer passes through
			}
			if code != want {
				t.Errorf("fault %d: %s %s = %d %s; want %d", fault, c.method, c.target, code, b, want)
				continue
			}
			if own := c.lookup || fault <= 0 || fault == http.StatusUnauthorized; own {
				var st metav1.Status
				if json.Unmarshal([]byte(b), &st) != nil || st.Kind != "Status" || st.Code != 503 || st.Details == nil || st.Details.RetryAfterSeconds < 1 || strings.Contains(b, token) || strings.Contains(b, f.srv.Listener.Addr().String()) {
					t.Errorf("fault %d: %s %s answered %s; want a 503 Status with Retry-After, without the token or the API server's address", fault, c.method, c.target, b)
				}
				// The fake's failures carry Retry-After: 3; a lookup passes it on.
				if c.lookup && (fault == http.StatusServiceUnavailable || fault == http.StatusTooManyRequests) && st.Details != nil && st.Details.RetryAfterSeconds != 3 {
					t.Errorf("fault %d: %s %s: Retry-After %d; want the API server's 3", fault, c.method, c.target, st.Details.RetryAfterSeconds)
				}
			}
		}
	}
	f.fail.Store(0)
	if _, err := rs.Get(t.Context(), "a-1", metav1.GetOptions{}); err != nil {
		t.Errorf("after the outage, Get(a-1) = %v", err)
	}
}

// TestWatchStreams: each watch event reaches the driver (HTTP/1.1) while
// the API server's response (HTTP/2) is still open: nothing is buffered.
func TestWatchStreams(t *testing.T) {
	t.Parallel()
	f, resp := watchNodeA(t)
	dec := json.NewDecoder(resp.Body)
	for i := range 3 {
		name := "a-" + strconv.Itoa(i)
		f.addSlice(name, "node-a")
		var ev struct {
			Type   string
			Object struct{ Metadata struct{ Name string } }
		}
		done := make(chan error, 1)
		go func() { done <- dec.Decode(&ev) }()
		select {
		case err := <-done:
			if err != nil || ev.Type != "ADDED" || ev.Object.Metadata.Name != name {
				t.Fatalf("event %d = %+v, %v; want ADDED %s", i, ev, err, name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d not received within 10s: buffered?", i)
		}
	}
}

// watchNodeA starts a fake API server and draproxy for node A, and opens
// a watch of node A's slices through it as a driver on node A; it fails
// the test unless the watch is answered 200. The body is closed when the
// test ends.
func watchNodeA(t *testing.T) (*fakeAPI, *http.Response) {
	t.Helper()
	f := startFakeAPI(t)
	h := startProxy(t, f)
	resp := h.send(t, http.MethodGet, "/apis/resource.k8s.io/v1/resourceslices?watch=true&fieldSelector=spec.nodeName%3Dnode-a", f.token(driverOn("node-a")), nil, nil)
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch = %d", resp.StatusCode)
	}
	return f, resp
}

// TestWatchAbort: a watch the API server breaks off ends in an error for
// the driver, never in a clean end of the stream it could take for the
// API server closing the watch.
func TestWatchAbort(t *testing.T) {
	t.Parallel()
	f, resp := watchNodeA(t)
	breakWatch(t, f, resp, 10*time.Second, "the API server's connection broke", f.srv.CloseClientConnections) // draproxy's connection to the API server
}

// breakWatch reads the first event of resp, a watch of node-a's slices
// through draproxy, once f stores a slice; then it breaks the watch's
// link with cut and checks that the driver's watch ends, in an error
// (never a clean end it could take for the API server closing the watch),
// within limit.
func breakWatch(t *testing.T, f *fakeAPI, resp *http.Response, limit time.Duration, what string, cut func()) {
	t.Helper()
	f.addSlice("a-1", "node-a")
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, `"a-1"`) {
		t.Fatalf("first event = %q, %v; want a-1", line, err)
	}
	cut()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(br)
		done <- err
	}()
	select {
	case err := <-done:
		t.Logf("observed: the watch ended %v after %s: %v", time.Since(start).Round(100*time.Millisecond), what, err)
		if err == nil {
			t.Errorf("the watch ended cleanly after %s; want an error", what)
		}
	case <-time.After(limit):
		t.Fatalf("the watch did not end within %v after %s", limit, what)
	}
}

// TestForwardedAnswer: the API server's answer reaches the driver with its
// status, body, end-to-end headers and trailers, without the hop-by-hop
// headers (RFC 2616's and those its Connection header names); a protocol
// switch draproxy did not ask for is a 503.
func TestForwardedAnswer(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	const list = `{"kind":"ResourceSliceList","apiVersion":"resource.k8s.io/v1","metadata":{},"items":[]}`
	var switching atomic.Bool
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+f.proxyToken || r.Header.Get("Impersonate-User") != "system:node:node-a" {
			t.Errorf("upstream request: Authorization %q, Impersonate-User %q", r.Header.Get("Authorization"), r.Header.Get("Impersonate-User"))
		}
		h := w.Header()
		if switching.Load() {
			h.Set("Upgrade", "websocket")
			w.WriteHeader(http.StatusSwitchingProtocols)
			return
		}
		h.Set("Content-Type", "application/json")
		h.Set("Audit-Id", "audit-1")
		h.Set("Connection", "X-Hop-A, x-hop-b")
		h.Set("X-Hop-A", "a")
		h.Set("X-Hop-B", "b")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Authenticate", "Basic")
		h.Set("Trailer", "X-Checksum")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, list)
		h.Set("X-Checksum", "c1")
	})
	h := startProxy(t, f, func(o *options) {
		o.Upstream = &rest.Config{Host: "https://fake.invalid", BearerToken: f.proxyToken, Transport: handlerTransport{upstream}}
	})
	token := f.token(driverOn("node-a"))
	get := func() (*http.Response, string) {
		resp := h.send(t, http.MethodGet, "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-a", token, nil, nil)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	resp, body := get()
	if resp.StatusCode != http.StatusOK || body != list {
		t.Fatalf("GET = %d %s; want 200 %s", resp.StatusCode, body, list)
	}
	for _, k := range []string{"Connection", "X-Hop-A", "X-Hop-B", "Keep-Alive", "Proxy-Authenticate"} {
		if v, ok := resp.Header[k]; ok && !(k == "Connection" && len(v) == 1 && v[0] == "close") {
			t.Errorf("the driver got hop-by-hop header %s: %q", k, v)
		}
	}
	if got := resp.Header.Get("Audit-Id"); got != "audit-1" {
		t.Errorf("Audit-Id = %q; want audit-1", got)
	}
	if got := resp.Trailer.Get("X-Checksum"); got != "c1" {
		t.Errorf("trailer X-Checksum = %q (trailers %v); want c1", got, resp.Trailer)
	}

	switching.Store(true)
	resp, body = get()
	var st metav1.Status
	if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal([]byte(body), &st) != nil || st.Kind != "Status" || resp.Header.Get("Upgrade") != "" {
		t.Errorf("GET answered 101 upstream = %d %v %s; want a 503 Status", resp.StatusCode, resp.Header, body)
	}
}

// TestNewProxyValidates: required options.
func TestNewProxyValidates(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	an, err := authn.NewForConfig(f.config(), authn.Options{Audiences: []string{testAudience}})
	if err != nil {
		t.Fatal(err)
	}
	sar, err := authz.NewForConfig(f.config(), authz.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]options{
		"no node":          {Authenticator: an, SAR: sar, Upstream: f.config()},
		"no authenticator": {NodeName: "n", SAR: sar, Upstream: f.config()},
		"no SAR":           {NodeName: "n", Authenticator: an, Upstream: f.config()},
		"no upstream":      {NodeName: "n", Authenticator: an, SAR: sar},
	} {
		if _, err := newProxy(o); err == nil {
			t.Errorf("newProxy(%s) = nil error; want one", name)
		}
	}
}

// TestWithDeadline: a request's context ends at its deadline on the
// injected clock, not 1ns before, with errDeadline as its cause.
func TestWithDeadline(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Now())
	ctx, stop := withDeadline(t.Context(), clk, DefaultRequestTimeout)
	defer stop()
	clk.Step(DefaultRequestTimeout - 1)
	if ctx.Err() != nil || pastDeadline(ctx) {
		t.Fatalf("1ns before the deadline: %v", context.Cause(ctx))
	}
	clk.Step(1)
	<-ctx.Done()
	if !pastDeadline(ctx) {
		t.Errorf("at the deadline: cause %v; want errDeadline", context.Cause(ctx))
	}
	// Stopped before its deadline, it is cancelled without that cause.
	ctx, stop = withDeadline(t.Context(), clk, DefaultRequestTimeout)
	stop()
	if ctx.Err() == nil || pastDeadline(ctx) || clk.HasWaiters() {
		t.Errorf("stopped: %v, waiters %v; want cancelled, not past its deadline, no timer left", context.Cause(ctx), clk.HasWaiters())
	}
}

// TestForwardFaults: a forwarded request (a list, a create) whose answer
// does not come is answered 504 with Retry-After at its deadline, and 503
// with Retry-After when the connection fails first; an answer cut off, or
// still arriving at the deadline, is never completed to look whole: the
// driver's read of it fails. The answers the API server gives are passed
// on as they are: draproxy decides nothing on them.
func TestForwardFaults(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	h := startProxy(t, f)
	token := f.token(driverOn("node-a"))
	const list = "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-a"
	type call struct {
		method, target, body string
	}
	calls := []call{
		{method: http.MethodGet, target: list},
		{method: http.MethodPost, target: sliceCollection, body: sliceBody("new", "node-a", testDriver)},
	}
	for _, c := range calls {
		for _, fl := range faults(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p"}}) {
			arrived := f.inject(fl, func(r *http.Request) bool { return r.Header.Get("Impersonate-User") != "" })
			type result struct {
				code    int
				retry   string
				body    []byte
				readErr error
			}
			done := make(chan result, 1)
			headers := make(chan struct{}, 1)
			go func() {
				req, _ := http.NewRequestWithContext(t.Context(), c.method, h.url+c.target, strings.NewReader(c.body))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", mediaJSON)
				resp, err := http.DefaultClient.Do(req)
				if err != nil { // cut off before the headers arrived
					done <- result{readErr: err}
					return
				}
				headers <- struct{}{}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				done <- result{resp.StatusCode, resp.Header.Get("Retry-After"), b, err}
			}()
			select {
			case <-arrived:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s %s, %s: not forwarded within 30s", c.method, c.target, fl.name)
			}
			if fl.hangs {
				if fl.partial {
					<-headers // the driver has the status: only the body can be cut
				}
				h.clk.Step(DefaultRequestTimeout)
			}
			r := <-done
			switch {
			case fl.partial:
				if r.readErr == nil {
					t.Errorf("%s %s, %s: the driver read %d %q to its end; want the answer cut off", c.method, c.target, fl.name, r.code, r.body)
				}
			case fl.hangs || fl.name == "connection dropped":
				want := http.StatusServiceUnavailable
				if fl.hangs {
					want = http.StatusGatewayTimeout
				}
				var st metav1.Status
				if r.code != want || json.Unmarshal(r.body, &st) != nil || st.Kind != "Status" || r.retry == "" {
					t.Errorf("%s %s, %s = %d %q (Retry-After %q); want a %d Status with Retry-After", c.method, c.target, fl.name, r.code, r.body, r.retry, want)
				}
			default:
				if r.code != http.StatusOK || r.readErr != nil {
					t.Errorf("%s %s, %s = %d %q, %v; want the API server's answer as it is", c.method, c.target, fl.name, r.code, r.body, r.readErr)
				}
			}
			f.fault.Store(nil)
		}
	}
}

// blackhole is a TCP proxy to addr that can stop passing bytes without
// closing anything, as a dead link (a peer gone, a cable cut) does.
type blackhole struct {
	ln  net.Listener
	cut atomic.Bool
	mu  sync.Mutex
	all []net.Conn
}

func startBlackhole(t testing.TB, addr string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			b.mu.Lock()
			b.all = append(b.all, c, up)
			b.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if err != nil {
						return
					}
					if b.cut.Load() {
						continue // swallowed: the link is dead
					}
					if _, err := dst.Write(buf[:n]); err != nil {
						return
					}
				}
			}
			wg.Go(func() { pipe(up, c) })
			wg.Go(func() { pipe(c, up) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range b.all {
			c.Close()
		}
		b.mu.Unlock()
		wg.Wait()
	})
	return b
}

// TestWatchDeadLink: a watch is not cut for being quiet, but it ends, in
// an error the driver sees, once the link to the API server is dead:
// client-go's HTTP/2 health check (a ping after HTTP2_READ_IDLE_TIMEOUT_SECONDS
// without a frame, the connection closed when no answer comes within
// HTTP2_PING_TIMEOUT_SECONDS; 30 s and 15 s by default, here 1 s and 1 s)
// closes draproxy's connection, and draproxy breaks off the driver's
// stream. It waits for those real seconds: the health check runs on the
// HTTP/2 transport's own timers.
func TestWatchDeadLink(t *testing.T) {
	t.Setenv("HTTP2_READ_IDLE_TIMEOUT_SECONDS", "1")
	t.Setenv("HTTP2_PING_TIMEOUT_SECONDS", "1")
	f := startFakeAPI(t)
	bh := startBlackhole(t, f.srv.Listener.Addr().String())
	up := f.config()
	up.Host = "https://" + bh.ln.Addr().String()
	// client-go caches transports by TLS settings, not by host, and every
	// httptest server has the same certificate: a server name of its own
	// (one of the certificate's) makes a new transport, which reads the
	// environment above.
	up.TLSClientConfig.ServerName = "example.com"
	h := startProxy(t, f, func(o *options) { o.Upstream = up })
	resp := h.send(t, http.MethodGet, "/apis/resource.k8s.io/v1/resourceslices?watch=true&fieldSelector=spec.nodeName%3Dnode-a", f.token(driverOn("node-a")), nil, nil)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 1 {
		t.Fatalf("watch = %d", resp.StatusCode)
	}
	breakWatch(t, f, resp, 20*time.Second, "its link died (health check 1s + 1s)", func() { bh.cut.Store(true) })
}
