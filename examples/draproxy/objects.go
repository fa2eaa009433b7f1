package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	sigsjson "sigs.k8s.io/json"

	"github.com/reviewauth/reviewauth/internal/cache"
)

// Bounds of the object checks.
const (
	// DefaultMaxBodyBytes bounds a request body, which draproxy reads whole
	// before it forwards it: the API server's own limit for JSON and
	// protobuf bodies (3 MiB), above etcd's 1.5 MiB object limit.
	DefaultMaxBodyBytes = 3 << 20
	// maxObjectBytes bounds an object the proxy reads for its own checks,
	// or reads back to check before it answers a get; a bigger answer is
	// "could not check".
	maxObjectBytes = 4 << 20
)

var (
	// errNotFound: the API server has no such object. The proxy answers it
	// as it answers another node's object, so that a driver cannot tell
	// other nodes' objects from missing ones.
	errNotFound = errors.New("not found")
	// errBadBody: the request body is not a document of the expected
	// shape (400).
	errBadBody = errors.New("draproxy: malformed request body")
)

// lookupError is "could not check": the proxy could not read an object it
// needs for its decision, or what it read is not that object (503).
type lookupError struct {
	what       string
	code       int // HTTP status of the API server's answer; 0: none
	retryAfter time.Duration
	err        error
}

func (e *lookupError) Error() string {
	switch {
	case e.err != nil:
		return fmt.Sprintf("draproxy: reading %s: %v", e.what, e.err)
	case e.code == http.StatusUnauthorized:
		return fmt.Sprintf("draproxy: reading %s: the API server rejected draproxy's own credentials", e.what)
	case e.code == http.StatusForbidden:
		return fmt.Sprintf("draproxy: reading %s: the API server refused it: check draproxy's RBAC (impersonate:associated-node on nodes, impersonate-on:associated-node:VERB on what it reads as the node)", e.what)
	}
	return fmt.Sprintf("draproxy: reading %s: the API server answered %d", e.what, e.code)
}

func (e *lookupError) Unwrap() error { return e.err }

// objectRef names one object draproxy reads: its API group and version
// (those of the driver's request), resource, kind, namespace ("" for a
// cluster-scoped resource) and name.
type objectRef struct {
	group, version, resource, kind string
	namespace, name                string
}

// path is the object's API path.
func (r objectRef) path() string {
	return r.collection() + "/" + url.PathEscape(r.name)
}

// collection is the API path of the object's collection.
func (r objectRef) collection() string {
	p := "/api/" + r.version
	if r.group != "" {
		p = "/apis/" + r.group + "/" + r.version
	}
	if r.namespace != "" {
		p += "/namespaces/" + url.PathEscape(r.namespace)
	}
	return p + "/" + r.resource
}

// apiVersion is the apiVersion the object's answer carries.
func (r objectRef) apiVersion() string {
	if r.group == "" {
		return r.version
	}
	return r.group + "/" + r.version
}

// String names the object in messages: its kind and name, with its
// namespace if it has one.
func (r objectRef) String() string {
	if r.namespace == "" {
		return r.kind + " " + strconv.Quote(r.name)
	}
	return r.kind + " " + r.namespace + "/" + r.name
}

// objectHeader is what identifies an object the API server returns.
type objectHeader struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		UID       string `json:"uid"`
	} `json:"metadata"`
}

func (h *objectHeader) header() *objectHeader { return h }

// headed is an object decoded with its objectHeader.
type headed interface{ header() *objectHeader }

// check returns an error unless h is the header of the object ref names:
// its kind, apiVersion, name and namespace, and a UID. An answer that is
// anything else ({}, a Status, another object) cannot be checked.
func (h *objectHeader) check(ref objectRef) error {
	switch {
	case h.Kind != ref.kind || h.APIVersion != ref.apiVersion():
		return fmt.Errorf("the answer is a %q of %q, not a %s of %s", h.Kind, h.APIVersion, ref.kind, ref.apiVersion())
	case h.Metadata.Name != ref.name || h.Metadata.Namespace != ref.namespace:
		return fmt.Errorf("the answer is %q in namespace %q, not the object asked for", h.Metadata.Name, h.Metadata.Namespace)
	case h.Metadata.UID == "":
		return errors.New("the answer has no metadata.uid")
	}
	return nil
}

