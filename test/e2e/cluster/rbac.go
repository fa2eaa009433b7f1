package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// What a ServiceAccount of the manifests may do, and what it did: the
// rules its bindings grant it ([Cluster.Grants]), the authorization checks
// the API server made for each of its requests ([AuditedChecks], from the
// audit log), and the checks its SubjectAccessReviews asked about others
// ([ReviewedAttributes]). Rules are matched as the API server's RBAC
// authorizer matches them (k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac).

// Grant is one rule a user holds through one binding.
type Grant struct {
	// Rule is the rule.
	Rule rbacv1.PolicyRule
	// Namespace is the RoleBinding's namespace: the rule applies to
	// requests for objects of that namespace only. "" for a
	// ClusterRoleBinding: everywhere.
	Namespace string
	// Role and Binding name the role holding the rule and the binding
	// granting it ("ClusterRole NAME", "Role NS/NAME").
	Role, Binding string
	// Index is the rule's index in the role.
	Index int
	// Source is the file of the manifests' directory that writes the
	// role; "" for a role the manifests do not hold (one of the API
	// server's own, such as system:auth-delegator).
	Source string
	// Comments are the comments beside the rule in Source and the head
	// comments of the role's and the binding's documents.
	Comments string
	// Key names the rule as the files write it, the same however the
	// manifests were rendered (name suffix, namespace): SOURCE KIND NAME
	// rule INDEX, or, for a role of the API server, the role and the
	// binding's file.
	Key string
}

// String names the rule and where it comes from.
func (g Grant) String() string {
	where := g.Role + " rule " + fmt.Sprint(g.Index)
	if g.Source != "" {
		where += " (" + g.Source + ")"
	}
	return fmt.Sprintf("%s, %s: %s", where, g.Binding, compactRule(g.Rule))
}

// compactRule writes a rule as RBAC's describe output does, short.
func compactRule(r rbacv1.PolicyRule) string {
	var parts []string
	add := func(name string, v []string) {
		if len(v) > 0 {
			parts = append(parts, name+"="+strings.Join(v, ","))
		}
	}
	add("verbs", r.Verbs)
	add("apiGroups", quoteEmpty(r.APIGroups))
	add("resources", r.Resources)
	add("resourceNames", r.ResourceNames)
	add("nonResourceURLs", r.NonResourceURLs)
	return strings.Join(parts, " ")
}

func quoteEmpty(v []string) []string {
	out := slices.Clone(v)
	for i, s := range out {
		if s == "" {
			out[i] = `""`
		}
	}
	return out
}

// Allows reports whether g allows a: its rule matches a as the RBAC
// authorizer matches it, and, for a RoleBinding's, a is a request for an
// object of its namespace.
func (g Grant) Allows(a authorizer.Attributes) bool {
	if g.Namespace != "" && (!a.IsResourceRequest() || a.GetNamespace() != g.Namespace) {
		return false
	}
	return rbac.RuleAllows(a, &g.Rule)
}

// Grants returns every rule the ServiceAccount ns/name holds through the
// RoleBindings and ClusterRoleBindings of ms: each binding's role read
// from ms, or from the API server for a role ms do not hold (one of its
// own). Each grant carries the comments of its source file.
func (c *Cluster) Grants(t testing.TB, ns, name string, ms ...*Manifests) []Grant {
	t.Helper()
	var grants []Grant
	for _, m := range ms {
		for obj, b := range m.bindings(t) {
			if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
				sns := s.Namespace
				if sns == "" {
					sns = obj.GetNamespace()
				}
				return s.Kind == rbacv1.ServiceAccountKind && s.Name == name && sns == ns
			}) {
				continue
			}
			binding := obj.GetKind() + " " + qualifiedName(obj.GetNamespace(), obj.GetName())
			bindingFile, bindingDoc, _, err := m.sourceComments(obj)
			if err != nil {
				t.Fatal(err)
			}
			role, roleM := c.boundRole(t, ms, b.RoleRef, obj.GetNamespace())
			var roleDoc string
			var ruleComments []string
			file := ""
			key := "ClusterRole " + role.GetName() + " (" + bindingFile + " " + obj.GetKind() + " " + strings.TrimSuffix(obj.GetName(), m.NameSuffix) + ")"
			if roleM != nil {
				if file, roleDoc, ruleComments, err = roleM.sourceComments(role); err != nil {
					t.Fatal(err)
				}
				key = file + " " + role.GetKind() + " " + strings.TrimSuffix(role.GetName(), roleM.NameSuffix)
			}
			var r rbacv1.ClusterRole // a Role has the same fields
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(role.Object, &r); err != nil {
				t.Fatal(err)
			}
			for i, rule := range r.Rules {
				comments := []string{bindingDoc, roleDoc}
				if i < len(ruleComments) {
					comments = append(comments, ruleComments[i])
				}
				g := Grant{Rule: rule, Role: role.GetKind() + " " + qualifiedName(role.GetNamespace(), role.GetName()),
					Binding: binding, Index: i, Source: file, Comments: strings.Join(comments, "\n"), Key: fmt.Sprintf("%s rule %d", key, i)}
				if obj.GetKind() == "RoleBinding" {
					g.Namespace = obj.GetNamespace()
				}
				grants = append(grants, g)
			}
		}
	}
	return grants
}

