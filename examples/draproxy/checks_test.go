package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const sliceCollection = "/apis/resource.k8s.io/v1/resourceslices"

// write is one way a driver writes the slice name, as raw HTTP.
type write struct {
	name, method, contentType string
	body                      func(name, node, driver string) string
}

// sliceBody is a whole ResourceSlice of node and driver in JSON.
func sliceBody(name, node, driver string) string {
	return `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"` + name + `"},"spec":{"driver":"` + driver + `","nodeName":"` + node + `","pool":{"name":"pool","resourceSliceCount":1}}}`
}

// writes are every way a driver can write one named slice: update, the
// four patch types (apply in JSON and in YAML), and delete (with and
// without DeleteOptions).
var writes = []write{
	{name: "update", method: http.MethodPut, contentType: mediaJSON, body: sliceBody},
	{name: "update, YAML", method: http.MethodPut, contentType: mediaYAML, body: func(name, node, driver string) string {
		return "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: " + name + "}\nspec: {driver: " + driver + ", nodeName: " + node + ", pool: {name: pool, resourceSliceCount: 1}}\n"
	}},
	{name: "merge patch", method: http.MethodPatch, contentType: mediaMergePatch, body: func(_, _, _ string) string { return `{"metadata":{"labels":{"x":"y"}}}` }},
	{name: "strategic merge patch", method: http.MethodPatch, contentType: mediaStrategicPatch, body: func(_, _, _ string) string { return `{"metadata":{"labels":{"x":"y"}}}` }},
	{name: "JSON patch", method: http.MethodPatch, contentType: mediaJSONPatch, body: func(_, _, _ string) string {
		return `[{"op":"add","path":"/metadata/labels","value":{"x":"y"}}]`
	}},
	{name: "apply", method: http.MethodPatch, contentType: mediaApplyYAML, body: sliceBody},
	{name: "apply, YAML", method: http.MethodPatch, contentType: mediaApplyYAML, body: func(name, node, driver string) string {
		return "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata:\n  name: " + name + "\nspec:\n  driver: " + driver + "\n  nodeName: " + node + "\n"
	}},
	{name: "delete", method: http.MethodDelete},
	{name: "delete with options", method: http.MethodDelete, contentType: mediaJSON, body: func(_, _, _ string) string {
		return `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}`
	}},
}

// send sends w for the slice name (body of node and driver) as u's token.
func (w write) send(t *testing.T, h *harness, token, name, node, driver string) (int, string) {
	t.Helper()
	target := sliceCollection + "/" + name
	if w.contentType == mediaApplyYAML {
		target += "?fieldManager=driver"
	}
	var body []byte
	hdr := http.Header{}
	if w.body != nil {
		body = []byte(w.body(name, node, driver))
		hdr.Set("Content-Type", w.contentType)
	}
	return h.do(t, w.method, target, token, body, hdr)
}

