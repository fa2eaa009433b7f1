package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"k8s.io/utils/clock"
	sigsjson "sigs.k8s.io/json"

	"github.com/reviewauth/reviewauth/internal/cache"
)

// Bounds of the object checks.
const (
	// DefaultSliceTTL is how long a ResourceSlice's spec.nodeName is
	// remembered. The field is immutable, so the only thing that can make
	// a remembered value wrong is the slice being deleted and a slice of
	// the same name created for another node within this time; a delete
	// forwarded by the proxy, and any 404 the API server answers for the
	// name, forget it at once.
	DefaultSliceTTL = 10 * time.Second
	// DefaultPodTTL is how long a pod's spec.nodeName is remembered, keyed
	// by the pod's namespace, name and UID. A pod's node never changes once
	// set; a pod not yet scheduled is not remembered.
	DefaultPodTTL = time.Minute
	// DefaultMaxBodyBytes bounds a request body, which draproxy reads whole
	// before it forwards it: the API server's own limit for JSON and
	// protobuf bodies (3 MiB), above etcd's 1.5 MiB object limit.
	DefaultMaxBodyBytes = 3 << 20
	// maxObjectBytes bounds an object the proxy reads for its own checks;
	// a bigger answer is "could not check".
	maxObjectBytes = 4 << 20
	// lookupCacheSize bounds each lookup cache.
	lookupCacheSize = 4096
)

var (
	// errNotFound: the API server has no such object. The proxy answers it
	// as "not on this node" (403), as it does an object of another node,
	// so that a driver cannot tell other nodes' objects from missing ones.
	errNotFound = errors.New("not found")
	// errBadBody: the request body is not a JSON object of the expected
	// shape (400).
	errBadBody = errors.New("draproxy: malformed request body")
)

// lookupError is "could not check": the proxy could not read an object it
// needs for its decision (503).
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

// consumer is one entry of a ResourceClaim's status.reservedFor.
type consumer struct {
	APIGroup string `json:"apiGroup"`
	Resource string `json:"resource"`
	Name     string `json:"name"`
	UID      string `json:"uid"`
}

// objects reads, with the proxy's own credentials, the few fields of stored
// objects the proxy's checks need, decoding only those fields from JSON, so
// that it depends on no version of the resource.k8s.io API. Results are
// cached where the field cannot change (a slice's node, a pod's node) and
// concurrent reads of one object are shared.
type objects struct {
	client   *http.Client
	host     *url.URL
	keyer    *cache.Keyer
	sliceTTL time.Duration
	podTTL   time.Duration

	slices     *cache.Cache[string] // slice name -> spec.nodeName ("" when unset)
	pods       *cache.Cache[string] // namespace, name, UID -> spec.nodeName
	sliceLoads cache.Group[string]
	podLoads   cache.Group[podInfo]
	claimLoads cache.Group[[]consumer]
}

type podInfo struct{ uid, node string }

func newObjects(client *http.Client, host *url.URL, clk clock.PassiveClock, sliceTTL, podTTL time.Duration) *objects {
	return &objects{
		client:   client,
		host:     host,
		keyer:    cache.NewKeyer(),
		sliceTTL: sliceTTL,
		podTTL:   podTTL,
		slices:   cache.New[string](cache.Options{MaxEntries: lookupCacheSize, Clock: clk}),
		pods:     cache.New[string](cache.Options{MaxEntries: lookupCacheSize, Clock: clk}),
	}
}

