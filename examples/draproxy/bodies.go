package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/utils/ptr"
	sigsyaml "sigs.k8s.io/yaml"
)

// The media types of the request bodies draproxy reads.
const (
	mediaJSON           = "application/json"
	mediaYAML           = "application/yaml"
	mediaMergePatch     = "application/merge-patch+json"
	mediaStrategicPatch = "application/strategic-merge-patch+json"
	mediaJSONPatch      = "application/json-patch+json"
	mediaApplyYAML      = "application/apply-patch+yaml"
	mediaApplyCBOR      = "application/apply-patch+cbor"
)

// bodyKind is what a request body is to the API server.
type bodyKind int

const (
	bodyObject         bodyKind = iota // a whole object: create, update (PUT)
	bodyMergePatch                     // RFC 7386 JSON merge patch
	bodyStrategicPatch                 // strategic merge patch
	bodyJSONPatch                      // RFC 6902 JSON patch
	bodyApply                          // server-side apply: creates a missing object
	bodyDeleteOptions                  // DeleteOptions of a delete
)

// requestBody is a request body draproxy can read: as JSON, whatever it
// arrived as.
type requestBody struct {
	kind bodyKind
	// json is the body as JSON: the driver's bytes, or its YAML converted
	// strictly (duplicate keys refused) to JSON, as the API server
	// converts it (sigs.k8s.io/yaml).
	json []byte
	// contentType is the Content-Type to forward json with: the driver's,
	// or application/json for a body converted from YAML (an apply body
	// keeps application/apply-patch+yaml, of which JSON is a subset).
	contentType string
	// rewritten: json is not the driver's bytes; forward it with
	// contentType.
	rewritten bool
}

// readRequestBody reads the body of a write (verb create, update, patch or
// delete) as JSON. A body in a media type draproxy cannot read (protobuf,
// CBOR, anything but JSON, YAML and the patch types) is 415: draproxy must
// read what it checks, and must be able to add a UID precondition to what
// it forwards. A body that does not parse is 400. A delete without a body
// has none (nil, nil).
func readRequestBody(verb, contentType string, body []byte) (*requestBody, *apierrors.StatusError) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt = contentType
	}
	if verb == "delete" && len(body) == 0 {
		return nil, nil
	}
	b := &requestBody{json: body, contentType: contentType}
	var yamlBody bool
	switch {
	case verb == "patch" && mt == mediaMergePatch:
		b.kind = bodyMergePatch
	case verb == "patch" && mt == mediaStrategicPatch:
		b.kind = bodyStrategicPatch
	case verb == "patch" && mt == mediaJSONPatch:
		b.kind = bodyJSONPatch
	case verb == "patch" && mt == mediaApplyYAML:
		b.kind, yamlBody = bodyApply, true
	case verb != "patch" && (mt == mediaJSON || mt == mediaYAML):
		b.kind, yamlBody = bodyObject, mt == mediaYAML
		if verb == "delete" {
			b.kind = bodyDeleteOptions
		}
	case verb == "patch":
		why := ""
		if mt == mediaApplyCBOR {
			why = " (CBOR, which the API server serves only with its alpha CBORServingAndStorage feature)"
		}
		return nil, unsupportedMediaType(fmt.Sprintf("draproxy reads and rewrites the patches it forwards, and accepts only %s, %s, %s and %s, not %q%s", mediaMergePatch, mediaStrategicPatch, mediaJSONPatch, mediaApplyYAML, contentType, why))
	default:
		return nil, unsupportedMediaType(fmt.Sprintf("draproxy reads the bodies of the writes it checks, and accepts only JSON (or YAML), not %q: set ContentType to \"application/json\" in the driver's rest.Config", contentType))
	}
	if yamlBody {
		// Strict: a key said twice is refused, as decodeJSON refuses it.
		j, err := sigsyaml.YAMLToJSONStrict(body)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("%v: the YAML body does not parse: %v", errBadBody, err))
		}
		b.json, b.rewritten = j, true
		if b.kind != bodyApply {
			b.contentType = mediaJSON
		}
	}
	if len(b.json) == 0 || string(b.json) == "null" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%v: the body is empty", errBadBody))
	}
	return b, nil
}

