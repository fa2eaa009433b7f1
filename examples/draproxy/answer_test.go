package main

import (
	"strings"
	"testing"
)

// TestReadSliceAnswer: the hand-written reader of checked answers reads
// what sigs.k8s.io/json reads (decodeSlice, the oracle), refuses what it
// refuses, and is bound at its depth limit exactly.
func TestReadSliceAnswer(t *testing.T) {
	t.Parallel()
	ref := objectRef{group: "resource.k8s.io", version: "v1", resource: "resourceslices", kind: "ResourceSlice", name: "a-1"}
	const head = `"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"a-1","uid":"u"}`
	tests := []struct {
		name, doc string
		ok, bound bool
	}{
		{name: "bound", doc: `{` + head + `,"spec":{"driver":"d","nodeName":"node-a"}}`, ok: true, bound: true},
		{name: "white space", doc: " \n{ " + head + " , \"spec\" : { \"driver\" : \"d\" , \"nodeName\" : \"node-a\" } }\t", ok: true, bound: true},
		{name: "escaped key and value", doc: `{` + head + `,"spec":{"driver":"d","node\u004eame":"node\u002da"}}`, ok: true, bound: true},
		{name: "another node", doc: `{` + head + `,"spec":{"driver":"d","nodeName":"node-b"}}`, ok: true},
		{name: "and all nodes", doc: `{` + head + `,"spec":{"driver":"d","nodeName":"node-a","allNodes":true}}`, ok: true},
		{name: "allNodes false", doc: `{` + head + `,"spec":{"driver":"d","nodeName":"node-a","allNodes":false}}`, ok: true, bound: true},
		{name: "and a selector", doc: `{` + head + `,"spec":{"driver":"d","nodeName":"node-a","nodeSelector":{}}}`, ok: true},
		{name: "selector null", doc: `{` + head + `,"spec":{"driver":"d","nodeName":"node-a","nodeSelector":null}}`, ok: true, bound: true},
		{name: "per device", doc: `{` + head + `,"spec":{"driver":"d","nodeName":"node-a","perDeviceNodeSelection":true}}`, ok: true},
		{name: "case of a field", doc: `{` + head + `,"spec":{"driver":"d","NodeName":"node-a"}}`, ok: true},
		{name: "unknown fields skipped", doc: `{` + head + `,"spec":{"driver":"d","nodeName":"node-a","devices":[{"name":"x","a":[1,-2.5e+3,true,null,{"nodeName":"node-b"}]}]}}`, ok: true, bound: true},
		{name: "nodeName said twice", doc: `{` + head + `,"spec":{"driver":"d","nodeName":"node-b","nodeName":"node-a"}}`},
		{name: "spec said twice", doc: `{` + head + `,"spec":{"driver":"d"},"spec":{"driver":"d","nodeName":"node-a"}}`},
		{name: "kind said twice", doc: `{"kind":"Pod",` + head + `,"spec":{"driver":"d","nodeName":"node-a"}}`},
		{name: "no driver", doc: `{` + head + `,"spec":{"nodeName":"node-a"}}`},
		{name: "no uid", doc: `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"a-1"},"spec":{"driver":"d","nodeName":"node-a"}}`},
		{name: "another name", doc: `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"a-2","uid":"u"},"spec":{"driver":"d","nodeName":"node-a"}}`},
		{name: "another version", doc: `{"apiVersion":"resource.k8s.io/v1beta1","kind":"ResourceSlice","metadata":{"name":"a-1","uid":"u"},"spec":{"driver":"d","nodeName":"node-a"}}`},
		{name: "a Status", doc: `{"kind":"Status","apiVersion":"v1","status":"Success","code":200}`},
		{name: "empty object", doc: `{}`},
		{name: "empty", doc: ``},
		{name: "trailing data", doc: `{` + head + `,"spec":{"driver":"d","nodeName":"node-a"}}{}`},
		{name: "trailing comma", doc: `{` + head + `,"spec":{"driver":"d","nodeName":"node-a",}}`},
		{name: "leading comma", doc: `{,` + head + `,"spec":{"driver":"d","nodeName":"node-a"}}`},
		{name: "missing comma", doc: `{` + head + ` "spec":{"driver":"d","nodeName":"node-a"}}`},
		{name: "bad number", doc: `{` + head + `,"x":01,"spec":{"driver":"d","nodeName":"node-a"}}`},
		{name: "control character", doc: `{` + head + `,"spec":{"driver":"d","nodeName":"node-a` + "\x01" + `"}}`},
		{name: "bad escape", doc: `{` + head + `,"spec":{"driver":"d","nodeName":"node-a\x"}}`},
		{name: "truncated", doc: `{` + head + `,"spec":{"driver":"d","nodeName":"node-a"`},
		{name: "nodeName a number", doc: `{` + head + `,"spec":{"driver":"d","nodeName":1}}`},
	}
	for _, tt := range tests {
		var a sliceAnswer
		err := readSliceAnswer([]byte(tt.doc), ref, &a)
		if (err == nil) != tt.ok || (err == nil && a.boundTo("node-a") != tt.bound) {
			t.Errorf("%s: readSliceAnswer(%s) = %v, bound %v; want ok %v, bound %v", tt.name, tt.doc, err, a.boundTo("node-a"), tt.ok, tt.bound)
		}
		s, oracleErr := decodeSlice([]byte(tt.doc), ref)
		if (oracleErr == nil) != tt.ok || (oracleErr == nil && s.Spec.boundTo("node-a") != tt.bound) {
			t.Errorf("%s: decodeSlice(%s) = %v; the oracle disagrees with the table", tt.name, tt.doc, oracleErr)
		}
	}
	// Nesting: at the limit refused, one below accepted.
	nested := func(depth int) string {
		return `{` + head + `,"spec":{"driver":"d","nodeName":"node-a","x":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}}`
	}
	var a sliceAnswer
	if err := readSliceAnswer([]byte(nested(maxAnswerDepth-2)), ref, &a); err != nil {
		t.Errorf("nesting %d: %v; want it read", maxAnswerDepth, err)
	}
	if err := readSliceAnswer([]byte(nested(maxAnswerDepth-1)), ref, &a); err == nil {
		t.Errorf("nesting %d: read; want it refused", maxAnswerDepth+1)
	}
}

// TestReadSliceAnswerAllocs: reading the usual answer allocates nothing
// (BenchmarkDRAProxy's get; the reason readSliceAnswer is written by hand).
func TestReadSliceAnswerAllocs(t *testing.T) {
	ref := objectRef{group: "resource.k8s.io", version: "v1", resource: "resourceslices", kind: "ResourceSlice", name: "a-1"}
	data := []byte(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"a-1","uid":"uid-a-1","resourceVersion":"1"},"spec":{"driver":"gpu.example.com","nodeName":"node-a","pool":{"generation":1,"name":"pool","resourceSliceCount":1},"devices":[{"name":"gpu-0"}]}}`)
	var a sliceAnswer
	if n := testing.AllocsPerRun(100, func() {
		if err := readSliceAnswer(data, ref, &a); err != nil || !a.boundTo("node-a") {
			t.Fatalf("readSliceAnswer = %v", err)
		}
	}); n != 0 {
		t.Errorf("readSliceAnswer allocates %v times; want 0", n)
	}
}
