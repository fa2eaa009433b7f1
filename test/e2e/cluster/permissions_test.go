package cluster_test

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// rule is a PolicyRule in a line.
func rule(verbs, groups, resources, names string) rbacv1.PolicyRule {
	split := func(s string) []string {
		if s == "-" {
			return nil
		}
		return strings.Split(s, ",")
	}
	r := rbacv1.PolicyRule{Verbs: split(verbs), Resources: split(resources), ResourceNames: split(names)}
	r.APIGroups = split(groups)
	if groups == "core" {
		r.APIGroups = []string{""}
	}
	return r
}

// req is the attributes of a resource request.
func req(verb, group, resource, ns, name string) authorizer.AttributesRecord {
	res, sub, _ := strings.Cut(resource, "/")
	return authorizer.AttributesRecord{Verb: verb, APIGroup: group, Resource: res, Subresource: sub, Namespace: ns, Name: name, ResourceRequest: true}
}

// TestCheckPermissions is the check of TestManifestPermissions on cases
// of the issue that asked for it (#29): a rule with a verb nobody uses, a
// request no rule allows, cluster scope where a namespace would do, no
// resourceNames where one object is read, wildcards; and what answers
// each (a comment naming the test that uses a rule, a comment saying why
// it cannot be narrowed).
func TestCheckPermissions(t *testing.T) {
	t.Parallel()
	grant := func(r rbacv1.PolicyRule, ns, comments string) cluster.Grant {
		return cluster.Grant{Rule: r, Namespace: ns, Comments: comments, Key: "rbac.yaml Role x rule 0", Binding: "RoleBinding x"}
	}
	exists := func(name string) bool { return name == "TestThere" }
	tests := []struct {
		name string
		use  cluster.Use
		want []string // finding keys
	}{
		{name: "configmaps get unused (only list)", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("get,list", "core", "configmaps", "-"), "dra", "")},
			Checks: []authorizer.AttributesRecord{req("list", "", "configmaps", "dra", "")},
		}, want: []string{"rbac.yaml Role x rule 0: unused verbs=get apiGroups=\"\" resources=configmaps"}},
		{name: "every verb used", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("get,list", "core", "configmaps", "-"), "dra", "")},
			Checks: []authorizer.AttributesRecord{req("list", "", "configmaps", "dra", ""), req("get", "", "configmaps", "dra", "a"), req("get", "", "configmaps", "dra", "b")},
		}},
		{name: "a request no rule allows", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("list", "core", "configmaps", "-"), "dra", "")},
			Checks: []authorizer.AttributesRecord{req("list", "", "configmaps", "dra", ""), req("list", "", "configmaps", "other", "")},
		}, want: []string{"request list configmaps other/"}},
		{name: "allowed by the API server's defaults", use: cluster.Use{
			Defaults: []cluster.Grant{{Rule: rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/openid/v1/jwks"}}}},
			Checks:   []authorizer.AttributesRecord{{Verb: "get", Path: "/openid/v1/jwks"}},
		}},
		{name: "unused, a comment names an existing test", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("get", "core", "configmaps", "-"), "dra", "# Exercised by TestThere."), grant(rule("list", "core", "configmaps", "-"), "dra", "")},
			Checks: []authorizer.AttributesRecord{req("list", "", "configmaps", "dra", "")}, TestExists: exists,
		}},
		{name: "unused, a comment names a missing test", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("get", "core", "configmaps", "-"), "dra", "# Exercised by TestGone.")}, TestExists: exists,
		}, want: []string{"rbac.yaml Role x rule 0: unused verbs=get apiGroups=\"\" resources=configmaps"}},
		{name: "get pods across the cluster, used in one namespace", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("get", "core", "pods", "-"), "", "")},
			Checks: []authorizer.AttributesRecord{req("get", "", "pods", "drv", "p-1"), req("get", "", "pods", "drv", "p-2")},
		}, want: []string{"rbac.yaml Role x rule 0: cluster-wide"}},
		{name: "get pods across the cluster, used in two namespaces", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("get", "core", "pods", "-"), "", "")},
			Checks: []authorizer.AttributesRecord{req("get", "", "pods", "drv", "p-1"), req("get", "", "pods", "drv-2", "p-2")},
		}},
		{name: "cluster-wide, not narrowed, with the reason", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("get", "core", "pods", "-"), "", "# Not narrowed: the pods of every namespace reserve claims.")},
			Checks: []authorizer.AttributesRecord{req("get", "", "pods", "drv", "p-1")},
		}},
		{name: "cluster-wide, 'not narrowed' without a reason", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("get", "core", "pods", "-"), "", "# Not narrowed:")},
			Checks: []authorizer.AttributesRecord{req("get", "", "pods", "drv", "p-1"), req("get", "", "pods", "drv", "p-2")},
		}, want: []string{"rbac.yaml Role x rule 0: cluster-wide"}},
		{name: "get snapshotmetadataservices without resourceNames, one read", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("get", "cbt.storage.k8s.io", "snapshotmetadataservices", "-"), "", "")},
			Checks: []authorizer.AttributesRecord{req("get", "cbt.storage.k8s.io", "snapshotmetadataservices", "", "hostpath.csi.k8s.io")},
		}, want: []string{"rbac.yaml Role x rule 0: no resourceNames"}},
		{name: "get snapshotmetadataservices with resourceNames", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("get", "cbt.storage.k8s.io", "snapshotmetadataservices", "hostpath.csi.k8s.io"), "", "")},
			Checks: []authorizer.AttributesRecord{req("get", "cbt.storage.k8s.io", "snapshotmetadataservices", "", "hostpath.csi.k8s.io")},
		}},
		{name: "impersonate:associated-node, checked for every node (*)", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("impersonate:associated-node", "authentication.k8s.io", "nodes", "-"), "", "")},
			Checks: []authorizer.AttributesRecord{req("impersonate:associated-node", "authentication.k8s.io", "nodes", "", "*"), req("impersonate:associated-node", "authentication.k8s.io", "nodes", "", "*")},
		}},
		{name: "get nodes, one read, not narrowed without a reason", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("get", "core", "nodes", "-"), "", "")},
			Checks: []authorizer.AttributesRecord{req("get", "", "nodes", "", "node-a")},
		}, want: []string{"rbac.yaml Role x rule 0: no resourceNames"}},
		{name: "a resource name nobody reads", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("get", "cbt.storage.k8s.io", "snapshotmetadataservices", "a,b"), "", "")},
			Checks: []authorizer.AttributesRecord{req("get", "cbt.storage.k8s.io", "snapshotmetadataservices", "", "a")},
		}, want: []string{"rbac.yaml Role x rule 0: unused verbs=get apiGroups=cbt.storage.k8s.io resources=snapshotmetadataservices resourceNames=b"}},
		{name: "wildcard", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("*", "core", "configmaps", "-"), "dra", "")},
			Checks: []authorizer.AttributesRecord{req("list", "", "configmaps", "dra", ""), req("*", "", "configmaps", "dra", "")},
		}, want: []string{"rbac.yaml Role x rule 0: wildcard"}},
		{name: "a caller's rule, used by the server's reviews", use: cluster.Use{
			Grants:   []cluster.Grant{grant(rule("get", "core", "nodes/metrics", "-"), "", "# Not narrowed: every node's.")},
			Reviewed: []authorizer.AttributesRecord{req("get", "", "nodes/metrics", "", "node-a")},
		}},
		{name: "a caller's rule nobody asked about", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("get", "core", "nodes/metrics", "-"), "", "")},
		}, want: []string{"rbac.yaml Role x rule 0: unused verbs=get apiGroups=\"\" resources=nodes/metrics"}},
		{name: "a check the audit log cannot tell, allowed", use: cluster.Use{
			Grants: []cluster.Grant{grant(rule("impersonate", "core", "groups", "system:serviceaccounts"), "", "")},
			Maybe:  []authorizer.AttributesRecord{req("impersonate", "", "groups", "", "system:serviceaccounts")},
		}},
		{name: "a check the audit log cannot tell, allowed by no rule", use: cluster.Use{
			Maybe: []authorizer.AttributesRecord{req("impersonate", "", "groups", "", "system:serviceaccounts")},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, f := range cluster.CheckPermissions(tc.use) {
				got = append(got, f.Key)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("CheckPermissions = %q; want %q", got, tc.want)
			}
		})
	}
}