// TestStaleNames replays, as unit tests, the attack of issue #20: a name
// draproxy once saw on this node is deleted (by a deletecollection through
// draproxy, or by another actor) or re-created on another node, and the
// driver writes it again. Nothing is remembered: every write is checked
// against the slice as it is now, or, when it can create, on its body as a
// create, and then forwarded as the node, which the (fake) Node
// authorizer holds to node A's slices; so node B's slice stays as it is
// and nothing is created off node A.
func TestStaleNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// gone makes the slice x, of node-a, go: through draproxy, or as
		// another actor.
		gone func(t *testing.T, h *harness, token string)
		// recreate: x is then created again on node-b, with another UID.
		recreate bool
	}{
		{name: "deletecollection through draproxy", gone: func(t *testing.T, h *harness, token string) {
			code, body := h.do(t, http.MethodDelete, sliceCollection+"?fieldSelector=spec.nodeName%3Dnode-a%2Cspec.driver%3D"+testDriver+"&labelSelector=x", token, nil, nil)
			if code != http.StatusOK {
				t.Fatalf("deletecollection = %d %s", code, body)
			}
		}},
		{name: "deleted by another actor", gone: func(t *testing.T, h *harness, _ string) { h.f.remove(slicePath("x")) }},
		{name: "deleted and re-created on node-b", gone: func(t *testing.T, h *harness, _ string) { h.f.remove(slicePath("x")) }, recreate: true},
	}
	for _, tt := range tests {
		for _, w := range writes {
			t.Run(tt.name+"/"+w.name, func(t *testing.T) {
				t.Parallel()
				f := startFakeAPI(t)
				h := startProxy(t, f)
				token := f.token(driverOn("node-a"))
				// 1. x is node-a's, and the driver reads it.
				if code, body := h.do(t, http.MethodPost, sliceCollection, token, []byte(sliceBody("x", "node-a", testDriver)), http.Header{"Content-Type": {mediaJSON}}); code != http.StatusCreated {
					t.Fatalf("create x = %d %s", code, body)
				}
				if code, body := h.do(t, http.MethodGet, sliceCollection+"/x", token, nil, nil); code != http.StatusOK {
					t.Fatalf("get x = %d %s", code, body)
				}
				// 2. x goes (and comes back on node-b).
				tt.gone(t, h, token)
				if tt.recreate {
					f.addSliceOf("x", "node-b", testDriver, "uid-of-b")
				}
				before := f.get(slicePath("x"))
				// 3. The driver writes x, aiming at node-b.
				code, body := w.send(t, h, token, "x", "node-b", testDriver)
				if code < 400 {
					t.Errorf("%s x (node-b) = %d %s; want a refusal", w.method, code, body)
				}
				// 4. ... and as if it were still node-a's.
				// An apply, which may create, is forwarded on its body
				// (node-a's), and the API server refuses it to the node:
				// the Node authorizer lets a node patch only a slice of
				// its own. Any other write is draproxy's 404: node-a has
				// no slice x now.
				code, body = w.send(t, h, token, "x", "node-a", testDriver)
				switch {
				case w.contentType == mediaApplyYAML && (code != http.StatusForbidden || !strings.Contains(body, "no relationship found between node")):
					t.Errorf("apply x (node-a) after it went = %d %s; want the API server's 403 to the node", code, body)
				case w.contentType != mediaApplyYAML && code != http.StatusNotFound:
					t.Errorf("%s x (node-a) after it went = %d %s; want 404", w.method, code, body)
				}
				if code, body := h.do(t, http.MethodGet, sliceCollection+"/x", token, nil, nil); tt.recreate && code != http.StatusNotFound {
					t.Errorf("get x (node-b's) = %d %s; want 404", code, body)
				}
				// As the admin: node-b's slice is as it was, and nothing
				// was created off node-a.
				after := f.get(slicePath("x"))
				switch {
				case tt.recreate && !jsonEqual(before, after):
					t.Errorf("node-b's slice x changed: %v -> %v", before, after)
				case !tt.recreate && after != nil:
					if n, _ := f.sliceNode("x"); n != "node-a" {
						t.Errorf("x was created on node %q; want none or node-a", n)
					}
				}
			})
		}
	}
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// TestUIDPrecondition: between draproxy's read of a slice and its write,
// the slice is deleted and re-created on node-b under the same name. Every
// write carries the UID of the slice draproxy checked, so the API server
// refuses it (409) and node-b's slice stays as it is. The UID the driver
// sent itself is kept when it is the checked one (the upstream
// ResourceSlice controller's delete), and refused when it is not.
func TestUIDPrecondition(t *testing.T) {
	t.Parallel()
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			f := startFakeAPI(t)
			h := startProxy(t, f)
			token := f.token(driverOn("node-a"))
			f.addSlice("x", "node-a")
			// After draproxy's own read (a list), as the write arrives, x
			// becomes node-b's, once, and the Node authorizer's graph has
			// not followed yet (it lags behind the change): only the UID
			// precondition holds the write to the slice draproxy checked.
			var swapped atomic.Bool
			hook := func(_ http.ResponseWriter, r *http.Request, _ []byte) bool {
				if r.URL.Path == slicePath("x") && swapped.CompareAndSwap(false, true) {
					f.graphFrozen.Store(true)
					f.addSliceOf("x", "node-b", testDriver, "uid-of-b")
				}
				return false
			}
			f.fault.Store(&hook)
			before := f.get(slicePath("x"))
			code, body := w.send(t, h, token, "x", "node-a", testDriver)
			if !swapped.Load() {
				t.Fatalf("%s x = %d %s; not forwarded", w.method, code, body)
			}
			if code != http.StatusConflict {
				t.Errorf("%s x, re-created on node-b after the check = %d %s; want 409 (the UID precondition)", w.method, code, body)
			}
			if after := f.get(slicePath("x")); after["metadata"].(map[string]any)["uid"] != "uid-of-b" || after["spec"].(map[string]any)["nodeName"] != "node-b" {
				t.Errorf("node-b's x after the write: %v (before %v)", after, before)
			}
		})
	}

	t.Run("the forwarded preconditions", func(t *testing.T) {
		t.Parallel()
		f := startFakeAPI(t)
		h := startProxy(t, f)
		token := f.token(driverOn("node-a"))
		tests := []struct {
			method, contentType, body, query string
			want                             int
			forwarded                        string // in the forwarded body
		}{
			{method: http.MethodPatch, contentType: mediaMergePatch, body: `{"metadata":{"labels":{"x":"y"}}}`, want: 200, forwarded: `"metadata":{"labels":{"x":"y"},"uid":"uid-x"}`},
			{method: http.MethodPatch, contentType: mediaStrategicPatch, body: `{"spec":{"devices":[]}}`, want: 200, forwarded: `"metadata":{"uid":"uid-x"}`},
			{method: http.MethodPatch, contentType: mediaJSONPatch, body: ` [ {"op":"add","path":"/metadata/labels","value":{}} ]`, want: 200, forwarded: `[{"op":"test","path":"/metadata/uid","value":"uid-x"},{"op":"add","path":"/metadata/labels","value":{}} ]`},
			{method: http.MethodPatch, contentType: mediaJSONPatch, body: `[]`, want: 200, forwarded: `[{"op":"test","path":"/metadata/uid","value":"uid-x"}]`},
			{method: http.MethodPatch, contentType: mediaMergePatch, body: `{"metadata":{"uid":"uid-x"}}`, want: 200, forwarded: `"uid":"uid-x"`},
			{method: http.MethodPatch, contentType: mediaMergePatch, body: `{"metadata":{"uid":"uid-other"}}`, want: 409},
			{method: http.MethodPatch, contentType: mediaMergePatch, body: `{"metadata":"x"}`, want: 400},
			{method: http.MethodPut, contentType: mediaJSON, body: sliceBody("x", "node-a", testDriver), want: 200, forwarded: `"uid":"uid-x"`},
			// The upstream controller deletes with its informer's UID and
			// resourceVersion: both kept.
			{method: http.MethodDelete, contentType: mediaJSON, body: `{"preconditions":{"uid":"uid-x","resourceVersion":"1"}}`, want: 200, forwarded: `"preconditions":{"resourceVersion":"1","uid":"uid-x"}`},
			{method: http.MethodDelete, contentType: mediaJSON, body: `{"preconditions":{"uid":"uid-stale"}}`, want: 409},
			// Options in the query move into the body the API server reads
			// instead.
			{method: http.MethodDelete, query: "?dryRun=All&gracePeriodSeconds=5", want: 200, forwarded: `"gracePeriodSeconds":5,"preconditions":{"uid":"uid-x"},"dryRun":["All"]`},
		}
		for _, tt := range tests {
			f.addSlice("x", "node-a")
			f.seen()
			hdr := http.Header{}
			if tt.contentType != "" {
				hdr.Set("Content-Type", tt.contentType)
			}
			code, body := h.do(t, tt.method, sliceCollection+"/x"+tt.query, token, []byte(tt.body), hdr)
			if code != tt.want {
				t.Errorf("%s %s %s = %d %s; want %d", tt.method, tt.contentType, tt.body, code, body, tt.want)
				continue
			}
			var fwd string
			for _, s := range f.seen() {
				if s.Header.Get("Impersonate-User") != "" {
					fwd = string(s.Body)
				}
			}
			switch {
			case tt.forwarded == "" && fwd != "":
				t.Errorf("%s %s %s forwarded %s; want nothing", tt.method, tt.contentType, tt.body, fwd)
			case !strings.Contains(fwd, tt.forwarded):
				t.Errorf("%s %s %s forwarded %s; want it to contain %s", tt.method, tt.contentType, tt.body, fwd, tt.forwarded)
			}
		}
	})
}