func (o *objects) sliceKey(name string) cache.Key {
	h := o.keyer.NewHash()
	h.WriteString("resourceslice")
	h.WriteString(name)
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

// sliceNode returns the spec.nodeName of the ResourceSlice name ("" when
// it has none), read through the API group and version the driver used.
func (o *objects) sliceNode(ctx context.Context, group, version, name string) (string, error) {
	k := o.sliceKey(name)
	if node, ok := o.slices.Get(k); ok {
		return node, nil
	}
	node, _, err := o.sliceLoads.Do(ctx, k, func(ctx context.Context) (string, error) {
		var s struct {
			Spec struct {
				NodeName *string `json:"nodeName"`
			} `json:"spec"`
		}
		if err := o.get(ctx, "ResourceSlice "+strconv.Quote(name), "/apis/"+group+"/"+version+"/resourceslices/"+url.PathEscape(name), &s); err != nil {
			return "", err
		}
		var node string
		if s.Spec.NodeName != nil {
			node = *s.Spec.NodeName
		}
		if o.sliceTTL > 0 {
			o.slices.Set(k, node, o.sliceTTL)
		}
		return node, nil
	})
	return node, err
}

// forgetSlice drops what is remembered about the slice name: it was
// deleted, or the API server does not know it.
func (o *objects) forgetSlice(name string) { o.slices.Delete(o.sliceKey(name)) }

// claimReservedOnNode reports whether the ResourceClaim ns/name is reserved
// for a pod (by name and UID) whose spec.nodeName is node. Reservations
// change at any time, so the claim is read on every call; pods' nodes are
// remembered. An error is "could not check", or errNotFound for a claim
// that does not exist. A reservation for a pod that no longer exists, or
// for another pod of the same name, does not count.
func (o *objects) claimReservedOnNode(ctx context.Context, group, version, ns, name, node string) (bool, error) {
	h := o.keyer.NewHash()
	h.WriteString("resourceclaim")
	h.WriteString(group)
	h.WriteString(version)
	h.WriteString(ns)
	h.WriteString(name)
	reserved, _, err := o.claimLoads.Do(ctx, h.Sum(), func(ctx context.Context) ([]consumer, error) {
		var c struct {
			Status struct {
				ReservedFor []consumer `json:"reservedFor"`
			} `json:"status"`
		}
		err := o.get(ctx, "ResourceClaim "+ns+"/"+name, "/apis/"+group+"/"+version+"/namespaces/"+url.PathEscape(ns)+"/resourceclaims/"+url.PathEscape(name), &c)
		return c.Status.ReservedFor, err
	})
	if err != nil {
		return false, err
	}
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
	h := o.keyer.NewHash()
	h.WriteString("pod")
	h.WriteString(ns)
	h.WriteString(name)
	p, _, err := o.podLoads.Do(ctx, h.Sum(), func(ctx context.Context) (podInfo, error) {
		var p struct {
			Metadata struct {
				UID string `json:"uid"`
			} `json:"metadata"`
			Spec struct {
				NodeName string `json:"nodeName"`
			} `json:"spec"`
		}
		if err := o.get(ctx, "Pod "+ns+"/"+name, "/api/v1/namespaces/"+url.PathEscape(ns)+"/pods/"+url.PathEscape(name), &p); err != nil {
			return podInfo{}, err
		}
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

// get reads the object at path (under the API server's URL) as JSON into
// v, with the proxy's own credentials. It returns errNotFound for a 404
// and a *lookupError for anything else that is not a 200 with a body of at
// most maxObjectBytes that decodes.
func (o *objects) get(ctx context.Context, what, path string, v any) error {
	u := *o.host
	u.Path = joinPath(u.Path, path)
	u.RawPath = ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return &lookupError{what: what, err: err}
	}
	req.Header.Set("Accept", "application/json")
	resp, err := o.client.Do(req)
	if err != nil {
		return &lookupError{what: what, err: err}
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxObjectBytes))
		return errNotFound
	default:
		e := &lookupError{what: what, code: resp.StatusCode}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			e.retryAfter = time.Duration(s) * time.Second
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxObjectBytes))
		return e
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxObjectBytes+1))
	if err != nil {
		return &lookupError{what: what, err: err}
	}
	if len(data) > maxObjectBytes {
		return &lookupError{what: what, err: fmt.Errorf("the answer is larger than %d bytes", maxObjectBytes)}
	}
	if err := decodeJSON(data, v); err != nil {
		return &lookupError{what: what, err: err}
	}
	return nil
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
// resolve to the last one: a body that says two things about a field the
// proxy checks is refused rather than guessed at.
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

// bodyNodeName returns the spec.nodeName of a ResourceSlice in a JSON
// request body, and whether it is set (null and absent are unset). Only
// that field is decoded, whatever the API version. A body that is not a
// JSON object, whose spec is not an object, whose nodeName is not a
// string, or that repeats one of these fields is an error matching
// errBadBody.
func bodyNodeName(data []byte) (node string, set bool, err error) {
	var s struct {
		Spec *struct {
			NodeName *string `json:"nodeName"`
		} `json:"spec"`
	}
	if err := decodeJSON(data, &s); err != nil {
		return "", false, fmt.Errorf("%w: %v", errBadBody, err)
	}
	if s.Spec == nil || s.Spec.NodeName == nil {
		return "", false, nil
	}
	return *s.Spec.NodeName, true, nil
}