// decodeObject decodes an answer for the object ref names into v (strict:
// duplicate fields refused) and checks its header.
func decodeObject(data []byte, ref objectRef, v headed) error {
	if err := decodeJSON(data, v); err != nil {
		return err
	}
	return v.header().check(ref)
}

// sliceObject is what draproxy reads of a ResourceSlice: its identity and
// what binds it to nodes and to a driver.
type sliceObject struct {
	objectHeader
	Spec *sliceSpec `json:"spec"`
}

// sliceSpec is the part of a ResourceSlice's spec that binds it: the same
// fields, under the same names, in resource.k8s.io v1, v1beta2 and v1beta1
// (where nodeName and allNodes are plain values, empty and false when
// unset).
type sliceSpec struct {
	Driver   *string `json:"driver"`
	NodeName *string `json:"nodeName"`
	// NodeSelector is set (to a struct{}, which costs no allocation) when
	// the field is an object, nil when it is absent or null.
	NodeSelector           *struct{} `json:"nodeSelector"`
	AllNodes               *bool     `json:"allNodes"`
	PerDeviceNodeSelection *bool     `json:"perDeviceNodeSelection"`
}

// driver is spec.driver, "" when unset.
func (s *sliceSpec) driver() string {
	if s == nil || s.Driver == nil {
		return ""
	}
	return *s.Driver
}

// boundTo reports whether the slice is bound to node alone: spec.nodeName
// is node and none of the other ways to name nodes is set.
func (s *sliceSpec) boundTo(node string) bool {
	return s != nil && s.NodeName != nil && *s.NodeName == node && !s.otherBinding()
}

// otherBinding reports whether spec sets allNodes, nodeSelector or
// perDeviceNodeSelection (null and false are unset).
func (s *sliceSpec) otherBinding() bool {
	return (s.AllNodes != nil && *s.AllNodes) || s.NodeSelector != nil ||
		(s.PerDeviceNodeSelection != nil && *s.PerDeviceNodeSelection)
}

// decodeSlice decodes an answer for the ResourceSlice ref names: it must
// be that slice, with a spec naming its driver.
func decodeSlice(data []byte, ref objectRef) (*sliceObject, error) {
	var s sliceObject
	if err := decodeObject(data, ref, &s); err != nil {
		return nil, err
	}
	if s.Spec.driver() == "" {
		return nil, errors.New("the answer has no spec.driver")
	}
	return &s, nil
}

// consumer is one entry of a ResourceClaim's status.reservedFor.
type consumer struct {
	APIGroup string `json:"apiGroup"`
	Resource string `json:"resource"`
	Name     string `json:"name"`
	UID      string `json:"uid"`
}

// claimObject is what draproxy reads of a ResourceClaim.
type claimObject struct {
	objectHeader
	Status struct {
		ReservedFor []consumer `json:"reservedFor"`
	} `json:"status"`
}

// podObject is what draproxy reads of a Pod.
type podObject struct {
	objectHeader
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
}

// sliceList is what draproxy reads of a list of ResourceSlices: the
// API server writes its items without kind and apiVersion.
type sliceList struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Items      []sliceObject `json:"items"`
}

// objects reads the few fields of stored objects the proxy's checks need,
// decoding only those fields from JSON, so that it depends on no version
// of the resource.k8s.io API; as the node (node set: the reads of the
// proxy's checks), or with draproxy's own credentials (node zero: the
// admission policy check). Every object read is checked to be the one
// asked for. Nothing is remembered; concurrent reads of one object are
// shared.
type objects struct {
	client *http.Client
	host   *url.URL
	keyer  *cache.Keyer
	node   nodeImpersonation // zero: draproxy's own identity
	ua     []string          // the User-Agent of reads as the node

	sliceLoads cache.Group[*sliceObject]
	podLoads   cache.Group[podInfo]
}

type podInfo struct{ uid, node string }

// newObjects returns the reads through client at host, as node (the zero
// nodeImpersonation: as draproxy itself).
func newObjects(client *http.Client, host *url.URL, node nodeImpersonation) *objects {
	o := &objects{client: client, host: host, keyer: cache.NewKeyer(), node: node}
	if node.user != nil {
		o.ua = ownUserAgent(strings.TrimPrefix(node.name(), nodeUserPrefix))
	}
	return o
}

func (o *objects) refKey(ref objectRef) cache.Key {
	h := o.keyer.NewHash()
	h.WriteString(ref.group)
	h.WriteString(ref.version)
	h.WriteString(ref.resource)
	h.WriteString(ref.namespace)
	h.WriteString(ref.name)
	return h.Sum()
}

