package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/utils/clock"
)

// DefaultRequestTimeout bounds every request draproxy forwards but
// watches, from its checks to the last byte of the API server's answer:
// the API server's own --request-timeout default (1m), past which the API
// server would have answered 504 itself. A request still unanswered then
// is answered 504 with Retry-After; one whose answer is still arriving is
// cut off (never completed to look whole). Watches are legitimately
// silent until their own timeout: they end when the link to the API
// server is dead instead (see the package documentation).
const DefaultRequestTimeout = time.Minute

// errDeadline is the cause of a request's context cancelled at its
// deadline (withDeadline).
var errDeadline = errors.New("draproxy: the request's deadline passed")

// withDeadline returns ctx cancelled with the cause errDeadline after d on
// clk, and a function that stops the timer and releases the context.
func withDeadline(ctx context.Context, clk clock.WithDelayedExecution, d time.Duration) (context.Context, func()) {
	if _, ok := clk.(clock.RealClock); ok {
		// The same, in one timer context (half the allocations).
		return context.WithTimeoutCause(ctx, d, errDeadline)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t := clk.AfterFunc(d, func() { cancel(errDeadline) })
	return ctx, func() {
		t.Stop()
		cancel(nil)
	}
}

// pastDeadline reports whether ctx was cancelled by withDeadline.
func pastDeadline(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errDeadline) }

// plan is how forward sends a request serve checked.
type plan struct {
	// body is the request body to forward: the driver's, or the one
	// draproxy rewrote (with a UID precondition, or from YAML).
	body []byte
	// contentType, when not empty, replaces the driver's Content-Type (a
	// body draproxy wrote).
	contentType string
	// read, when not noRead, makes the request a checked read of the
	// object ref names: the API server is asked for JSON, its whole answer
	// is read, and a 200 is passed on only if checkAnswer finds it is that
	// object and the driver may see it; a 404 is answered as the object
	// the driver may not see is (readRefusal), so that both look alike.
	read readKind
	ref  objectRef
	a    authorizer.Attributes
	// uid is the UID precondition draproxy added ("" for none), which
	// the log line of a forwarded write names.
	uid string
}

// readKind is what a checked read reads.
type readKind int

const (
	noRead    readKind = iota
	sliceRead          // a ResourceSlice: bound to this node
	claimRead          // a ResourceClaim: reserved for a pod on this node
)

// checkAnswer checks the answer (a 200's body) of pl's checked read: it
// returns nil to pass it on, or the status to answer instead (a refusal,
// or "could not check" with the error for the log).
func (p *proxy) checkAnswer(ctx context.Context, pl *plan, data []byte) (*apierrors.StatusError, error) {
	ref := pl.ref
	switch pl.read {
	case sliceRead:
		var s sliceAnswer
		if err := readSliceAnswer(data, ref, &s); err != nil {
			err = &lookupError{what: ref.String(), err: err}
			return p.lookupUnavailable(ctx, ref.String(), err), err
		}
		if !s.boundTo(p.node) {
			return p.sliceNotFound(pl.a), nil
		}
		return nil, nil
	case claimRead:
		var c claimObject
		if err := decodeObject(data, ref, &c); err != nil {
			err = &lookupError{what: ref.String(), err: err}
			return p.lookupUnavailable(ctx, ref.String(), err), err
		}
		return p.claimOnNode(ctx, pl.a, ref, &c)
	}
	return responsewriters.ForbiddenStatusError(pl.a, "draproxy: unknown check"), nil // fail closed
}

// readRefusal is the answer to a checked read the API server answers 404
// or 403 (to the node): the same as to an object the driver may not see.
func (p *proxy) readRefusal(pl *plan) *apierrors.StatusError {
	if pl.read == sliceRead {
		return p.sliceNotFound(pl.a)
	}
	return p.claimRefusal(pl.a)
}

