package main

import (
	stdjson "encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	resourcev1beta1 "k8s.io/api/resource/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/utils/ptr"
	sigsjson "sigs.k8s.io/json"

	"github.com/reviewauth/reviewauth/examples/internal/difftest"
)

// FuzzBodyNodeName checks bodyNodeName against the API server's own JSON
// decoder (the serializer the API server decodes a create with, into the
// typed ResourceSlice of v1 and of v1beta1, whose nodeName is a plain
// string): whenever bodyNodeName accepts a body and the API server would
// decode it, both read the same spec.nodeName. So a body cannot pass
// draproxy's check for this node and be stored for another.
func FuzzBodyNodeName(f *testing.F) {
	for _, s := range []string{
		`{"spec":{"nodeName":"node-a"}}`,
		`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","spec":{"nodeName":"node-a","driver":"d"}}`,
		`{"spec":{"nodeName":"node-a","nodeName":"node-b"}}`,
		`{"spec":{"NodeName":"node-b","nodeName":"node-a"}}`,
		`{"spec":{"node\u004eame":"node-a"}}`,
		`{"spec":null}`, `{"spec":{"nodeName":null}}`, `null`, `[]`, `{"spec":{}}`,
		`{"spec":{"nodeName":"node-a"}} {}`, "\ufeff{\"spec\":{\"nodeName\":\"a\"}}",
		`{"spec":{"nodeName":"n\u0000"}}`, `{"Spec":{"nodeName":"node-b"},"spec":{"nodeName":"node-a"}}`,
	} {
		f.Add([]byte(s))
	}
	scheme := runtime.NewScheme()
	if err := resourcev1.AddToScheme(scheme); err != nil {
		f.Fatal(err)
	}
	if err := resourcev1beta1.AddToScheme(scheme); err != nil {
		f.Fatal(err)
	}
	apiserver := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{})
	f.Fuzz(func(t *testing.T, data []byte) {
		node, set, err := bodyNodeName(data)
		if err != nil {
			if !errors.Is(err, errBadBody) {
				t.Fatalf("bodyNodeName(%q) = %v; want an error matching errBadBody", data, err)
			}
			return
		}
		if !set && node != "" {
			t.Fatalf("bodyNodeName(%q) = %q, unset", data, node)
		}
		// The API server decodes into the version of the request's path
		// (the defaults) or of the body's apiVersion.
		for _, version := range []string{"v1", "v1beta1"} {
			gvk := schema.GroupVersionKind{Group: "resource.k8s.io", Version: version, Kind: "ResourceSlice"}
			obj, _, err := apiserver.Decode(data, &gvk, nil)
			if err != nil {
				continue
			}
			var got string
			var gotSet bool
			switch s := obj.(type) {
			case *resourcev1.ResourceSlice:
				if gotSet = s.Spec.NodeName != nil; gotSet {
					got = *s.Spec.NodeName
				}
			case *resourcev1beta1.ResourceSlice:
				got, gotSet = s.Spec.NodeName, set // a plain string: "" is unset
			default:
				continue // another kind: the API server refuses it for this resource
			}
			if got != node || gotSet != set {
				t.Fatalf("bodyNodeName(%q) = %q (set %v); the API server (%T) reads %q (set %v)", data, node, set, obj, got, gotSet)
			}
		}
	})
}

// apiServerSlice decodes data as the API server decodes a ResourceSlice
// body of version (JSON, or YAML when yaml) with the serializers of
// apiServerSerializers, and returns its nodeName and driver; ok is false
// when the API server would refuse the body.
func apiServerSlice(serializers map[bool]runtime.Decoder, data []byte, version string, yaml bool) (node, driver string, ok bool) {
	gvk := schema.GroupVersionKind{Group: "resource.k8s.io", Version: version, Kind: "ResourceSlice"}
	obj, _, err := serializers[yaml].Decode(data, &gvk, nil)
	if err != nil {
		return "", "", false
	}
	switch o := obj.(type) {
	case *resourcev1.ResourceSlice:
		if o.Spec.NodeName != nil {
			node = *o.Spec.NodeName
		}
		return node, o.Spec.Driver, true
	case *resourcev1beta1.ResourceSlice:
		return o.Spec.NodeName, o.Spec.Driver, true
	}
	return "", "", false
}