// slice reads the ResourceSlice ref names as it is now, if it is bound to
// node by spec.nodeName: a list, as the node, with the field selector
// metadata.name=NAME,spec.nodeName=NODE, which the Node authorizer allows
// the node whatever its graph holds (a get of a slice is allowed only
// along the graph's edge from the slice to the node, which the API
// server adds a moment after the slice is created). Never remembered, so
// that a decision on it is a decision on the object the API server holds
// (and the write that follows carries its UID). It returns errNotFound
// when there is none (none of that name, or one of another node).
func (o *objects) slice(ctx context.Context, ref objectRef, node string) (*sliceObject, error) {
	s, _, err := o.sliceLoads.Do(ctx, o.refKey(ref), func(ctx context.Context) (*sliceObject, error) {
		sel := fields.AndSelectors(fields.OneTermEqualSelector("metadata.name", ref.name), fields.OneTermEqualSelector("spec.nodeName", node))
		data, err := o.read(ctx, ref.String(), ref.collection()+"?fieldSelector="+url.QueryEscape(sel.String()))
		if err != nil {
			return nil, err
		}
		s, err := decodeSliceList(data, ref)
		if err != nil && !errors.Is(err, errNotFound) {
			return nil, &lookupError{what: ref.String(), err: err}
		}
		return s, err
	})
	return s, err
}

// decodeSliceList decodes the answer to slice's list: no item is
// errNotFound; one must be the slice ref names (its kind and apiVersion
// those of the list, or absent, as the API server writes list items),
// with a UID and a driver; more than one cannot be.
func decodeSliceList(data []byte, ref objectRef) (*sliceObject, error) {
	var l sliceList
	if err := decodeJSON(data, &l); err != nil {
		return nil, err
	}
	switch {
	case l.Kind != ref.kind+"List" || l.APIVersion != ref.apiVersion():
		return nil, fmt.Errorf("the answer is a %q of %q, not a %sList of %s", l.Kind, l.APIVersion, ref.kind, ref.apiVersion())
	case len(l.Items) == 0:
		return nil, errNotFound
	case len(l.Items) > 1:
		return nil, fmt.Errorf("the answer lists %d objects named %q", len(l.Items), ref.name)
	}
	s := &l.Items[0]
	if s.Kind == "" && s.APIVersion == "" {
		s.Kind, s.APIVersion = ref.kind, ref.apiVersion()
	}
	if err := s.check(ref); err != nil {
		return nil, err
	}
	if s.Spec.driver() == "" {
		return nil, errors.New("the answer has no spec.driver")
	}
	return s, nil
}

// reservedOnNode reports whether one of a claim's reservations (in
// namespace ns) is for a pod (by name and UID) that the node reads as
// bound to node now. A reservation for a pod that no longer exists, for
// another pod of the same name, or for a pod the node may not read (one
// of another node) does not count. An error is "could not check".
func (o *objects) reservedOnNode(ctx context.Context, ns string, reserved []consumer, node string) (bool, error) {
	var lookupErr error
	// The pods read for this decision, each once (a claim may be reserved
	// for two pods of one name, by their UIDs): not a cache, gone with
	// the request.
	read := map[string]podInfo{}
	for _, r := range reserved {
		if r.APIGroup != "" || r.Resource != "pods" || r.Name == "" || r.UID == "" {
			continue
		}
		p, ok := read[r.Name]
		if !ok {
			var err error
			p, err = o.pod(ctx, ns, r.Name)
			switch {
			case errors.Is(err, errNotFound):
			case err != nil:
				// Keep looking: another reservation may settle it. Only an
				// unchecked reservation with no positive one is an error.
				lookupErr = err
				continue
			}
			read[r.Name] = p
		}
		if p.uid == r.UID && p.node == node {
			return true, nil
		}
	}
	return false, lookupErr
}