// sliceDocument is what draproxy reads of a ResourceSlice in a request
// body (an object, a merge patch or an apply configuration).
type sliceDocument struct {
	Metadata *struct {
		UID *string `json:"uid"`
	} `json:"metadata"`
	Spec *sliceSpec `json:"spec"`
}

// sliceDoc decodes a ResourceSlice document (JSON) strictly: a document
// that is not a JSON object, whose fields draproxy reads have the wrong
// types, or that repeats one of them is an error matching errBadBody.
func sliceDoc(data []byte) (*sliceDocument, error) {
	var d sliceDocument
	if err := decodeJSON(data, &d); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadBody, err)
	}
	return &d, nil
}

// bodyNodeName returns the spec.nodeName of a ResourceSlice in a JSON
// request body, and whether it is set (null and absent are unset). Only
// the fields draproxy checks are decoded, whatever the API version. A body
// that is not a JSON object, whose spec is not an object, whose nodeName
// is not a string, or that repeats one of these fields is an error
// matching errBadBody.
func bodyNodeName(data []byte) (node string, set bool, err error) {
	d, err := sliceDoc(data)
	if err != nil {
		return "", false, err
	}
	if d.Spec == nil || d.Spec.NodeName == nil {
		return "", false, nil
	}
	return *d.Spec.NodeName, true, nil
}

// jsonPatchOp is one operation of a JSON patch, as draproxy reads it.
type jsonPatchOp struct {
	Op   string  `json:"op"`
	Path string  `json:"path"`
	From *string `json:"from"`
}

// bindingPaths are the JSON pointers of what binds a ResourceSlice to
// nodes and to a driver: a JSON patch may read them (test, the from of
// copy) but not write them, nor their parents.
var bindingPaths = []string{"/spec/nodeName", "/spec/driver", "/spec/allNodes", "/spec/nodeSelector", "/spec/perDeviceNodeSelection", "/metadata/uid"}

// parseJSONPatch checks that data is a JSON patch draproxy can read: an
// array of operations of the six kinds, each said once. An error matches
// errBadBody.
func parseJSONPatch(data []byte) error {
	_, err := jsonPatchOps(data)
	return err
}

func jsonPatchOps(data []byte) ([]jsonPatchOp, error) {
	var ops []jsonPatchOp
	if err := decodeJSON(data, &ops); err != nil {
		return nil, fmt.Errorf("%w: not a JSON patch: %v", errBadBody, err)
	}
	for _, op := range ops {
		switch op.Op {
		case "test", "move", "add", "remove", "replace", "copy":
		default:
			return nil, fmt.Errorf("%w: JSON patch operation %q", errBadBody, op.Op)
		}
	}
	return ops, nil
}

// jsonPatchWrites returns the first pointer a JSON patch writes that is,
// or is a parent or a child of, one of bindingPaths ("" when none), or an
// error matching errBadBody for a body that is not a JSON patch.
func jsonPatchWrites(data []byte) (string, error) {
	ops, err := jsonPatchOps(data)
	if err != nil {
		return "", err
	}
	for _, op := range ops {
		written := []string{op.Path}
		switch op.Op {
		case "test":
			continue
		case "move":
			if op.From != nil {
				written = append(written, *op.From) // removed from there
			}
		}
		for _, w := range written {
			if w == "" {
				return "(the whole object)", nil
			}
			for _, b := range bindingPaths {
				if w == b || strings.HasPrefix(b, w+"/") || strings.HasPrefix(w, b+"/") {
					return w, nil
				}
			}
		}
	}
	return "", nil
}

// errUIDConflict: the body already carries a UID precondition for
// another object than the one draproxy checked (409).
var errUIDConflict = errors.New("draproxy: UID precondition of another object")

