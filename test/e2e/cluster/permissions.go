package cluster

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/component-helpers/auth/rbac/validation"
)

// Use is what one ServiceAccount of the manifests did, and what it was
// granted: the input of [CheckPermissions].
type Use struct {
	// Grants are the rules the manifests grant it ([Cluster.Grants]).
	Grants []Grant
	// Defaults are the rules the API server grants it whatever the
	// manifests say ([Cluster.DefaultGrants]): they allow requests, and
	// are not checked themselves.
	Defaults []Grant
	// Checks are the authorization checks of its own requests
	// ([AuditedChecks]), each of which must be allowed.
	Checks []authorizer.AttributesRecord
	// Maybe are checks the audit log cannot tell were made (see
	// [AuditedChecks]): they exercise a rule that allows them, and need
	// none.
	Maybe []authorizer.AttributesRecord
	// Reviewed are the checks the servers' SubjectAccessReviews asked
	// about it ([ReviewedAttributes]): what its rules are for when it is
	// a server's caller. They exercise the rules that allow them.
	Reviewed []authorizer.AttributesRecord
	// TestExists reports whether the test a comment names exists (see
	// [CheckPermissions]); nil: none does.
	TestExists func(name string) bool
}

// Finding is one thing [CheckPermissions] found wrong.
type Finding struct {
	// Key names the rule ([Grant.Key]) or the request, and the kind of
	// finding: the same in every run for the same manifests.
	Key string
	// Detail says what was seen.
	Detail string
}

func (f Finding) String() string { return f.Key + ": " + f.Detail }

// The comments beside a rule (in its role's file: above or on the rule,
// or at the head of the role's or the binding's document) that
// [CheckPermissions] reads.
var (
	// exercisedBy names the test that uses a rule the checked flows do not.
	exercisedBy = regexp.MustCompile(`(?i)exercised by (Test[A-Za-z0-9_]+)`)
	// notNarrowed says why a broad rule cannot be narrowed.
	notNarrowed = regexp.MustCompile(`(?i)not narrowed:\s*\S`)
)

// CheckPermissions checks a ServiceAccount's grants against what it did:
//
//   - every check of its own requests is allowed by a grant (of the
//     manifests, or of the API server's defaults);
//   - every rule of its grants was exercised by some check (its own, or a
//     review about it), each verb, API group, resource and resource name
//     of it (a rule broken down as k8s.io/component-helpers' RBAC
//     validation does), unless a comment beside the rule names an
//     existing test that uses it ("Exercised by TestName");
//   - no rule is broader than what was done, unless a comment beside it
//     says why it cannot be narrowed ("Not narrowed: REASON"): a rule with
//     "*"; a rule of a ClusterRoleBinding whose every use was in one
//     namespace (a RoleBinding there would do); a rule without
//     resourceNames whose every use named one object (resourceNames would
//     do; the name "*" of a check made for every object is none).
//
// It returns what it found, in a stable order.
func CheckPermissions(u Use) []Finding {
	var out []Finding
	allowed := func(a authorizer.Attributes) bool {
		return slices.ContainsFunc(u.Grants, func(g Grant) bool { return g.Allows(a) }) ||
			slices.ContainsFunc(u.Defaults, func(g Grant) bool { return g.Allows(a) })
	}
	seen := map[string]bool{}
	for _, a := range u.Checks {
		if d := DescribeAttributes(a); !allowed(a) && !seen[d] {
			seen[d] = true
			out = append(out, Finding{Key: "request " + d, Detail: "allowed by no rule of the manifests"})
		}
	}
	uses := slices.Concat(u.Checks, u.Reviewed, slices.DeleteFunc(slices.Clone(u.Maybe), func(a authorizer.AttributesRecord) bool { return !allowed(a) }))
	for _, g := range u.Grants {
		var matched []authorizer.AttributesRecord
		for _, a := range uses {
			if g.Allows(a) {
				matched = append(matched, a)
			}
		}
		named := exercisedBy.FindStringSubmatch(g.Comments)
		for _, atom := range validation.BreakdownRule(g.Rule) {
			ag := g
			ag.Rule = atom
			if slices.ContainsFunc(matched, func(a authorizer.AttributesRecord) bool { return ag.Allows(a) }) {
				continue
			}
			switch {
			case named != nil && u.TestExists != nil && u.TestExists(named[1]):
				// Used by the test the comment names.
			case named != nil:
				out = append(out, Finding{Key: g.Key + ": unused " + compactRule(atom), Detail: "the comment names " + named[1] + ", which does not exist"})
			default:
				out = append(out, Finding{Key: g.Key + ": unused " + compactRule(atom), Detail: "no request used it, and no comment names a test that does"})
			}
		}
		if notNarrowed.MatchString(g.Comments) {
			continue
		}
		if wildcard(g.Rule) {
			out = append(out, Finding{Key: g.Key + ": wildcard", Detail: compactRule(g.Rule) + ` has "*", and no comment says why it cannot be narrowed`})
		}
		if len(matched) == 0 || len(g.Rule.NonResourceURLs) > 0 {
			continue
		}
		if ns := distinct(matched, func(a authorizer.AttributesRecord) string { return a.Namespace }); g.Namespace == "" && len(ns) == 1 && ns[0] != "" {
			out = append(out, Finding{Key: g.Key + ": cluster-wide", Detail: fmt.Sprintf("granted by %s in every namespace, and every request it allowed was in namespace %s: a RoleBinding there would do, or a comment says why it cannot be narrowed", g.Binding, ns[0])})
		}
		// A check of the name "*" (impersonate:associated-node's: the API
		// server asks for every node, whichever the requestor's is) names
		// no one object.
		if names := distinct(matched, func(a authorizer.AttributesRecord) string { return a.Name }); len(g.Rule.ResourceNames) == 0 && len(names) == 1 && names[0] != "" && names[0] != "*" {
			out = append(out, Finding{Key: g.Key + ": no resourceNames", Detail: fmt.Sprintf("every request it allowed named %q: resourceNames would do, or a comment says why it cannot be narrowed", names[0])})
		}
	}
	slices.SortStableFunc(out, func(a, b Finding) int { return strings.Compare(a.Key, b.Key) })
	return slices.CompactFunc(out, func(a, b Finding) bool { return a.Key == b.Key })
}

// wildcard reports whether r has "*" anywhere.
func wildcard(r rbacv1.PolicyRule) bool {
	for _, v := range [][]string{r.Verbs, r.APIGroups, r.Resources, r.ResourceNames, r.NonResourceURLs} {
		if slices.ContainsFunc(v, func(s string) bool { return strings.Contains(s, "*") }) {
			return true
		}
	}
	return false
}

// distinct are the distinct values of f over as, sorted.
func distinct(as []authorizer.AttributesRecord, f func(authorizer.AttributesRecord) string) []string {
	var out []string
	for _, a := range as {
		out = append(out, f(a))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