// check checks what the rule requires beyond the attributes, and says in
// pl how to forward the request. It returns nil to forward, or the status
// to answer and, when the check could not be made, why (for the log; the
// driver gets a 503 or 504 that names only what could not be read).
func (p *proxy) check(ctx context.Context, r *http.Request, u user.Info, a authorizer.Attributes, rl rule, query url.Values, pl *plan) (*apierrors.StatusError, error) {
	switch rl.check {
	case sliceOnNode:
		return p.checkSlice(ctx, r, u, a, query, pl)
	case claimOnNode:
		return p.checkClaim(ctx, r, a, query, pl)
	case thisNode, sarOnly:
		return nil, nil // the name: policy; the rest: SubjectAccessReview
	}
	return responsewriters.ForbiddenStatusError(a, "draproxy: unknown check"), nil // fail closed
}

// checkSlice checks a ResourceSlice request. Collections (list, watch,
// deletecollection) are confined by their field selector (authz.NodeScope,
// and the driver for deletecollection). A get is a checked read: the
// object the API server returns is passed on only if it is bound to this
// node. Anything that can create (create, apply) is checked on its body
// as a create; an update, patch or delete is checked against the slice as
// it is now, read for this request, and carries that slice's UID as a
// precondition the API server enforces, so that it can only ever apply to
// the object checked. Nothing about slices is remembered.
func (p *proxy) checkSlice(ctx context.Context, r *http.Request, u user.Info, a authorizer.Attributes, query url.Values, pl *plan) (*apierrors.StatusError, error) {
	ref := objectRef{group: a.GetAPIGroup(), version: a.GetAPIVersion(), resource: a.GetResource(), kind: "ResourceSlice", name: a.GetName()}
	verb := a.GetVerb()
	switch verb {
	case "list", "watch":
		return nil, nil // the field selector: authz.NodeScope
	case "deletecollection":
		return p.driverSelector(u, a), nil // and the node: authz.NodeScope
	case "get":
		if st := wholeObjectsOnly(r.Header, a); st != nil {
			return st, nil
		}
		pl.read, pl.ref, pl.a = sliceRead, ref, a
		return nil, nil
	}

	// create, update, patch, delete: what the body says...
	b, st := readRequestBody(verb, r.Header.Get("Content-Type"), pl.body)
	if st != nil {
		return st, nil
	}
	if st := p.sliceBodyRefusal(u, a, b); st != nil {
		return st, nil
	}
	if verb == "create" {
		pl.body = b.json
		if b.rewritten {
			pl.contentType = b.contentType
		}
		return nil, nil
	}
	// ...and the slice as it is now, if it is this node's.
	cur, err := p.objects.slice(ctx, ref, p.node)
	switch {
	case errors.Is(err, errNotFound) && b != nil && b.kind == bodyApply:
		// An apply to a name this node has no slice of: its body was
		// checked as a create, and the API server decides, as for the
		// node (the Node authorizer allows the node to patch, apply
		// included, only a slice of its own, so an apply that would
		// create is refused there). Should a slice of that name be
		// another node's, the apply cannot move it: spec.nodeName and
		// spec.driver are immutable, and the body names this node.
		pl.body = b.json
		return nil, nil
	case errors.Is(err, errNotFound):
		return p.sliceNotFound(a), nil
	case err != nil:
		return p.lookupUnavailable(ctx, ref.String(), err), err
	case !cur.Spec.boundTo(p.node):
		return p.sliceNotFound(a), nil
	case !p.drivers.allows(u, cur.Spec.driver()):
		return responsewriters.ForbiddenStatusError(a, p.drivers.refusal(u, cur.Spec.driver())), nil
	}
	return p.pin(a, pl, b, cur.Metadata.UID, query), nil
}

// pin makes pl forward b (nil: a delete without a body) with a
// precondition on uid (pinUID).
func (p *proxy) pin(a authorizer.Attributes, pl *plan, b *requestBody, uid string, query url.Values) *apierrors.StatusError {
	body, err := pinUID(b, uid, query)
	if err != nil {
		return bodyStatus(a, err)
	}
	pl.body, pl.uid = body, uid
	switch {
	case b == nil:
		pl.contentType = mediaJSON
	case b.rewritten:
		pl.contentType = b.contentType
	}
	return nil
}