// TestDriverBinding: a slice's spec.driver must be bound to the caller
// (--driver) on create and on every write; a second driver identity on
// the same node cannot write under the first one's driver name, nor the
// first under the second's.
func TestDriverBinding(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	h := startProxy(t, f)
	driver, other := f.token(driverOn("node-a")), f.token(otherOn("node-a"))
	f.addSlice("gpu", "node-a")
	const refused = "may not be written by"
	create := func(token, name, driverName string) (int, string) {
		return h.do(t, http.MethodPost, sliceCollection, token, []byte(sliceBody(name, "node-a", driverName)), http.Header{"Content-Type": {mediaJSON}})
	}
	if code, body := create(driver, "mine", testDriver); code != http.StatusCreated {
		t.Errorf("create by its own identity = %d %s", code, body)
	}
	if code, body := create(other, "others", otherDriver); code != http.StatusCreated {
		t.Errorf("create of otherDriver by dra/other = %d %s", code, body)
	}
	for _, tt := range []struct {
		token, name, driver string
	}{
		{other, "stolen", testDriver},
		{driver, "stolen", otherDriver},
		{driver, "stolen", "unbound.example.com"},
	} {
		code, body := create(tt.token, tt.name, tt.driver)
		if code != http.StatusForbidden || !strings.Contains(body, refused) {
			t.Errorf("create of driver %s = %d %s; want 403 %q", tt.driver, code, body, refused)
		}
	}
	before := f.get(slicePath("gpu"))
	for _, w := range writes {
		code, body := w.send(t, h, other, "gpu", "node-a", otherDriver)
		if code != http.StatusForbidden || !strings.Contains(body, "other.example.com") {
			t.Errorf("%s by dra/other of testDriver's slice = %d %s; want 403", w.name, code, body)
		}
	}
	// A patch may not move a slice to another driver.
	code, body := h.do(t, http.MethodPatch, sliceCollection+"/gpu", driver, []byte(`{"spec":{"driver":"`+otherDriver+`"}}`), http.Header{"Content-Type": {mediaMergePatch}})
	if code != http.StatusForbidden {
		t.Errorf("merge patch to otherDriver = %d %s; want 403", code, body)
	}
	if after := f.get(slicePath("gpu")); !jsonEqual(before, after) {
		t.Errorf("testDriver's slice changed: %v -> %v", before, after)
	}
	if n, _ := f.sliceNode("stolen"); n != "" {
		t.Errorf("a slice of an unbound driver was created on %q", n)
	}
}

