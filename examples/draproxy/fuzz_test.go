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
// body of version (JSON, or YAML when yaml), and returns its nodeName and
// driver; ok is false when the API server would refuse the body.
func apiServerSlice(t *testing.T, data []byte, version string, yaml bool) (node, driver string, ok bool) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := resourcev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := resourcev1beta1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	s := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: yaml})
	gvk := schema.GroupVersionKind{Group: "resource.k8s.io", Version: version, Kind: "ResourceSlice"}
	obj, _, err := s.Decode(data, &gvk, nil)
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
			node, driver, ok := apiServerSlice(t, data, version, yaml)
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