// boundRole returns the role ref names for a binding in ns: from ms (with
// the manifests holding it), or from the API server (nil manifests).
func (c *Cluster) boundRole(t testing.TB, ms []*Manifests, ref rbacv1.RoleRef, ns string) (*unstructured.Unstructured, *Manifests) {
	t.Helper()
	for _, m := range ms {
		for _, o := range m.Objects {
			if o.GetKind() == ref.Kind && o.GetName() == ref.Name && (ref.Kind == "ClusterRole" || o.GetNamespace() == ns) {
				return o, m
			}
		}
	}
	if ref.Kind == "Role" {
		return c.Get(t, "rbac.authorization.k8s.io/v1", "Role", ns, ref.Name), nil
	}
	return c.Get(t, "rbac.authorization.k8s.io/v1", "ClusterRole", "", ref.Name), nil
}

// DefaultGrants returns the rules the API server's own bootstrap
// ClusterRoleBindings grant every user in one of groups (such as
// system:authenticated and system:serviceaccounts, what every
// ServiceAccount is in): what a server may do without its manifests
// granting it (discovery, its own SelfSubjectAccessReviews, the service
// account issuer's keys).
func (c *Cluster) DefaultGrants(t testing.TB, groups ...string) []Grant {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	bindings, err := c.clientset.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/bootstrapping=rbac-defaults"})
	if err != nil {
		t.Fatalf("cluster: bootstrap ClusterRoleBindings: %v", err)
	}
	var grants []Grant
	for _, b := range bindings.Items {
		if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool { return s.Kind == rbacv1.GroupKind && slices.Contains(groups, s.Name) }) {
			continue
		}
		role, err := c.clientset.RbacV1().ClusterRoles().Get(ctx, b.RoleRef.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("cluster: ClusterRole %s: %v", b.RoleRef.Name, err)
		}
		for i, rule := range role.Rules {
			grants = append(grants, Grant{Rule: rule, Role: "ClusterRole " + role.Name, Binding: "ClusterRoleBinding " + b.Name, Index: i})
		}
	}
	return grants
}

// ServiceAccountGroups are the groups the API server puts every
// ServiceAccount of namespace ns in.
func ServiceAccountGroups(ns string) []string {
	return append(serviceaccount.MakeGroupNames(ns), user.AllAuthenticated)
}

