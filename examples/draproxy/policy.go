package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// check is what draproxy verifies about a request beyond the driver's RBAC
// (the SubjectAccessReview) and its node binding (NodeLocal).
type check int

const (
	// sarOnly: nothing more; forwarded under the SubjectAccessReview alone
	// (the --allow entries).
	sarOnly check = iota
	// sliceOnNode: ResourceSlices of this node only. list, watch and
	// deletecollection need the field selector spec.nodeName=NODE
	// (authz.NodeScope); create needs spec.nodeName=NODE in the body; get,
	// update, patch and delete need the stored slice's spec.nodeName to be
	// NODE.
	sliceOnNode
	// claimOnNode: a ResourceClaim the API server returns to the node (the
	// Node authorizer: through a pod bound to it that references the
	// claim), reserved for a pod bound to this node (the claim's
	// status.reservedFor, the pod's spec.nodeName, read as the node).
	claimOnNode
	// thisNode: the Node object of this node, by name.
	thisNode
)

// rule is one entry of the allow-list: a resource (group, resource,
// subresource, as RBAC names them), the verbs allowed on it, and what is
// checked beyond RBAC.
type rule struct {
	group, resource, subresource string
	verbs                        []string
	check                        check
}

func (r rule) String() string {
	s := r.resource
	if r.group != "" {
		s += "." + r.group
	}
	if r.subresource != "" {
		s += "/" + r.subresource
	}
	return s
}

// defaultRules is the minimum a DRA kubelet plugin needs: its
// ResourceSlice controller (k8s.io/dynamic-resource-allocation/resourceslice)
// lists and watches its node's slices with the field selector
// "spec.driver=DRIVER,spec.nodeName=NODE", creates, updates and deletes
// them, and reads its Node when it was not given the node's UID; its
// NodePrepareResources reads the claims the kubelet names. Each is
// forwarded as the node, which the Node authorizer allows it. A claim's
// status (device status, KEP-4817) is not: the Node authorizer gives a node
// no write of resourceclaims/status, and the API server's own check of
// status.devices (resourceclaims/driver, associated-node) needs a
// ServiceAccount bound to the node, which no mode of constrained
// impersonation yields; a driver that reports device status writes it
// with its own pod-bound token (the second mode, see the package
// documentation).
func defaultRules() []rule {
	return []rule{
		{group: "resource.k8s.io", resource: "resourceslices", check: sliceOnNode,
			verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}},
		{group: "resource.k8s.io", resource: "resourceclaims", check: claimOnNode, verbs: []string{"get"}},
		{group: "", resource: "nodes", check: thisNode, verbs: []string{"get"}},
	}
}

// parseAllow parses an --allow entry, VERB[,VERB...]:RESOURCE[.GROUP][/SUBRESOURCE],
// such as "get,list,watch:deviceclasses.resource.k8s.io": requests it names
// are forwarded under the SubjectAccessReview alone. Resources the default
// rules check by content cannot be named: those checks are the point of
// the proxy.
func parseAllow(s string) (rule, error) {
	verbs, res, ok := strings.Cut(s, ":")
	if !ok || verbs == "" || res == "" {
		return rule{}, fmt.Errorf("--allow %q: want VERB[,VERB...]:RESOURCE[.GROUP][/SUBRESOURCE]", s)
	}
	r := rule{check: sarOnly}
	res, r.subresource, _ = strings.Cut(res, "/")
	r.resource, r.group, _ = strings.Cut(res, ".")
	for v := range strings.SplitSeq(verbs, ",") {
		if v == "" || v == "*" || strings.ToLower(v) != v {
			return rule{}, fmt.Errorf("--allow %q: verb %q: want a lowercase verb such as get or list (no wildcards)", s, v)
		}
		r.verbs = append(r.verbs, v)
	}
	if r.resource == "" || strings.Contains(s, "*") || strings.Contains(r.subresource, "/") {
		return rule{}, fmt.Errorf("--allow %q: want VERB[,VERB...]:RESOURCE[.GROUP][/SUBRESOURCE], without wildcards", s)
	}
	for _, d := range defaultRules() {
		if d.group == r.group && d.resource == r.resource {
			return rule{}, fmt.Errorf("--allow %q: %s is checked by content (node scope); it cannot be forwarded under the SubjectAccessReview alone", s, d)
		}
	}
	return r, nil
}

// policy is the allow-list: the default rules, then the --allow entries.
type policy struct {
	node  string
	rules []rule
}

// match returns the rule allowing a, if any.
func (p *policy) match(a authorizer.Attributes) (rule, bool) {
	if !a.IsResourceRequest() {
		return rule{}, false
	}
	for _, r := range p.rules {
		if r.group == a.GetAPIGroup() && r.resource == a.GetResource() && r.subresource == a.GetSubresource() && slices.Contains(r.verbs, a.GetVerb()) {
			return r, true
		}
	}
	return rule{}, false
}

// Authorize allows a request on the allow-list and denies every other one
// with a reason that says why; it never has no opinion. It is a
// restriction, like authz.NodeLocal: it goes in authz.All with the
// SubjectAccessReview.
func (p *policy) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if !a.IsResourceRequest() {
		return authorizer.DecisionDeny, fmt.Sprintf("draproxy forwards no non-resource requests (%s %s)", a.GetVerb(), a.GetPath()), nil
	}
	r, ok := p.match(a)
	switch {
	case !ok && a.GetAPIGroup() == "resource.k8s.io" && a.GetResource() == "resourceclaims" && a.GetSubresource() == "" && (a.GetVerb() == "list" || a.GetVerb() == "watch"):
		return authorizer.DecisionDeny, fmt.Sprintf("draproxy refuses %s of resourceclaims: a driver reads only the claims reserved for pods on node %q, one by one (get)", a.GetVerb(), p.node), nil
	case !ok && a.GetAPIGroup() == "resource.k8s.io" && a.GetResource() == "resourceclaims" && a.GetSubresource() == "status":
		return authorizer.DecisionDeny, fmt.Sprintf("draproxy forwards as node %q, and a node may not write a ResourceClaim's status (the Node authorizer; the API server checks status.devices for a ServiceAccount bound to the claim's node): a driver that reports device status writes it with its own pod-bound token", p.node), nil
	case !ok:
		what := rule{group: a.GetAPIGroup(), resource: a.GetResource(), subresource: a.GetSubresource()}
		return authorizer.DecisionDeny, fmt.Sprintf("draproxy forwards only what a DRA kubelet plugin needs, and %s of %s is not on its allow-list (see --allow)", a.GetVerb(), what), nil
	case r.check == thisNode && a.GetName() != p.node:
		return authorizer.DecisionDeny, fmt.Sprintf("draproxy lets a driver read only its own node, %q", p.node), nil
	}
	return authorizer.DecisionAllow, "", nil
}
