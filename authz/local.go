package authz

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// The local authorizers below decide without asking the API server. Compose
// them in front of an [Authorizer] with [First] (a local Allow or Deny wins,
// NoOpinion asks the API server) or [All] (every one must allow).

// AlwaysAllowGroups returns an authorizer that allows every request from a
// user in any of groups, and has no opinion otherwise, as k8s.io/apiserver's
// delegated authorization does for system:masters. With no groups it never
// allows. It is opt-in: nothing in this package uses it by default. The
// returned authorizer is safe for concurrent use.
func AlwaysAllowGroups(groups ...string) authorizer.Authorizer {
	set := make(map[string]struct{}, len(groups))
	for _, g := range groups {
		set[g] = struct{}{}
	}
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		u := a.GetUser()
		if u == nil {
			return authorizer.DecisionNoOpinion, "", nil
		}
		for _, g := range u.GetGroups() {
			if _, ok := set[g]; ok {
				return authorizer.DecisionAllow, "", nil
			}
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
}

// pathPattern is an always-allowed path: exact, or a prefix when it ended in
// "*".
type pathPattern struct {
	s      string
	prefix bool
}

func parsePathPattern(p string) (pathPattern, error) {
	if p == "" || p[0] != '/' {
		return pathPattern{}, fmt.Errorf("authz: path %q does not start with /", p)
	}
	prefix := strings.HasSuffix(p, "*")
	body := strings.TrimSuffix(p, "*")
	if strings.Contains(body, "*") {
		return pathPattern{}, fmt.Errorf("authz: path %q has a * that is not at its end", p)
	}
	if prefix {
		// "/logs/*" matches "/logs/x" (cleaned) but not "/logs"; "/metrics*"
		// matches "/metrics" and "/metricsfoo". A trailing slash before the
		// "*" is kept: it is what makes "/logs/*" stop at a segment.
		if c := path.Clean(body); c != body && c+"/" != body {
			return pathPattern{}, fmt.Errorf("authz: path %q is not clean", p)
		}
		return pathPattern{s: body, prefix: true}, nil
	}
	if cleaned := path.Clean(body); cleaned != body {
		return pathPattern{}, fmt.Errorf("authz: path %q is not clean (want %q)", p, cleaned)
	}
	return pathPattern{s: body}, nil
}

func (p pathPattern) match(cleaned string) bool {
	if p.prefix {
		return strings.HasPrefix(cleaned, p.s)
	}
	return cleaned == p.s
}

// matchPath reports whether the request path reqPath, cleaned with
// path.Clean, matches one of patterns. An empty path matches nothing.
func matchPath(patterns []pathPattern, reqPath string) bool {
	if reqPath == "" {
		return false
	}
	cleaned := path.Clean(reqPath)
	if reqPath[0] != '/' {
		cleaned = path.Clean("/" + reqPath)
	}
	for _, p := range patterns {
		if p.match(cleaned) {
			return true
		}
	}
	return false
}

// AlwaysAllowPaths returns an authorizer that allows non-resource requests
// (any verb) whose path, cleaned with path.Clean, matches one of paths, and
// has no opinion on everything else, resource requests included. A path is
// matched exactly, or as a prefix when it ends in "*": "/healthz" matches
// "/healthz" and "/healthz/" but not "/healthz/etcd"; "/logs/*" matches
// "/logs/a" but not "/logs"; "/metrics*" matches "/metrics" and
// "/metrics/cadvisor". Cleaning happens first, so "/healthz/../secret" is
// "/secret".
//
// Like k8s.io/apiserver's path authorizer, it decides only non-resource
// attributes: behind a mapper that yields resource attributes, such as
// httpauth.Kubelet, it never matches. For an HTTP server, the place for
// health probes and other always-allowed paths is httpauth.Options'
// AlwaysAllowPaths (the --authorization-always-allow-paths flag of
// httpauth.Flags), which works with every mapper and also serves requests
// without a credential, limited to GET and HEAD; this authorizer is for
// chains of your own behind a non-resource mapper, and allows any verb of
// any authenticated user.
//
// Each path must start with "/", be clean, and have "*" only at its end;
// otherwise AlwaysAllowPaths returns an error. With no paths it never
// allows. It is opt-in. The returned authorizer is safe for concurrent use.
func AlwaysAllowPaths(paths ...string) (authorizer.Authorizer, error) {
	patterns := make([]pathPattern, 0, len(paths))
	for _, p := range paths {
		pp, err := parsePathPattern(p)
		if err != nil {
			return nil, err
		}
		patterns = append(patterns, pp)
	}
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.IsResourceRequest() || !matchPath(patterns, a.GetPath()) {
			return authorizer.DecisionNoOpinion, "", nil
		}
		return authorizer.DecisionAllow, "", nil
	}), nil
}

// Rule is one static authorization rule for [StaticRules]. A request
// matches when its subject matches and its attributes match.
//
// Subject: the user's name is in Users, or one of the user's groups is in
// Groups (kube-rbac-proxy's static authorizer ignores groups, #333; this one
// does not). A rule with neither matches no one; use
// Groups: []string{"system:authenticated"} for every authenticated user.
//
// Attributes, each list matching an entry or "*":
//   - Verbs must match the verb; an empty list matches nothing.
//   - Resource requests: APIGroups must match the group ("" is the core
//     group) and Resources the resource; an empty list matches nothing.
//     Subresources must match the subresource; an empty list matches only
//     requests without one. Namespaces and Names match the namespace and
//     name; an empty list matches any.
//   - Non-resource requests: NonResourceURLs must match the cleaned path,
//     exactly or as a prefix when the entry ends in "*" (as
//     [AlwaysAllowPaths]); an empty list matches nothing, so a rule is for
//     resource requests or for non-resource ones, not both, unless it
//     names both.
type Rule struct {
	Users           []string
	Groups          []string
	Verbs           []string
	APIGroups       []string
	Resources       []string
	Subresources    []string
	Namespaces      []string
	Names           []string
	NonResourceURLs []string
}