// apiServerSerializers are the API server's JSON (false) and YAML (true)
// serializers of resource.k8s.io v1 and v1beta1.
func apiServerSerializers(f *testing.F) map[bool]runtime.Decoder {
	scheme := runtime.NewScheme()
	if err := resourcev1.AddToScheme(scheme); err != nil {
		f.Fatal(err)
	}
	if err := resourcev1beta1.AddToScheme(scheme); err != nil {
		f.Fatal(err)
	}
	out := map[bool]runtime.Decoder{}
	for _, yaml := range []bool{false, true} {
		out[yaml] = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: yaml})
	}
	return out
}

// FuzzSliceBody checks what draproxy reads of a ResourceSlice body (JSON
// or YAML, as readRequestBody converts it) against the API server's own
// decoders: whenever draproxy reads a body and the API server would decode
// it, both read the same spec.nodeName and spec.driver. So a body cannot
// pass draproxy's check for this node and its driver and be stored for
// another node or driver.
func FuzzSliceBody(f *testing.F) {
	for _, s := range []string{
		`{"spec":{"nodeName":"node-a","driver":"d.example.com"}}`,
		`{"spec":{"nodeName":"node-a","driver":"d.example.com","Driver":"x"}}`,
		`{"spec":{"driver":"d","driver":"e"}}`,
		"spec:\n  nodeName: node-a\n  driver: d.example.com\n",
		"spec: {nodeName: node-a, driver: d}\nspec: {nodeName: node-b}\n",
		"spec:\n  nodeName: &n node-a\n  driver: *n\n",
		"spec:\n  <<: {nodeName: node-b}\n  nodeName: node-a\n",
		"spec:\n  nodeName: !!str 1\n",
		"spec:\n  nodeName: 0x10\n",
		"spec:\n  nodeName: ~\n",
		"\"spec\": {\"node\\u004eame\": \"node-a\"}",
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	serializers := apiServerSerializers(f)
	f.Fuzz(func(t *testing.T, data []byte, yaml bool) {
		contentType := mediaJSON
		if yaml {
			contentType = mediaYAML
		}
		b, st := readRequestBody("create", contentType, data)
		if st != nil {
			return
		}
		d, err := sliceDoc(b.json)
		if err != nil {
			if !errors.Is(err, errBadBody) {
				t.Fatalf("sliceDoc(%q) = %v; want an error matching errBadBody", b.json, err)
			}
			return
		}
		for _, version := range []string{"v1", "v1beta1"} {
			node, driver, ok := apiServerSlice(serializers, data, version, yaml)
			if !ok {
				continue
			}
			var gotNode string
			if d.Spec != nil && d.Spec.NodeName != nil {
				gotNode = *d.Spec.NodeName
			}
			if gotNode != node || d.Spec.driver() != driver {
				t.Fatalf("draproxy reads %q (as %s) as node %q driver %q; the API server (%s) as node %q driver %q", data, b.json, gotNode, d.Spec.driver(), version, node, driver)
			}
		}
	})
}

// FuzzPinUID checks that the UID precondition draproxy adds changes
// nothing else: a merge patch (or object) keeps every field, with
// metadata.uid set; a JSON patch keeps every operation after the test it
// gains. A body that already names another UID is refused.
func FuzzPinUID(f *testing.F) {
	for _, s := range []string{
		`{"metadata":{"labels":{"x":"y"}}}`, `{}`, `{"metadata":null}`, `{"metadata":{"uid":"u"}}`,
		`{"metadata":{"uid":"other"}}`, `{"spec":{"n":1.50,"big":123456789012345678901234567890}}`,
		`[]`, `[{"op":"add","path":"/a","value":1}]`, ` [ ] `, `{"a":"<&>"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const uid = "u"
		kind := bodyMergePatch
		if trimmed := strings.TrimSpace(string(data)); strings.HasPrefix(trimmed, "[") {
			kind = bodyJSONPatch
			if parseJSONPatch(data) != nil {
				return
			}
		} else if _, err := sliceDoc(data); err != nil {
			return
		}
		out, err := pinUID(&requestBody{kind: kind, json: data}, uid, nil)
		if err != nil {
			if !errors.Is(err, errBadBody) && !errors.Is(err, errUIDConflict) {
				t.Fatalf("pinUID(%q) = %v", data, err)
			}
			return
		}
		var in, got any
		if stdjson.Unmarshal(data, &in) != nil || stdjson.Unmarshal(out, &got) != nil {
			t.Fatalf("pinUID(%q) = %q: not JSON", data, out)
		}
		if kind == bodyJSONPatch {
			ops, _ := got.([]any)
			want := append([]any{map[string]any{"op": "test", "path": "/metadata/uid", "value": uid}}, in.([]any)...)
			if !reflect.DeepEqual(ops, want) {
				t.Fatalf("pinUID(%q) = %q; want the test, then the patch", data, out)
			}
			return
		}
		top := got.(map[string]any)
		md, _ := top["metadata"].(map[string]any)
		if md["uid"] != uid {
			t.Fatalf("pinUID(%q) = %q: metadata.uid is not %q", data, out, uid)
		}
		delete(md, "uid")
		want := in.(map[string]any)
		if wm, _ := want["metadata"].(map[string]any); wm != nil {
			delete(wm, "uid")
		}
		if len(md) == 0 {
			delete(top, "metadata")
		}
		if wm, ok := want["metadata"].(map[string]any); ok && len(wm) == 0 || want["metadata"] == nil {
			delete(want, "metadata")
		}
		if !reflect.DeepEqual(top, want) {
			t.Fatalf("pinUID(%q) = %q: changed more than metadata.uid", data, out)
		}
	})
}

// FuzzReadSliceAnswer holds readSliceAnswer, draproxy's hand-written
// reader of the slices it checks before a driver sees them, to
// sigs.k8s.io/json, with which the API server writes and client-go reads
// them: whenever it accepts an answer that client-go decodes into a
// resource.k8s.io/v1 ResourceSlice, both read the same identity and the
// same node binding; whenever decodeSlice (sigs.k8s.io/json, strict)
// accepts one, it accepts it too and reads the same.
func FuzzReadSliceAnswer(f *testing.F) {
	ref := objectRef{group: "resource.k8s.io", version: "v1", resource: "resourceslices", kind: "ResourceSlice", name: "a-1"}
	for _, s := range []string{
		`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"a-1","uid":"u","resourceVersion":"1"},"spec":{"driver":"d","nodeName":"node-a","pool":{"name":"p","generation":1,"resourceSliceCount":1},"devices":[{"name":"x","attributes":{"a":{"int":-1.5e3}}}]}}`,
		`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"a-1","uid":"u"},"spec":{"driver":"d","nodeName":"node-a","nodeSelector":{"nodeSelectorTerms":[]}}}`,
		`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"a-1","uid":"u"},"spec":{"driver":"d","node\u004eame":"node-a","NodeName":"node-b","allNodes":false}}`,
		`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"a-1","uid":"u"},"spec":{"driver":"d","nodeName":"node-a","nodeName":"node-b"}}`,
		`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"a-\ud83d\ude00","uid":"\ud800x"},"spec":{"driver":"d","nodeName":null,"perDeviceNodeSelection":true}}`,
		`{"kind":"Status","apiVersion":"v1","status":"Failure","code":404}`, `{}`, `[]`, `null`, ``, `{"a":01}`, `{"a":"\x01"}`,
		"{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceSlice\",\"metadata\":{\"name\":\"a-1\",\"uid\":\"u\\u00e9\xff\"},\"spec\":{\"driver\":\"d\",\"nodeName\":\"node-a\"}} ",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var a sliceAnswer
		err := readSliceAnswer(data, ref, &a)
		got := a.object()
		want, wantErr := decodeSlice(data, ref)
		if wantErr == nil && (err != nil || !sameSlice(got, want)) {
			t.Fatalf("readSliceAnswer(%q) = %+v, %v; decodeSlice reads %+v", data, got, err, want)
		}
		if err != nil {
			return
		}
		if a.boundTo("node-a") != got.Spec.boundTo("node-a") {
			t.Fatalf("readSliceAnswer(%q): boundTo differs from sliceSpec.boundTo", data)
		}
		var typed resourcev1.ResourceSlice
		if strictErrs, err := sigsjson.UnmarshalStrict(data, &typed); err != nil || len(strictErrs) > 0 {
			return // client-go would not read it
		}
		var client sliceObject
		client.APIVersion, client.Kind = typed.APIVersion, typed.Kind
		client.Metadata.Name, client.Metadata.Namespace, client.Metadata.UID = typed.Name, typed.Namespace, string(typed.UID)
		client.Spec = &sliceSpec{Driver: &typed.Spec.Driver, NodeName: typed.Spec.NodeName, AllNodes: typed.Spec.AllNodes, PerDeviceNodeSelection: typed.Spec.PerDeviceNodeSelection}
		if typed.Spec.NodeSelector != nil {
			client.Spec.NodeSelector = &struct{}{}
		}
		if !sameSlice(got, &client) {
			t.Fatalf("readSliceAnswer(%q) = %+v; client-go reads %+v", data, got, &client)
		}
	})
}

// object is a as decodeSlice returns it, for comparison.
func (a *sliceAnswer) object() *sliceObject {
	s := &sliceObject{Spec: &sliceSpec{}}
	s.APIVersion, s.Kind = string(a.apiVersion), string(a.kind)
	s.Metadata.Name, s.Metadata.Namespace, s.Metadata.UID = string(a.name), string(a.namespace), string(a.uid)
	if a.driverSet {
		s.Spec.Driver = ptr.To(string(a.driver))
	}
	if a.nodeNameSet {
		s.Spec.NodeName = ptr.To(string(a.nodeName))
	}
	if a.allNodesSet {
		s.Spec.AllNodes = ptr.To(a.allNodes)
	}
	if a.perDeviceSet {
		s.Spec.PerDeviceNodeSelection = ptr.To(a.perDevice)
	}
	if a.nodeSelector {
		s.Spec.NodeSelector = &struct{}{}
	}
	return s
}

// sameSlice reports whether a and b read the same identity and binding.
func sameSlice(a, b *sliceObject) bool {
	eqS := func(x, y *string) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	eqB := func(x, y *bool) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return a.objectHeader == b.objectHeader && eqS(a.Spec.Driver, b.Spec.Driver) && eqS(a.Spec.NodeName, b.Spec.NodeName) &&
		eqB(a.Spec.AllNodes, b.Spec.AllNodes) && eqB(a.Spec.PerDeviceNodeSelection, b.Spec.PerDeviceNodeSelection) &&
		(a.Spec.NodeSelector == nil) == (b.Spec.NodeSelector == nil) && a.Spec.boundTo("node-a") == b.Spec.boundTo("node-a")
}

// FuzzForwardedIsAuthorized is TestForwardedIsAuthorized with fuzzed
// requests (any method, target, header lines and body, with the node-a
// driver's token unless they carry an Authorization of their own) through
// draproxy on its Unix socket over HTTP/1.1: whatever reaches the API
// server, read back as the API server reads it, says what draproxy
// authorized.
func FuzzForwardedIsAuthorized(f *testing.F) {
	e := newDiffEnv(f)
	p := e.checker(e.clients["HTTP/1.1"])
	for _, seed := range [][4]string{
		{"GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-a", "Connection: Impersonate-User, Content-Type\nImpersonate-User: system:admin", ""},
		{"GET", "/apis/resource.k8s.io/v1/watch/resourceslices/a-1?fieldSelector=spec.nodeName%3Dnode-a", "impersonate_group: system:masters", ""},
		{"HEAD", "//apis/resource.k8s.io/v1/resourceslices/%61-1", "Accept: application/json;as=Table;g=meta.k8s.io;v=v1", ""},
		{"PATCH", "/apis/resource.k8s.io/v1/resourceslices/new?fieldManager=x", "Content_Type: application/apply-patch+yaml", diffSliceBody("new", "node-a")},
		{"PATCH", "/apis/resource.k8s.io/v1/resourceslices/a-1", "Content-Type: application/merge-patch+json\ncontent_type: application/apply-patch+yaml", `{"spec":{"nodeName":"node-b"}}`},
		{"POST", "/apis/resource.k8s.io/v1/resourceslices", "Content-Type: application/yaml", "metadata: {name: y}\nspec: {nodeName: node-a, driver: gpu.example.com}\n"},
		{"DELETE", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-a,spec.driver%3Dgpu.example.com", "", ""},
		{"GET", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/claim-a", "X-Remote-User: admin", ""},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	f.Fuzz(func(t *testing.T, method, target, headers, body string) {
		r, ok := difftest.FuzzRequest(method, target, headers, "Bearer "+e.driverA)
		if !ok || len(body) > 1<<16 {
			t.Skip()
		}
		r.Body = body
		if err := difftest.CheckOne(p, r); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzServiceAccountNamespace holds serviceAccountNamespace, which names
// the driver's pod in the forwarded User-Agent and the log line, to the
// API server's own reading of a ServiceAccount user name
// (serviceaccount.SplitUsername).
func FuzzServiceAccountNamespace(f *testing.F) {
	for _, s := range []string{"system:serviceaccount:ns:sa", "system:serviceaccount::sa", "system:serviceaccount:ns:sa:x", "system:node:a", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		ns, _, err := serviceaccount.SplitUsername(name)
		if err != nil {
			ns = ""
		}
		if got := serviceAccountNamespace(name); got != ns {
			t.Errorf("serviceAccountNamespace(%q) = %q; want %q (serviceaccount.SplitUsername)", name, got, ns)
		}
	})
}

// FuzzCutLiteral: the value variables draproxy reads from a live
// admission policy are exactly the literal kustomize wrote (split on '"'
// as kustomize splits it), and anything else is not read as one.
func FuzzCutLiteral(f *testing.F) {
	f.Add("gpu.example.com", `.split(",")`)
	f.Add("", "")
	f.Add(`a"b`, "")
	f.Fuzz(func(t *testing.T, value, rest string) {
		expr := `"` + value + `"` + rest
		got, gotRest, ok := cutLiteral(expr)
		clean := !strings.ContainsAny(value, `"\`)
		switch {
		case clean && (!ok || got != value || gotRest != rest):
			t.Errorf("cutLiteral(%q) = %q, %q, %v; want %q, %q", expr, got, gotRest, ok, value, rest)
		case ok && (strings.ContainsAny(got, `"\`) || `"`+got+`"`+gotRest != expr):
			t.Errorf("cutLiteral(%q) = %q, %q: not the expression's own literal", expr, got, gotRest)
		}
		// kustomize's split on '"', index 1, is the value read.
		if parts := strings.Split(expr, `"`); ok && parts[1] != got {
			t.Errorf("cutLiteral(%q) = %q; kustomize's replacement field is %q", expr, got, parts[1])
		}
	})
}