// sliceBodyRefusal checks what the body of a ResourceSlice write says: a
// whole slice (create, update) or an apply configuration, which may create
// one, must be bound to this node alone and of a driver bound to u; a
// merge or strategic merge patch may only set those fields to such
// values; a JSON patch may not write them.
func (p *proxy) sliceBodyRefusal(u user.Info, a authorizer.Attributes, b *requestBody) *apierrors.StatusError {
	if b == nil {
		return nil
	}
	var why string
	var err error
	switch b.kind {
	case bodyObject, bodyApply:
		var d *sliceDocument
		if d, err = sliceDoc(b.json); err == nil {
			why = p.newSliceRefusal(u, d.Spec)
		}
	case bodyMergePatch, bodyStrategicPatch:
		why, err = p.patchRefusal(u, b.json)
	case bodyJSONPatch:
		var w string
		if w, err = jsonPatchWrites(b.json); err == nil && w != "" {
			why = fmt.Sprintf("a JSON patch through draproxy may not write %q: what binds a ResourceSlice to its node and driver (spec.nodeName, spec.driver, spec.allNodes, spec.nodeSelector, spec.perDeviceNodeSelection, metadata.uid) is not changed by a patch", w)
		}
	case bodyDeleteOptions:
		var o struct {
			Preconditions *struct {
				UID             *string `json:"uid"`
				ResourceVersion *string `json:"resourceVersion"`
			} `json:"preconditions"`
		}
		if err = decodeJSON(b.json, &o); err != nil {
			err = fmt.Errorf("%w: the DeleteOptions: %v", errBadBody, err)
		}
	}
	switch {
	case err != nil:
		return apierrors.NewBadRequest(err.Error())
	case why != "":
		return responsewriters.ForbiddenStatusError(a, why)
	}
	return nil
}

// newSliceRefusal is why a ResourceSlice whose spec is s may not be
// written by u as a new slice, or "": it must have spec.nodeName this
// node, none of the other ways of naming nodes, and spec.driver one of the
// driver names bound to u.
func (p *proxy) newSliceRefusal(u user.Info, s *sliceSpec) string {
	switch {
	case s == nil || s.NodeName == nil || *s.NodeName == "":
		return fmt.Sprintf("a ResourceSlice created through draproxy must have spec.nodeName %q (this node); it has none", p.node)
	case *s.NodeName != p.node:
		return fmt.Sprintf("a ResourceSlice created through draproxy must have spec.nodeName %q (this node), not %q", p.node, *s.NodeName)
	case s.otherBinding():
		return fmt.Sprintf("a ResourceSlice created through draproxy must be bound to node %q by spec.nodeName alone: it sets spec.allNodes, spec.nodeSelector or spec.perDeviceNodeSelection", p.node)
	case !p.drivers.allows(u, s.driver()):
		return p.drivers.refusal(u, s.driver())
	}
	return ""
}