// TestSliceBodies: what a write's body may say, for each body type.
func TestSliceBodies(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	h := startProxy(t, f)
	token := f.token(driverOn("node-a"))
	tests := []struct {
		name, method, contentType, body string
		want                            int
	}{
		{"merge: nodeName this node", http.MethodPatch, mediaMergePatch, `{"spec":{"nodeName":"node-a"}}`, 200},
		{"merge: nodeName another", http.MethodPatch, mediaMergePatch, `{"spec":{"nodeName":"node-b"}}`, 403},
		{"merge: nodeName null", http.MethodPatch, mediaMergePatch, `{"spec":{"nodeName":null}}`, 403},
		{"merge: nodeName number", http.MethodPatch, mediaMergePatch, `{"spec":{"nodeName":1}}`, 400},
		{"merge: driver null", http.MethodPatch, mediaMergePatch, `{"spec":{"driver":null}}`, 403},
		{"merge: allNodes", http.MethodPatch, mediaMergePatch, `{"spec":{"allNodes":true}}`, 403},
		{"merge: allNodes null", http.MethodPatch, mediaMergePatch, `{"spec":{"allNodes":null}}`, 200},
		{"merge: nodeSelector", http.MethodPatch, mediaMergePatch, `{"spec":{"nodeSelector":{"nodeSelectorTerms":[]}}}`, 403},
		{"merge: perDeviceNodeSelection", http.MethodPatch, mediaMergePatch, `{"spec":{"perDeviceNodeSelection":true}}`, 403},
		{"merge: spec null", http.MethodPatch, mediaMergePatch, `{"spec":null}`, 403},
		{"merge: duplicate spec", http.MethodPatch, mediaMergePatch, `{"spec":{"nodeName":"node-a"},"spec":{"nodeName":"node-b"}}`, 400},
		{"merge: duplicate nodeName", http.MethodPatch, mediaMergePatch, `{"spec":{"nodeName":"node-a","nodeName":"node-b"}}`, 400},
		{"merge: not an object", http.MethodPatch, mediaMergePatch, `[]`, 400},
		{"strategic: $patch replace of spec", http.MethodPatch, mediaStrategicPatch, `{"spec":{"$patch":"replace","pool":{}}}`, 403},
		{"strategic: $retainKeys", http.MethodPatch, mediaStrategicPatch, `{"spec":{"$retainKeys":["pool"]}}`, 403},
		{"strategic: $patch of the slice", http.MethodPatch, mediaStrategicPatch, `{"$patch":"delete"}`, 403},
		{"JSON patch: replace nodeName", http.MethodPatch, mediaJSONPatch, `[{"op":"replace","path":"/spec/nodeName","value":"node-b"}]`, 403},
		{"JSON patch: replace spec", http.MethodPatch, mediaJSONPatch, `[{"op":"replace","path":"/spec","value":{}}]`, 403},
		{"JSON patch: replace the whole", http.MethodPatch, mediaJSONPatch, `[{"op":"replace","path":"","value":{}}]`, 403},
		{"JSON patch: move from driver", http.MethodPatch, mediaJSONPatch, `[{"op":"move","from":"/spec/driver","path":"/metadata/labels/x"}]`, 403},
		{"JSON patch: remove uid", http.MethodPatch, mediaJSONPatch, `[{"op":"remove","path":"/metadata/uid"}]`, 403},
		{"JSON patch: add nodeSelector term", http.MethodPatch, mediaJSONPatch, `[{"op":"add","path":"/spec/nodeSelector/nodeSelectorTerms/-","value":{}}]`, 403},
		{"JSON patch: test nodeName", http.MethodPatch, mediaJSONPatch, `[{"op":"test","path":"/spec/nodeName","value":"node-a"}]`, 200},
		{"JSON patch: copy from nodeName", http.MethodPatch, mediaJSONPatch, `[{"op":"copy","from":"/spec/nodeName","path":"/metadata/labels/n"}]`, 200},
		{"JSON patch: unknown op", http.MethodPatch, mediaJSONPatch, `[{"op":"steal","path":"/metadata"}]`, 400},
		{"JSON patch: not an array", http.MethodPatch, mediaJSONPatch, `{}`, 400},
		{"apply: YAML duplicate key", http.MethodPatch, mediaApplyYAML, "spec:\n  nodeName: node-a\n  nodeName: node-b\n  driver: " + testDriver + "\n", 400},
		{"apply: YAML not YAML", http.MethodPatch, mediaApplyYAML, "spec: [", 400},
		{"apply: YAML allNodes", http.MethodPatch, mediaApplyYAML, "spec:\n  nodeName: node-a\n  allNodes: true\n  driver: " + testDriver + "\n", 403},
		{"apply: CBOR", http.MethodPatch, mediaApplyCBOR, "\xa0", 415},
		{"patch: protobuf", http.MethodPatch, "application/vnd.kubernetes.protobuf", "k8s\x00", 415},
		{"patch: no content type", http.MethodPatch, "", `{}`, 415},
		{"update: protobuf", http.MethodPut, "application/vnd.kubernetes.protobuf", "k8s\x00", 415},
		{"update: CBOR", http.MethodPut, "application/cbor", "\xa0", 415},
		{"update: YAML other node", http.MethodPut, mediaYAML, "metadata: {name: x}\nspec: {nodeName: node-b, driver: " + testDriver + "}\n", 403},
		{"update: empty", http.MethodPut, mediaJSON, ``, 400},
		{"delete: protobuf options", http.MethodDelete, "application/vnd.kubernetes.protobuf", "k8s\x00", 415},
		{"delete: options not an object", http.MethodDelete, mediaJSON, `[]`, 400},
		{"create: YAML", http.MethodPost, mediaYAML, "metadata: {name: y}\nspec: {nodeName: node-a, driver: " + testDriver + "}\n", 201},
		{"create: YAML other node", http.MethodPost, mediaYAML, "spec: {nodeName: node-b, driver: " + testDriver + "}\n", 403},
		{"create: YAML duplicate", http.MethodPost, mediaYAML, "spec: {nodeName: node-a, driver: " + testDriver + "}\nspec: {nodeName: node-b}\n", 400},
		{"create: allNodes with nodeName", http.MethodPost, mediaJSON, `{"spec":{"nodeName":"node-a","allNodes":true,"driver":"` + testDriver + `"}}`, 403},
		{"create: v1beta1 allNodes false", http.MethodPost, mediaJSON, `{"spec":{"nodeName":"node-a","allNodes":false,"driver":"` + testDriver + `"}}`, 201},
		{"create: no driver", http.MethodPost, mediaJSON, `{"spec":{"nodeName":"node-a"}}`, 403},
	}
	for _, tt := range tests {
		f.addSlice("x", "node-a")
		target := sliceCollection + "/x"
		if tt.method == http.MethodPost {
			target = sliceCollection
		}
		hdr := http.Header{}
		if tt.contentType != "" {
			hdr.Set("Content-Type", tt.contentType)
		}
		f.seen()
		code, body := h.do(t, tt.method, target, token, []byte(tt.body), hdr)
		var st metav1.Status
		if code != tt.want || (code >= 400 && (json.Unmarshal([]byte(body), &st) != nil || st.Kind != "Status" || st.Message == "")) {
			t.Errorf("%s: %s %s = %d %s; want %d (a Status with a message if refused)", tt.name, tt.method, tt.body, code, body, tt.want)
		}
		if code >= 400 {
			for _, s := range f.seen() {
				if s.Header.Get("Impersonate-User") != "" {
					t.Errorf("%s: refused, but forwarded %s %s", tt.name, s.Method, s.Body)
				}
			}
		}
	}
}

