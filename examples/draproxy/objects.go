package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/clock"
	sigsjson "sigs.k8s.io/json"

	"github.com/reviewauth/reviewauth/internal/cache"
)

// Bounds of the object checks.
const (
	// DefaultPodTTL is how long a pod's spec.nodeName is remembered, keyed
	// by the pod's namespace, name and UID: a pod's node never changes once
	// set, and a pod re-created under the same name has another UID. A pod
	// not yet scheduled is not remembered. It is the only thing draproxy
	// remembers about objects, and it only ever lets a driver read a claim
	// or write a claim's status (under a UID precondition), never write a
	// ResourceSlice.
	DefaultPodTTL = time.Minute
	// DefaultMaxBodyBytes bounds a request body, which draproxy reads whole
	// before it forwards it: the API server's own limit for JSON and
	// protobuf bodies (3 MiB), above etcd's 1.5 MiB object limit.
	DefaultMaxBodyBytes = 3 << 20
	// maxObjectBytes bounds an object the proxy reads for its own checks,
	// or reads back to check before it answers a get; a bigger answer is
	// "could not check".
	maxObjectBytes = 4 << 20
	// lookupCacheSize bounds the pod cache.
	lookupCacheSize = 4096
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
		return fmt.Sprintf("draproxy: reading %s: the API server refused it to draproxy's own credentials: check draproxy's RBAC (get resourceslices, resourceclaims and pods)", e.what)
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
	p := "/api/" + r.version
	if r.group != "" {
		p = "/apis/" + r.group + "/" + r.version
	}
	if r.namespace != "" {
		p += "/namespaces/" + url.PathEscape(r.namespace)
	}
	return p + "/" + r.resource + "/" + url.PathEscape(r.name)
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

// objects reads, with the proxy's own credentials, the few fields of stored
// objects the proxy's checks need, decoding only those fields from JSON, so
// that it depends on no version of the resource.k8s.io API. Every object
// read is checked to be the one asked for. Only pods' nodes are
// remembered (keyed by UID); concurrent reads of one object are shared.
type objects struct {
	client *http.Client
	host   *url.URL
	keyer  *cache.Keyer
	podTTL time.Duration

	pods       *cache.Cache[string] // namespace, name, UID -> spec.nodeName
	sliceLoads cache.Group[*sliceObject]
	podLoads   cache.Group[podInfo]
	claimLoads cache.Group[*claimObject]
}

type podInfo struct{ uid, node string }

func newObjects(client *http.Client, host *url.URL, clk clock.PassiveClock, podTTL time.Duration) *objects {
	return &objects{
		client: client,
		host:   host,
		keyer:  cache.NewKeyer(),
		podTTL: podTTL,
		pods:   cache.New[string](cache.Options{MaxEntries: lookupCacheSize, Clock: clk}),
	}
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

func (o *objects) podKey(ns, name, uid string) cache.Key {
	h := o.keyer.NewHash()
	h.WriteString("pod")
	h.WriteString(ns)
	h.WriteString(name)
	h.WriteString(uid)
	return h.Sum()
}

// slice reads the ResourceSlice ref names as it is now: never remembered,
// so that a decision on it is a decision on the object the API server
// holds (and the write that follows carries its UID). It returns
// errNotFound when there is none.
func (o *objects) slice(ctx context.Context, ref objectRef) (*sliceObject, error) {
	s, _, err := o.sliceLoads.Do(ctx, o.refKey(ref), func(ctx context.Context) (*sliceObject, error) {
		data, err := o.read(ctx, ref.String(), ref.path())
		if err != nil {
			return nil, err
		}
		s, err := decodeSlice(data, ref)
		if err != nil {
			return nil, &lookupError{what: ref.String(), err: err}
		}
		return s, nil
	})
	return s, err
}

// claim reads the ResourceClaim ref names as it is now; errNotFound when
// there is none.
func (o *objects) claim(ctx context.Context, ref objectRef) (*claimObject, error) {
	c, _, err := o.claimLoads.Do(ctx, o.refKey(ref), func(ctx context.Context) (*claimObject, error) {
		data, err := o.read(ctx, ref.String(), ref.path())
		if err != nil {
			return nil, err
		}
		var c claimObject
		if err := decodeObject(data, ref, &c); err != nil {
			return nil, &lookupError{what: ref.String(), err: err}
		}
		return &c, nil
	})
	return c, err
}

// reservedOnNode reports whether one of a claim's reservations (in
// namespace ns) is for a pod (by name and UID) whose spec.nodeName is
// node. A reservation for a pod that no longer exists, or for another pod
// of the same name, does not count. An error is "could not check".
func (o *objects) reservedOnNode(ctx context.Context, ns string, reserved []consumer, node string) (bool, error) {
	var lookupErr error
	for _, r := range reserved {
		if r.APIGroup != "" || r.Resource != "pods" || r.Name == "" || r.UID == "" {
			continue
		}
		podNode, err := o.podNode(ctx, ns, r.Name, r.UID)
		switch {
		case errors.Is(err, errNotFound):
		case err != nil:
			// Keep looking: another reservation may settle it. Only an
			// unchecked reservation with no positive one is an error.
			lookupErr = err
		case podNode == node:
			return true, nil
		}
	}
	return false, lookupErr
}

// podNode returns the spec.nodeName of the pod ns/name whose UID is uid,
// or errNotFound when there is no such pod (none of that name, or one with
// another UID).
func (o *objects) podNode(ctx context.Context, ns, name, uid string) (string, error) {
	k := o.podKey(ns, name, uid)
	if node, ok := o.pods.Get(k); ok {
		return node, nil
	}
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
		// Remembered only once read and checked, and only by UID.
		if p.Spec.NodeName != "" && o.podTTL > 0 {
			o.pods.Set(o.podKey(ns, name, p.Metadata.UID), p.Spec.NodeName, o.podTTL)
		}
		return podInfo{uid: p.Metadata.UID, node: p.Spec.NodeName}, nil
	})
	switch {
	case err != nil:
		return "", err
	case p.uid != uid:
		return "", errNotFound
	}
	return p.node, nil
}

// read reads what the API server answers at path (under its URL; with a
// query after "?") as JSON,
// with the proxy's own credentials. It returns errNotFound for a 404 and a
// *lookupError for anything else that is not a 200 whose whole body (at
// most maxObjectBytes) arrived.
func (o *objects) read(ctx context.Context, what, path string) ([]byte, error) {
	u := *o.host
	path, u.RawQuery, _ = strings.Cut(path, "?")
	u.Path = joinPath(u.Path, path)
	u.RawPath = ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, &lookupError{what: what, err: err}
	}
	req.Header.Set("Accept", "application/json")
	resp, err := o.client.Do(req)
	if err != nil {
		return nil, &lookupError{what: what, err: err}
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
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