// patchRefusal is why a merge or strategic merge patch of a ResourceSlice
// may not be sent by u, or "": it may set spec.nodeName only to this node
// and spec.driver only to one of u's drivers, set none of the other ways
// of naming nodes, and neither remove spec nor carry the strategic merge
// directives that replace or prune it ($patch, $retainKeys). (The API
// server keeps nodeName and driver immutable anyway; this is the second
// line.)
func (p *proxy) patchRefusal(u user.Info, data []byte) (string, error) {
	var top map[string]json.RawMessage
	if err := decodeJSON(data, &top); err != nil || top == nil {
		return "", fmt.Errorf("%w: the patch is not a JSON object: %v", errBadBody, err)
	}
	if _, ok := top["$patch"]; ok {
		return "a patch through draproxy may not carry a $patch directive for the whole ResourceSlice", nil
	}
	raw, ok := top["spec"]
	if !ok {
		return "", nil
	}
	if string(raw) == "null" {
		return "a patch through draproxy may not remove a ResourceSlice's spec", nil
	}
	var spec map[string]json.RawMessage
	if err := decodeJSON(raw, &spec); err != nil || spec == nil {
		return "", fmt.Errorf("%w: spec is not a JSON object: %v", errBadBody, err)
	}
	for _, k := range []string{"$patch", "$retainKeys"} {
		if _, ok := spec[k]; ok {
			return fmt.Sprintf("a patch through draproxy may not carry a %s directive for a ResourceSlice's spec", k), nil
		}
	}
	str := func(k string) (string, bool, error) {
		v, ok := spec[k]
		if !ok {
			return "", false, nil
		}
		var s *string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", true, fmt.Errorf("%w: spec.%s is not a string", errBadBody, k)
		}
		if s == nil {
			return "", true, nil
		}
		return *s, true, nil
	}
	if node, set, err := str("nodeName"); err != nil {
		return "", err
	} else if set && node != p.node {
		return fmt.Sprintf("a patch through draproxy may set spec.nodeName only to %q (this node), not %q", p.node, node), nil
	}
	if driver, set, err := str("driver"); err != nil {
		return "", err
	} else if set && !p.drivers.allows(u, driver) {
		return p.drivers.refusal(u, driver), nil
	}
	var s sliceSpec
	if err := decodeJSON(raw, &s); err != nil {
		return "", fmt.Errorf("%w: spec: %v", errBadBody, err)
	}
	if s.otherBinding() {
		return fmt.Sprintf("a patch through draproxy may not set spec.allNodes, spec.nodeSelector or spec.perDeviceNodeSelection: a slice of node %q is bound by spec.nodeName alone", p.node), nil
	}
	return "", nil
}

// driverSelector allows a deletecollection of ResourceSlices only with the
// field selector spec.driver=NAME, NAME one of u's drivers: it deletes
// only slices of a driver u may write (the node: authz.NodeScope).
func (p *proxy) driverSelector(u user.Info, a authorizer.Attributes) *apierrors.StatusError {
	names := p.drivers.names(u)
	refuse := func(why string) *apierrors.StatusError {
		return responsewriters.ForbiddenStatusError(a, fmt.Sprintf("deletecollection of resourceslices through draproxy requires the field selector spec.driver=NAME, NAME one of the drivers bound to %s (%s): %s", u.GetName(), strings.Join(quoteAll(names), ", "), why))
	}
	reqs, err := a.GetFieldSelector()
	if err != nil {
		return refuse("the field selector does not parse")
	}
	found := false
	for _, r := range reqs {
		if r.Field != "spec.driver" {
			continue
		}
		if (r.Operator != selection.Equals && r.Operator != selection.DoubleEquals) || !slices.Contains(names, r.Value) {
			return refuse(fmt.Sprintf("it has spec.driver %s %q", r.Operator, r.Value))
		}
		found = true
	}
	if !found {
		return refuse("it has none")
	}
	return nil
}

// sliceNotFound is the answer to a request for a ResourceSlice that does
// not exist or is not this node's: the same for both, so that a driver
// learns nothing about other nodes' slices; the API server's 404, which
// client-go and the ResourceSlice controller read as "gone".
func (p *proxy) sliceNotFound(a authorizer.Attributes) *apierrors.StatusError {
	st := apierrors.NewNotFound(schema.GroupResource{Group: a.GetAPIGroup(), Resource: a.GetResource()}, a.GetName())
	st.ErrStatus.Message += fmt.Sprintf(" (draproxy shows a driver only the ResourceSlices of node %q)", p.node)
	return st
}