type compiledRule struct {
	Rule
	urls []pathPattern
}

func matchList(list []string, v string, emptyMatchesAll bool) bool {
	if len(list) == 0 {
		return emptyMatchesAll
	}
	return slices.Contains(list, v) || slices.Contains(list, "*")
}

func (r *compiledRule) matches(a authorizer.Attributes) bool {
	u := a.GetUser()
	if u == nil {
		return false
	}
	if !slices.Contains(r.Users, u.GetName()) && !slices.ContainsFunc(u.GetGroups(), func(g string) bool {
		return slices.Contains(r.Groups, g)
	}) {
		return false
	}
	if !matchList(r.Verbs, a.GetVerb(), false) {
		return false
	}
	if !a.IsResourceRequest() {
		return matchPath(r.urls, a.GetPath())
	}
	if len(r.Subresources) == 0 {
		if a.GetSubresource() != "" {
			return false
		}
	} else if !matchList(r.Subresources, a.GetSubresource(), false) {
		return false
	}
	return matchList(r.APIGroups, a.GetAPIGroup(), false) &&
		matchList(r.Resources, a.GetResource(), false) &&
		matchList(r.Namespaces, a.GetNamespace(), true) &&
		matchList(r.Names, a.GetName(), true)
}

// StaticRules returns an authorizer that allows a request matching any of
// rules and has no opinion otherwise; it never denies. It returns an error
// if a NonResourceURLs entry is not a valid path pattern (see
// [AlwaysAllowPaths]). The rules are copied. The returned authorizer is safe
// for concurrent use.
func StaticRules(rules ...Rule) (authorizer.Authorizer, error) {
	compiled := make([]compiledRule, 0, len(rules))
	for i, r := range rules {
		c := compiledRule{Rule: r}
		c.Users = slices.Clone(r.Users)
		c.Groups = slices.Clone(r.Groups)
		c.Verbs = slices.Clone(r.Verbs)
		c.APIGroups = slices.Clone(r.APIGroups)
		c.Resources = slices.Clone(r.Resources)
		c.Subresources = slices.Clone(r.Subresources)
		c.Namespaces = slices.Clone(r.Namespaces)
		c.Names = slices.Clone(r.Names)
		for _, p := range r.NonResourceURLs {
			pp, err := parsePathPattern(p)
			if err != nil {
				return nil, fmt.Errorf("authz: rule %d: %w", i, err)
			}
			c.urls = append(c.urls, pp)
		}
		compiled = append(compiled, c)
	}
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		for i := range compiled {
			if compiled[i].matches(a) {
				return authorizer.DecisionAllow, fmt.Sprintf("allowed by static rule %d", i), nil
			}
		}
		return authorizer.DecisionNoOpinion, "", nil
	}), nil
}

// NodeLocalOptions configures [NodeLocal].
type NodeLocalOptions struct {
	// NodeName is the name of the node this agent runs on. Empty makes
	// NodeLocal deny every request: an agent that does not know its node
	// cannot tell local callers from remote ones.
	NodeName string
	// NodeUID, if set, must also equal the caller's node-uid extra, so a
	// token bound to an earlier node of the same name is refused. Empty
	// skips the check.
	NodeUID string
}

// NodeLocal returns an authorizer for node agents that allows a caller
// bound to this node and denies every other caller: it allows only when the
// user's extra [serviceaccount.NodeNameKey]
// ("authentication.kubernetes.io/node-name") holds exactly one value, equal
// to opts.NodeName, and, when opts.NodeUID is set, [serviceaccount.NodeUIDKey]
// holds exactly one value, equal to opts.NodeUID. Such extras come from
// node-bound service-account tokens (pods with spec.nodeName, or tokens
// bound to a Node).
//
// NodeLocal never has no opinion: callers with no node binding, or bound to
// another node, are denied with a reason that says which. Put it in front
// of the SAR authorizer with [All], so both must allow:
//
//	authz.All(authz.NodeLocal(authz.NodeLocalOptions{NodeName: node}), sar)
//
// The returned authorizer is safe for concurrent use.
func NodeLocal(opts NodeLocalOptions) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if opts.NodeName == "" {
			return authorizer.DecisionDeny, "node-local authorization is not configured with this node's name", nil
		}
		u := a.GetUser()
		if u == nil {
			return authorizer.DecisionDeny, "no user", nil
		}
		extra := u.GetExtra()
		names := extra[serviceaccount.NodeNameKey]
		switch {
		case len(names) == 0:
			return authorizer.DecisionDeny, "caller is not bound to a node", nil
		case len(names) > 1:
			return authorizer.DecisionDeny, "caller is bound to more than one node", nil
		case names[0] != opts.NodeName:
			return authorizer.DecisionDeny, fmt.Sprintf("caller is bound to node %q, not to this node", names[0]), nil
		}
		if opts.NodeUID != "" {
			uids := extra[serviceaccount.NodeUIDKey]
			switch {
			case len(uids) == 0:
				return authorizer.DecisionDeny, "caller's node binding has no node UID", nil
			case len(uids) > 1 || uids[0] != opts.NodeUID:
				return authorizer.DecisionDeny, "caller is bound to an earlier node of this name (node UID differs)", nil
			}
		}
		return authorizer.DecisionAllow, "", nil
	})
}
