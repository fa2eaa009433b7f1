package authtest

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	"github.com/reviewauth/reviewauth/internal/scheme"
)

// Media types the server speaks. client-go's generated clients send and
// prefer protobuf for built-in types; other clients send JSON.
const (
	mediaJSON     = "application/json"
	mediaProtobuf = "application/vnd.kubernetes.protobuf"
)

// maxBodyBytes is the request body limit of a real kube-apiserver (3 MiB).
const maxBodyBytes = 3 << 20

// protobufSerializer speaks protobuf for the kinds the server serves.
var protobufSerializer = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)

// readBody decodes the request body into obj as decodeBody does, and when
// it cannot, answers the Status and returns false.
func readBody(w http.ResponseWriter, r *http.Request, gvk schema.GroupVersionKind, obj runtime.Object) bool {
	if st := decodeBody(r, gvk, obj); st != nil {
		writeStatus(w, st)
		return false
	}
	return true
}

// respondAs answers obj, a review or TokenRequest of type tm, as the fault
// f shapes it: with a body that cannot be decoded, an object of another
// kind, obj with an empty status, or obj once fill has set its status
// (padded to f.BodyBytes).
func respondAs(w http.ResponseWriter, r *http.Request, f Fault, tm metav1.TypeMeta, obj runtime.Object, fill func()) {
	switch {
	case f.MalformedBody:
		respondMalformed(w, r, tm)
	case f.WrongKind:
		respond(w, r, http.StatusCreated, wrongKindObject(tm.Kind))
	case f.EmptyStatus:
		respond(w, r, http.StatusCreated, obj)
	default:
		fill()
		respondPadded(w, r, http.StatusCreated, obj, f.BodyBytes)
	}
}

// decodeBody decodes a JSON or protobuf request body of kind gvk into obj,
// strictly: a wrong kind or apiVersion, unknown JSON fields, trailing data
// and other content types are rejected with the Status to answer. A JSON
// body without kind and apiVersion is accepted, like a real server does.
func decodeBody(r *http.Request, gvk schema.GroupVersionKind, obj runtime.Object) *metav1.Status {
	mt := mediaJSON
	if ct := r.Header.Get("Content-Type"); ct != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(ct); err != nil || (mt != mediaJSON && mt != mediaProtobuf) {
			return &metav1.Status{
				Status:  metav1.StatusFailure,
				Message: fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s", mediaJSON, mediaProtobuf),
				Reason:  metav1.StatusReasonUnsupportedMediaType,
				Code:    http.StatusUnsupportedMediaType,
			}
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return statusOf(apierrors.NewBadRequest("authtest: cannot read request body: " + err.Error()))
	}
	if len(body) > maxBodyBytes {
		return statusOf(apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", maxBodyBytes)))
	}
	cannotHandle := func(format string, args ...any) *metav1.Status {
		return statusOf(apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: ", gvk.Kind, gvk.Version, gvk.Kind) + fmt.Sprintf(format, args...)))
	}
	if mt == mediaProtobuf {
		got, actual, err := protobufSerializer.Decode(body, nil, nil)
		if err != nil {
			return cannotHandle("%v", err)
		}
		if *actual != gvk {
			return cannotHandle("the object provided is %s; must be %s", actual, gvk)
		}
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(got).Elem())
		return nil
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(body, &tm); err != nil {
		return statusOf(apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): %v", gvk.Kind, err)))
	}
	if tm.APIVersion != "" && tm.APIVersion != gvk.GroupVersion().String() {
		return statusOf(apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)", tm.APIVersion, gvk.GroupVersion())))
	}
	if tm.Kind != "" && tm.Kind != gvk.Kind {
		return cannotHandle("the object provided is unrecognized (kind %q, must be %s)", tm.Kind, gvk.Kind)
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return cannotHandle("strict decoding error: %v", err)
	}
	if dec.More() {
		return cannotHandle("trailing data after the object")
	}
	return nil
}

// wantsProtobuf reports whether the request's Accept header prefers
// protobuf over JSON.
func wantsProtobuf(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case mediaProtobuf:
			return true
		case mediaJSON, "*/*", "application/*":
			return false
		}
	}
	return false
}

// respond writes obj with status code, in protobuf when the client prefers
// it and in JSON (encoding/json) otherwise. obj must have its TypeMeta set.
func respond(w http.ResponseWriter, r *http.Request, code int, obj runtime.Object) {
	if !wantsProtobuf(r) {
		writeJSON(w, code, obj)
		return
	}
	var buf strings.Builder
	if err := protobufSerializer.Encode(obj, &buf); err != nil {
		writeStatus(w, statusOf(apierrors.NewInternalError(fmt.Errorf("authtest: cannot encode response: %w", err))))
		return
	}
	w.Header().Set("Content-Type", mediaProtobuf)
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, buf.String())
}

// respondPadded is respond, with a JSON body padded with trailing spaces to
// size bytes when it is shorter.
func respondPadded(w http.ResponseWriter, r *http.Request, code int, obj runtime.Object, size int) {
	if size <= 0 || wantsProtobuf(r) {
		respond(w, r, code, obj)
		return
	}
	body, err := json.Marshal(obj)
	if err != nil {
		writeStatus(w, statusOf(apierrors.NewInternalError(fmt.Errorf("authtest: cannot encode response: %w", err))))
		return
	}
	if pad := size - len(body); pad > 0 {
		body = append(body, strings.Repeat(" ", pad)...)
	}
	w.Header().Set("Content-Type", mediaJSON)
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// respondMalformed writes 201 with a body that cannot be decoded, in the
// media type the client prefers.
func respondMalformed(w http.ResponseWriter, r *http.Request, tm metav1.TypeMeta) {
	if wantsProtobuf(r) {
		w.Header().Set("Content-Type", mediaProtobuf)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("k8s\x00\x0a\xff\xff\xff\xff\x0f\x01")) // magic, then a truncated field
		return
	}
	w.Header().Set("Content-Type", mediaJSON)
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, `{"kind":%q,"apiVersion":%q,"status":{"authenticated":tru`, tm.Kind, tm.APIVersion)
}