// TestCheckedGet: a get of one slice is answered only after draproxy has
// read the API server's answer (asked for as JSON whatever the driver
// accepts) and found it bound to this node; Table and
// PartialObjectMetadata forms are refused.
func TestCheckedGet(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	h := startProxy(t, f)
	token := f.token(driverOn("node-a"))
	f.addSlice("a-1", "node-a")
	f.addSlice("b-1", "node-b")
	f.put(slicePath("sel-1"), map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
		"metadata": map[string]any{"name": "sel-1", "uid": "uid-sel-1"},
		"spec":     map[string]any{"driver": testDriver, "nodeName": "node-a", "nodeSelector": map[string]any{}}})
	tests := []struct {
		name, target, accept string
		want                 int
	}{
		{"own", "/a-1", "", 200},
		{"own, protobuf accepted", "/a-1", "application/vnd.kubernetes.protobuf, application/json", 200},
		{"another node's", "/b-1", "", 404},
		{"bound also by a selector", "/sel-1", "", 404},
		{"missing", "/missing", "", 404},
		{"as a Table", "/a-1", "application/json;as=Table;v=v1;g=meta.k8s.io, application/json", 406},
		{"as PartialObjectMetadata", "/a-1", "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io", 406},
	}
	for _, tt := range tests {
		f.seen()
		hdr := http.Header{}
		if tt.accept != "" {
			hdr.Set("Accept", tt.accept)
		}
		hdr.Set("Accept-Encoding", "gzip")
		resp := h.send(t, http.MethodGet, sliceCollection+tt.target, token, nil, hdr)
		var obj map[string]any
		err := json.NewDecoder(resp.Body).Decode(&obj)
		resp.Body.Close()
		if resp.StatusCode != tt.want || err != nil {
			t.Errorf("%s: GET = %d (%v); want %d", tt.name, resp.StatusCode, err, tt.want)
			continue
		}
		if tt.want == 200 && (obj["kind"] != "ResourceSlice" || resp.Header.Get("Content-Type") != "application/json" || resp.ContentLength <= 0) {
			t.Errorf("%s: GET = %v (%v); want the slice in JSON with its length", tt.name, obj, resp.Header)
		}
		if tt.want == 404 && !strings.Contains(obj["message"].(string), `draproxy shows a driver only the ResourceSlices of node "node-a"`) {
			t.Errorf("%s: GET = %v; want draproxy's one 404", tt.name, obj)
		}
		for _, s := range f.seen() {
			if s.Header.Get("Impersonate-User") != "" && s.Header.Get("Accept") != "application/json" {
				t.Errorf("%s: forwarded Accept %q; want application/json", tt.name, s.Header.Get("Accept"))
			}
		}
	}
	// The 404 of a missing slice and of another node's are the same.
	_, missing := h.do(t, http.MethodGet, sliceCollection+"/missing", token, nil, nil)
	_, other := h.do(t, http.MethodGet, sliceCollection+"/b-1", token, nil, nil)
	if strings.ReplaceAll(missing, "missing", "b-1") != other {
		t.Errorf("404 of a missing slice %s and of node-b's %s differ", missing, other)
	}
}

// TestClaimWithoutNamespace: a claim asked for without a namespace is a
// 404 naming what is missing, never a 503.
func TestClaimWithoutNamespace(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	h := startProxy(t, f)
	code, body := h.do(t, http.MethodGet, "/apis/resource.k8s.io/v1/resourceclaims/c", f.token(driverOn("node-a")), nil, nil)
	if code != http.StatusNotFound || !strings.Contains(body, "names no namespace") {
		t.Errorf("GET a claim without namespace = %d %s; want 404 naming the namespace", code, body)
	}
}
