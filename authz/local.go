package authz

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/internal/pathmatch"
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
//   - Non-resource requests: NonResourceURLs must match the path exactly,
//     or as a prefix when the entry ends in "*" ("/logs/*" matches
//     "/logs/a" and not "/logs"; "*" matches every path), as RBAC's
//     nonResourceURLs and k8s.io/apiserver's always-allow paths do. Each
//     entry must be a clean absolute path (before its "*"). The request's
//     path must be clean too, as httpauth.CleanPath returns it (httpauth
//     hands authorizers only such paths): "/healthz/" does not match
//     "/healthz", and a path with "//", dot segments, escapes or a
//     backslash matches no entry. An empty list matches nothing, so a rule
//     is for resource requests or for non-resource ones, not both, unless
//     it names both.
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
	urls *pathmatch.Matcher
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
		return r.urls.Match(a.GetPath())
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
// if a NonResourceURLs entry is not a valid path pattern (see [Rule]). The
// rules are copied. The returned authorizer is safe for concurrent use.
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
		urls, err := pathmatch.New("NonResourceURLs entry", r.NonResourceURLs)
		if err != nil {
			return nil, fmt.Errorf("authz: rule %d: %w", i, err)
		}
		c.urls = urls
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

// The extra keys of node-bound service-account tokens: k8s.io/apiserver's
// serviceaccount.NodeNameKey and NodeUIDKey, written here because that
// package brings k8s.io/api/core/v1 and the validation packages (7 in all)
// for two strings. TestNodeExtraKeysAreAPIServers compares them.
const (
	nodeNameKey = "authentication.kubernetes.io/node-name"
	nodeUIDKey  = "authentication.kubernetes.io/node-uid"
)

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
// user's extra "authentication.kubernetes.io/node-name" (k8s.io/apiserver's
// serviceaccount.NodeNameKey) holds exactly one value, equal to
// opts.NodeName, and, when opts.NodeUID is set,
// "authentication.kubernetes.io/node-uid" (serviceaccount.NodeUIDKey) holds
// exactly one value, equal to opts.NodeUID. Such extras come from
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
		names := extra[nodeNameKey]
		switch {
		case len(names) == 0:
			return authorizer.DecisionDeny, "caller is not bound to a node", nil
		case len(names) > 1:
			return authorizer.DecisionDeny, "caller is bound to more than one node", nil
		case names[0] != opts.NodeName:
			return authorizer.DecisionDeny, fmt.Sprintf("caller is bound to node %q, not to this node", names[0]), nil
		}
		if opts.NodeUID != "" {
			uids := extra[nodeUIDKey]
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