// pinUID returns body with a precondition the API server enforces: the
// write applies only to the object whose UID is uid, the one draproxy
// checked. A whole object, a merge or strategic merge patch and an apply
// configuration get metadata.uid; a JSON patch gets a leading test of
// /metadata/uid; DeleteOptions get preconditions.uid (keeping a
// resourceVersion precondition the driver set). A body without one gets
// one; one whose UID precondition names another UID is errUIDConflict.
// The other fields are forwarded as they are (their values byte for byte;
// the objects that hold them re-encoded). query is the request's, for a
// delete without a body, whose options it holds: they move into the body,
// which the API server reads instead.
func pinUID(b *requestBody, uid string, query url.Values) ([]byte, error) {
	if b == nil { // a delete without a body
		var opts metav1.DeleteOptions
		// As the API server's delete handler reads them.
		if err := metainternalversionscheme.ParameterCodec.DecodeParameters(query, metav1.SchemeGroupVersion, &opts); err != nil {
			return nil, fmt.Errorf("%w: the delete options in the query: %v", errBadBody, err)
		}
		opts.TypeMeta = metav1.TypeMeta{Kind: "DeleteOptions", APIVersion: "v1"}
		opts.Preconditions = &metav1.Preconditions{UID: ptr.To(types.UID(uid))}
		return json.Marshal(&opts)
	}
	switch b.kind {
	case bodyJSONPatch:
		test, err := json.Marshal([]map[string]string{{"op": "test", "path": "/metadata/uid", "value": uid}})
		if err != nil {
			return nil, err
		}
		rest := strings.TrimLeft(string(b.json), " \t\r\n")
		if !strings.HasPrefix(rest, "[") {
			return nil, fmt.Errorf("%w: a JSON patch is an array", errBadBody)
		}
		rest = strings.TrimLeft(rest[1:], " \t\r\n")
		if strings.HasPrefix(rest, "]") {
			return test, nil
		}
		return []byte(string(test[:len(test)-1]) + "," + rest), nil
	case bodyDeleteOptions:
		return setNested(b.json, "preconditions", uid)
	}
	return setNested(b.json, "metadata", uid)
}

// setNested sets the "uid" of the object under key in the JSON object doc,
// which must not already hold another one.
func setNested(doc []byte, key, uid string) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil || top == nil {
		return nil, fmt.Errorf("%w: the body is not a JSON object", errBadBody)
	}
	inner := map[string]json.RawMessage{}
	if raw, ok := top[key]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &inner); err != nil || inner == nil {
			return nil, fmt.Errorf("%w: %s is not an object", errBadBody, key)
		}
	}
	if raw, ok := inner["uid"]; ok && string(raw) != "null" {
		var have string
		if err := json.Unmarshal(raw, &have); err != nil {
			return nil, fmt.Errorf("%w: %s.uid is not a string", errBadBody, key)
		}
		if have != uid {
			return nil, fmt.Errorf("%w: %s.uid is %q, and the object is %q", errUIDConflict, key, have, uid)
		}
	}
	var err error
	if inner["uid"], err = json.Marshal(uid); err != nil {
		return nil, err
	}
	if top[key], err = json.Marshal(inner); err != nil {
		return nil, err
	}
	return json.Marshal(top)
}

// bodyStatus maps an error of reading or rewriting the body of a write of
// the object a names to its answer: 409 for errUIDConflict, as the API
// server answers a failed precondition, else 400.
func bodyStatus(a authorizer.Attributes, err error) *apierrors.StatusError {
	if errors.Is(err, errUIDConflict) {
		gr := schema.GroupResource{Group: a.GetAPIGroup(), Resource: a.GetResource()}
		return apierrors.NewConflict(gr, a.GetName(), fmt.Errorf("%v: the object of this name is not the one the request's precondition names", err))
	}
	return apierrors.NewBadRequest(err.Error())
}