// pod returns the UID and spec.nodeName of the pod ns/name, read as the
// node, or errNotFound when the node reads no such pod (none of that
// name, or one the API server does not let the node read: the Node
// authorizer lets a node get only the pods bound to it). Nothing is
// remembered.
func (o *objects) pod(ctx context.Context, ns, name string) (podInfo, error) {
	ref := objectRef{version: "v1", resource: "pods", kind: "Pod", namespace: ns, name: name}
	p, _, err := o.podLoads.Do(ctx, o.refKey(ref), func(ctx context.Context) (podInfo, error) {
		data, err := o.read(ctx, ref.String(), ref.path())
		if err != nil {
			return podInfo{}, err
		}
		var p podObject
		if err := decodeObject(data, ref, &p); err != nil {
			return podInfo{}, &lookupError{what: ref.String(), err: err}
		}
		return podInfo{uid: p.Metadata.UID, node: p.Spec.NodeName}, nil
	})
	var le *lookupError
	if errors.As(err, &le) && le.code == http.StatusForbidden && o.node.user != nil {
		return podInfo{}, errNotFound // not the node's
	}
	return p, err
}

// read reads what the API server answers at path (under its URL; with a
// query after "?") as JSON, as the node (or with draproxy's own
// credentials, see objects). It returns errNotFound for a 404 and a
// *lookupError for anything else that is not a 200 whose whole body (at
// most maxObjectBytes) arrived.
func (o *objects) read(ctx context.Context, what, path string) ([]byte, error) {
	return o.do(ctx, what, http.MethodGet, path, nil)
}

// create posts v, JSON, to path with draproxy's own credentials (a
// review of its own, whatever o acts as) and decodes the answer, a 201 or
// a 200, into out. Any other answer is a *lookupError.
func (o *objects) create(ctx context.Context, what, path string, v, out any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return &lookupError{what: what, err: err}
	}
	data, err := o.do(ctx, what, http.MethodPost, path, body)
	if errors.Is(err, errNotFound) {
		err = &lookupError{what: what, code: http.StatusNotFound}
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &lookupError{what: what, err: err}
	}
	return nil
}

func (o *objects) do(ctx context.Context, what, method, path string, body []byte) ([]byte, error) {
	u := *o.host
	path, u.RawQuery, _ = strings.Cut(path, "?")
	u.Path = joinPath(u.Path, path)
	u.RawPath = ""
	var rb io.Reader
	if body != nil {
		rb = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rb)
	if err != nil {
		return nil, &lookupError{what: what, err: err}
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	} else if o.node.user != nil {
		o.node.setOn(req.Header)
		req.Header["User-Agent"] = o.ua
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return nil, &lookupError{what: what, err: err}
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK, method == http.MethodPost && resp.StatusCode == http.StatusCreated:
	case resp.StatusCode == http.StatusNotFound:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxObjectBytes))
		return nil, errNotFound
	default:
		e := &lookupError{what: what, code: resp.StatusCode, retryAfter: retryAfter(resp.Header)}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxObjectBytes))
		return nil, e
	}
	data, err := readAnswer(resp, nil)
	if err != nil {
		return nil, &lookupError{what: what, err: err}
	}
	return data, nil
}

// readAnswer reads a whole answer body of at most maxObjectBytes, into buf
// while it fits (then into a buffer of its own).
func readAnswer(resp *http.Response, buf []byte) ([]byte, error) {
	size := 512
	if resp.ContentLength > 0 && resp.ContentLength <= maxObjectBytes {
		size = int(resp.ContentLength) + 1 // +1: the EOF read needs no growth
	}
	if cap(buf) >= size {
		buf = buf[:0]
	} else {
		buf = make([]byte, 0, size)
	}
	for {
		n, err := resp.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > maxObjectBytes {
			return nil, fmt.Errorf("the answer is larger than %d bytes", maxObjectBytes)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
	}
}

// retryAfter is the Retry-After of an answer in whole seconds, 0 when it
// has none.
func retryAfter(h http.Header) time.Duration {
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

// joinPath joins the API server URL's path prefix (usually empty) and an
// API path.
func joinPath(prefix, p string) string {
	if prefix == "" || prefix == "/" {
		return p
	}
	if prefix[len(prefix)-1] == '/' {
		prefix = prefix[:len(prefix)-1]
	}
	return prefix + p
}

// decodeJSON decodes data into v as the API server decodes a JSON body
// (sigs.k8s.io/json: field names are case-sensitive, unknown fields are
// ignored) and refuses duplicate fields, which the API server would
// resolve to the last one: a document that says two things about a field
// the proxy checks is refused rather than guessed at.
func decodeJSON(data []byte, v any) error {
	strict, err := sigsjson.UnmarshalStrict(data, v, sigsjson.DisallowDuplicateFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return fmt.Errorf("duplicate field: %w", errors.Join(strict...))
	}
	return nil
}