// sourceComments finds the document that writes obj (its kind and its
// name as written, without [Manifests.NameSuffix]) among the YAML files of
// m's directory (or in m's file, for manifests read from one file, as
// kubectl apply -f sends them), and returns the file's name relative to the examples'
// parent (examples/NAME/deploy/FILE), the head comment of the document,
// and, for a role, the comments beside each of its rules. A document not
// found is no error: the object is none of the directory's own (a role of
// the API server).
func (m *Manifests) sourceComments(obj *unstructured.Unstructured) (file, doc string, rules []string, err error) {
	name := strings.TrimSuffix(obj.GetName(), m.NameSuffix)
	paths, err := filepath.Glob(filepath.Join(m.Dir, "*.yaml"))
	if err != nil {
		return "", "", nil, err
	}
	if fi, err := os.Stat(m.Dir); err == nil && fi.Mode().IsRegular() {
		paths = []string{m.Dir}
	}
	for _, p := range paths {
		if filepath.Base(p) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return "", "", nil, err
		}
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		for {
			var n yaml.Node
			if err := dec.Decode(&n); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return "", "", nil, fmt.Errorf("%s: %w", p, err)
			}
			if len(n.Content) != 1 || n.Content[0].Kind != yaml.MappingNode {
				continue
			}
			root := n.Content[0]
			if mapValue(root, "kind") == nil || mapValue(root, "kind").Value != obj.GetKind() ||
				mapValue(mapValue(root, "metadata"), "name") == nil || mapValue(mapValue(root, "metadata"), "name").Value != name {
				continue
			}
			doc = n.HeadComment
			if len(root.Content) > 0 {
				doc = strings.TrimSpace(doc + "\n" + root.Content[0].HeadComment)
			}
			if seq := mapValue(root, "rules"); seq != nil {
				for _, r := range seq.Content {
					rules = append(rules, comments(r))
				}
			}
			return displayPath(p), doc, rules, nil
		}
	}
	return "", "", nil, nil
}

// displayPath is p from examples/ on, when it is under it.
func displayPath(p string) string {
	s := filepath.ToSlash(p)
	if i := strings.LastIndex(s, "/examples/"); i >= 0 {
		return s[i+1:]
	}
	return s
}

