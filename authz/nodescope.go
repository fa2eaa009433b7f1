package authz

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// NodeScopedResource names a resource whose objects each belong to one
// node, and the field that says which, as the API server's field selectors
// spell it: resource.k8s.io resourceslices by spec.nodeName, or core pods
// by spec.nodeName.
type NodeScopedResource struct {
	// APIGroup is the resource's API group; "" is the core group.
	APIGroup string
	// Resource is the plural resource name, such as "resourceslices".
	// Required.
	Resource string
	// Field is the field selector key that names the node, such as
	// "spec.nodeName". Required.
	Field string
}

// String returns the resource as RBAC and kubectl name it,
// "resourceslices.resource.k8s.io" (or "pods" in the core group).
func (r NodeScopedResource) String() string {
	if r.APIGroup == "" {
		return r.Resource
	}
	return r.Resource + "." + r.APIGroup
}

// DefaultNodeScopedResources returns the resources [NodeScope] restricts when
// [NodeScopeOptions.Resources] is nil: ResourceSlices (resource.k8s.io), by
// spec.nodeName, which is what a DRA driver's kubelet plugin publishes for
// its node and watches. Each call returns a new slice.
func DefaultNodeScopedResources() []NodeScopedResource {
	return []NodeScopedResource{{APIGroup: "resource.k8s.io", Resource: "resourceslices", Field: "spec.nodeName"}}
}

// NodeScopeOptions configures [NodeScope].
type NodeScopeOptions struct {
	// Resources are the node-scoped resources. Nil means
	// [DefaultNodeScopedResources]; an empty, non-nil slice restricts
	// nothing.
	Resources []NodeScopedResource
}

// NodeScope returns an authorizer that confines collection requests on
// node-scoped resources to the caller's node, from the
// [authorizer.Attributes] alone (which carry field selectors since
// KEP-4601). A list, watch or deletecollection of one of opts.Resources is
// allowed only when its field selector requires the resource's field to
// equal the caller's node: the one value of the user's extra
// "authentication.kubernetes.io/node-name" (k8s.io/apiserver's
// serviceaccount.NodeNameKey), set by node-bound service-account tokens. The selector may have other
// requirements too (they can only narrow the result, as the
// ResourceSlice controller's "spec.driver=D,spec.nodeName=N" does), but
// every requirement on the node field must be "=" or "==" this node. It is
// denied, with a reason that names the selector required, when:
//
//   - the selector is missing, or does not name the node field;
//   - a requirement on the node field names another node, or uses "!=" or
//     any operator other than equality;
//   - the selector did not parse;
//   - the caller is bound to no node, or to more than one.
//
// NodeScope is a restriction, not a grant, like [NodeLocal]: every other
// request (other resources, other verbs, non-resource requests) is allowed
// without looking at it, and it never has no opinion. Get, create, update,
// patch and delete of one object need the object itself to tell which node
// it belongs to, which attributes do not carry; check them where the object
// is at hand. Put NodeScope in [All] with an authorizer that grants, so
// RBAC still applies:
//
//	authz.All(authz.NodeLocal(authz.NodeLocalOptions{NodeName: node}), scope, sar)
//
// NodeScope returns an error if a resource has an empty Resource or Field.
// The returned authorizer is safe for concurrent use; it keeps its own copy
// of the resources.
func NodeScope(opts NodeScopeOptions) (authorizer.Authorizer, error) {
	resources := opts.Resources
	if resources == nil {
		resources = DefaultNodeScopedResources()
	}
	type groupResource struct{ group, resource string }
	fields := make(map[groupResource]string, len(resources))
	for i, r := range resources {
		switch {
		case r.Resource == "":
			return nil, fmt.Errorf("authz: node-scoped resource %d has no Resource", i)
		case r.Field == "":
			return nil, fmt.Errorf("authz: node-scoped resource %s has no Field", r)
		}
		if f, ok := fields[groupResource{r.APIGroup, r.Resource}]; ok && f != r.Field {
			return nil, fmt.Errorf("authz: node-scoped resource %s is listed with two fields, %q and %q", r, f, r.Field)
		}
		fields[groupResource{r.APIGroup, r.Resource}] = r.Field
	}
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if !a.IsResourceRequest() {
			return authorizer.DecisionAllow, "", nil
		}
		switch a.GetVerb() {
		case "list", "watch", "deletecollection":
		default:
			return authorizer.DecisionAllow, "", nil
		}
		field, ok := fields[groupResource{a.GetAPIGroup(), a.GetResource()}]
		if !ok {
			return authorizer.DecisionAllow, "", nil
		}
		r := NodeScopedResource{APIGroup: a.GetAPIGroup(), Resource: a.GetResource(), Field: field}
		node, reason := callerNode(a)
		if reason != "" {
			return authorizer.DecisionDeny, fmt.Sprintf("%s of %s is confined to the caller's node, but %s", a.GetVerb(), r, reason), nil
		}
		return nodeSelectorDecision(a, r, node)
	}), nil
}

// callerNode returns the node the caller's token is bound to, or a reason
// why there is not exactly one.
func callerNode(a authorizer.Attributes) (node, reason string) {
	u := a.GetUser()
	if u == nil {
		return "", "there is no user"
	}
	names := u.GetExtra()[nodeNameKey]
	switch {
	case len(names) == 0:
		return "", "the caller is not bound to a node"
	case len(names) > 1:
		return "", "the caller is bound to more than one node"
	case names[0] == "":
		return "", "the caller's node name is empty"
	}
	return names[0], ""
}

// nodeSelectorDecision allows a only when its field selector requires
// r.Field to equal node, and nothing else of that field.
func nodeSelectorDecision(a authorizer.Attributes, r NodeScopedResource, node string) (authorizer.Decision, string, error) {
	required := r.Field + "=" + node
	deny := func(why string) (authorizer.Decision, string, error) {
		return authorizer.DecisionDeny, fmt.Sprintf("%s of %s requires the field selector %s (the caller's node): %s", a.GetVerb(), r, required, why), nil
	}
	reqs, err := a.GetFieldSelector()
	if err != nil {
		// RequestInfo records a selector that does not parse as an error
		// rather than dropping it; such a request is never allowed.
		return deny("the field selector does not parse: " + err.Error())
	}
	found := false
	for _, req := range reqs {
		if req.Field != r.Field {
			continue
		}
		switch {
		case req.Operator != selection.Equals && req.Operator != selection.DoubleEquals:
			return deny(fmt.Sprintf("%s %s %q is not an equality", req.Field, req.Operator, req.Value))
		case req.Value != node:
			return deny(fmt.Sprintf("it names node %q", req.Value))
		}
		found = true
	}
	if !found {
		return deny("the request has none")
	}
	return authorizer.DecisionAllow, "", nil
}
