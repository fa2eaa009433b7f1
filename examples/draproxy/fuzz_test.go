package main

import (
	"errors"
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