// checkClaim checks a ResourceClaim request, a get: a checked read. The
// API server returns the claim to the node only through a pod bound to
// the node that references it (the Node authorizer's graph, which
// follows live pods); draproxy passes the claim on only if, as well, it
// is reserved (status.reservedFor) for a pod, by name and UID, that the
// node reads as bound to it now. Nothing about pods or claims is
// remembered.
func (p *proxy) checkClaim(_ context.Context, r *http.Request, a authorizer.Attributes, _ url.Values, pl *plan) (*apierrors.StatusError, error) {
	if a.GetNamespace() == "" {
		return &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
			Message: fmt.Sprintf("draproxy: the request names no namespace: ResourceClaims are namespaced, at /apis/%s/%s/namespaces/NAMESPACE/resourceclaims/%s", a.GetAPIGroup(), a.GetAPIVersion(), a.GetName()),
		}}, nil
	}
	if a.GetVerb() != "get" { // the allow-list has no other verb; fail closed
		return p.claimRefusal(a), nil
	}
	if st := wholeObjectsOnly(r.Header, a); st != nil {
		return st, nil
	}
	ref := objectRef{group: a.GetAPIGroup(), version: a.GetAPIVersion(), resource: a.GetResource(), kind: "ResourceClaim", namespace: a.GetNamespace(), name: a.GetName()}
	pl.read, pl.ref, pl.a = claimRead, ref, a
	return nil, nil
}

// claimOnNode checks that the claim c (of ref) is reserved for a pod on
// this node.
func (p *proxy) claimOnNode(ctx context.Context, a authorizer.Attributes, ref objectRef, c *claimObject) (*apierrors.StatusError, error) {
	ok, err := p.objects.reservedOnNode(ctx, ref.namespace, c.Status.ReservedFor, p.node)
	switch {
	case ok:
		return nil, nil
	case err == nil:
		return p.claimRefusal(a), nil
	}
	return p.lookupUnavailable(ctx, ref.String()+" or the pods it is reserved for", err), err
}

// claimRefusal is the answer to a request for a claim that is not reserved
// for a pod on this node, or does not exist, or that the API server does
// not return to the node: the same for all.
func (p *proxy) claimRefusal(a authorizer.Attributes) *apierrors.StatusError {
	return responsewriters.ForbiddenStatusError(a, fmt.Sprintf("the ResourceClaim is not reserved for a pod on node %q, or does not exist", p.node))
}

// wholeObjectsOnly refuses (406) a get of one object that asks for a
// Table or PartialObjectMetadata (Accept: ...;as=...): draproxy reads the
// object it returns to check it, and those forms carry no spec.
func wholeObjectsOnly(h http.Header, a authorizer.Attributes) *apierrors.StatusError {
	for _, accept := range h["Accept"] {
		if !strings.Contains(accept, "as=") {
			continue
		}
		for part := range strings.SplitSeq(accept, ",") {
			if _, params, err := mime.ParseMediaType(strings.TrimSpace(part)); err != nil || params["as"] != "" {
				return &apierrors.StatusError{ErrStatus: metav1.Status{
					Status: metav1.StatusFailure, Code: http.StatusNotAcceptable, Reason: metav1.StatusReasonNotAcceptable,
					Message: fmt.Sprintf("draproxy returns one %s only as the whole object, which it checks before answering: ask without as=Table or as=PartialObjectMetadata (Accept %q)", a.GetResource(), accept),
				}}
			}
		}
	}
	return nil
}

// lookupUnavailable is the answer to a check that could not be made: 504
// when the request's deadline passed while draproxy read what it needed,
// 503 otherwise. It names what could not be read, and carries a
// Retry-After (the API server's, at least a second).
func (p *proxy) lookupUnavailable(ctx context.Context, what string, err error) *apierrors.StatusError {
	if pastDeadline(ctx) {
		return apierrors.NewTimeoutError(fmt.Sprintf("draproxy could not read %s within %v to check the request; retry later", what, p.timeout), 1)
	}
	retry := time.Second
	var le *lookupError
	if errors.As(err, &le) && le.retryAfter > retry {
		retry = le.retryAfter
	}
	st := apierrors.NewServiceUnavailable(fmt.Sprintf("draproxy could not read %s to check the request; retry later", what))
	st.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(retry / time.Second)}
	return st
}