// mapValue is the value of key in the mapping node n, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// comments are every comment in the tree of n.
func comments(n *yaml.Node) string {
	var out []string
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		for _, c := range []string{n.HeadComment, n.LineComment, n.FootComment} {
			if c != "" {
				out = append(out, c)
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(out, "\n")
}

// AuditedChecks returns the authorization checks the API server made as
// ev.User for the request of ev: the request's own attributes; or, for an
// impersonated request, which the API server authorizes as the
// impersonated user, the checks of the impersonation itself, as
// k8s.io/apiserver's impersonation filter makes them. Legacy
// impersonation: impersonate the user (users, or serviceaccounts in its
// namespace), each group, the UID, each extra value (userextras/KEY).
// Constrained impersonation (ev.AuthenticationMetadata's constraint
// impersonate:MODE): impersonate-on:MODE:VERB on the request's attributes,
// and impersonate:MODE on the user (nodes: for associated-node any name,
// "*", which its cache key needs), and for user-info its groups, UID and
// extras.
//
// The audit log records the user as the API server completed it, so some
// checks cannot be told from it; they are in maybe: the groups of an
// impersonated ServiceAccount when they are its own (the API server fills
// them in when no Impersonate-Group is sent, and checks them when one is).
// system:authenticated, which it adds, is taken as never sent.
func AuditedChecks(ev *auditv1.Event) (checks, maybe []authorizer.AttributesRecord) {
	req := requestAttributes(ev)
	imp := ev.ImpersonatedUser
	if imp == nil {
		return []authorizer.AttributesRecord{req}, nil
	}
	requestor := &user.DefaultInfo{Name: ev.User.Username, UID: ev.User.UID, Groups: ev.User.Groups}
	constraint := ""
	if ev.AuthenticationMetadata != nil {
		constraint = ev.AuthenticationMetadata.ImpersonationConstraint
	}
	verb, group, mode := "impersonate", "", ""
	if constraint != "" {
		verb, group = constraint, "authentication.k8s.io"
		mode = strings.TrimPrefix(constraint, "impersonate:")
	}
	check := func(g, resource, sub, ns, name string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: requestor, Verb: verb, APIGroup: g, Resource: resource, Subresource: sub,
			Namespace: ns, Name: name, ResourceRequest: true}
	}
	if mode != "" {
		on := req
		on.User = requestor
		on.Verb = "impersonate-on:" + mode + ":" + req.Verb
		checks = append(checks, on)
	}
	saNS, saName, saErr := serviceaccount.SplitUsername(imp.Username)
	isSA := saErr == nil
	switch node, isNode := strings.CutPrefix(imp.Username, "system:node:"); {
	case mode == "associated-node" && isNode:
		checks = append(checks, check(group, "nodes", "", "", "*"))
	case mode != "" && isNode:
		checks = append(checks, check(group, "nodes", "", "", node))
	case isSA:
		checks = append(checks, check(group, "serviceaccounts", "", saNS, saName))
	default:
		checks = append(checks, check(group, "users", "", "", imp.Username))
	}
	if mode == "associated-node" || mode == "arbitrary-node" || mode == "serviceaccount" {
		return checks, nil // the API server sets every other field
	}
	groups := slices.DeleteFunc(slices.Clone(imp.Groups), func(g string) bool { return g == user.AllAuthenticated })
	own := isSA && slices.Equal(slices.Sorted(slices.Values(groups)), slices.Sorted(slices.Values(serviceaccount.MakeGroupNames(saNS))))
	for _, g := range groups {
		if own {
			maybe = append(maybe, check(group, "groups", "", "", g))
		} else {
			checks = append(checks, check(group, "groups", "", "", g))
		}
	}
	if imp.UID != "" {
		checks = append(checks, check("authentication.k8s.io", "uids", "", "", imp.UID))
	}
	for _, k := range slices.Sorted(maps.Keys(imp.Extra)) {
		for _, v := range imp.Extra[k] {
			checks = append(checks, check("authentication.k8s.io", "userextras", k, "", v))
		}
	}
	return checks, maybe
}

// requestAttributes are the attributes the API server authorizes the
// request of ev with, as its request info names them (a create of a
// collection has no name: the name the audit log shows comes from the
// body, after authorization).
func requestAttributes(ev *auditv1.Event) authorizer.AttributesRecord {
	a := authorizer.AttributesRecord{
		User: &user.DefaultInfo{Name: ev.User.Username, UID: ev.User.UID, Groups: ev.User.Groups},
		Verb: ev.Verb,
	}
	if r := ev.ObjectRef; r != nil {
		a.ResourceRequest = true
		a.APIGroup, a.APIVersion, a.Resource, a.Subresource, a.Namespace, a.Name = r.APIGroup, r.APIVersion, r.Resource, r.Subresource, r.Namespace, r.Name
		if ev.Verb == "create" && r.Subresource == "" {
			a.Name = ""
		}
		return a
	}
	a.Path = ev.RequestURI
	if u, err := url.ParseRequestURI(ev.RequestURI); err == nil {
		a.Path = u.Path
	}
	return a
}

// ReviewedAttributes returns the user a SubjectAccessReview asked about
// and the attributes it asked for, from ev, the audit event of its create
// at level Request (see [Options.AuditUserGroups]); false when ev is no
// such event.
func ReviewedAttributes(ev *auditv1.Event) (string, authorizer.AttributesRecord, bool) {
	if ev.ObjectRef == nil || ev.ObjectRef.APIGroup != "authorization.k8s.io" || ev.ObjectRef.Resource != "subjectaccessreviews" ||
		ev.Verb != "create" || ev.RequestObject == nil {
		return "", authorizer.AttributesRecord{}, false
	}
	var sar authorizationv1.SubjectAccessReview
	if err := json.Unmarshal(ev.RequestObject.Raw, &sar); err != nil {
		return "", authorizer.AttributesRecord{}, false
	}
	s := sar.Spec
	a := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: s.User, UID: s.UID, Groups: s.Groups}}
	switch {
	case s.ResourceAttributes != nil:
		r := s.ResourceAttributes
		a.ResourceRequest = true
		a.Verb, a.APIGroup, a.APIVersion, a.Resource, a.Subresource, a.Namespace, a.Name = r.Verb, r.Group, r.Version, r.Resource, r.Subresource, r.Namespace, r.Name
	case s.NonResourceAttributes != nil:
		a.Verb, a.Path = s.NonResourceAttributes.Verb, s.NonResourceAttributes.Path
	default:
		return "", authorizer.AttributesRecord{}, false
	}
	return s.User, a, true
}

// DescribeAttributes writes a as a request: VERB GROUP/RESOURCE/SUB NS/NAME,
// or VERB PATH.
func DescribeAttributes(a authorizer.Attributes) string {
	if !a.IsResourceRequest() {
		return a.GetVerb() + " " + a.GetPath()
	}
	res := a.GetResource()
	if a.GetSubresource() != "" {
		res += "/" + a.GetSubresource()
	}
	if a.GetAPIGroup() != "" {
		res = a.GetAPIGroup() + "/" + res
	}
	s := a.GetVerb() + " " + res
	if a.GetNamespace() != "" || a.GetName() != "" {
		s += " " + qualifiedName(a.GetNamespace(), a.GetName())
	}
	return s
}
