package cluster_test

import (
	"testing"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// TestAuditPolicy evaluates the audit policy the cluster writes with the
// API server's own policy loader and evaluator: the users of the listed
// groups are audited at Metadata, their SubjectAccessReviews at Request
// (whom they asked about), never a TokenReview's body (it holds a token);
// other users only for resource.k8s.io, at Metadata.
func TestAuditPolicy(t *testing.T) {
	t.Parallel()
	listed := &user.DefaultInfo{Name: "system:serviceaccount:rbacproxy:app", Groups: cluster.ServiceAccountGroups("rbacproxy")}
	other := &user.DefaultInfo{Name: "system:serviceaccount:team:app", Groups: cluster.ServiceAccountGroups("team")}
	resource := func(u user.Info, verb, group, res string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, Resource: res, ResourceRequest: true}
	}
	tests := []struct {
		name   string
		groups []string
		attrs  authorizer.AttributesRecord
		want   auditinternal.Level
	}{
		{"listed: SubjectAccessReview", []string{"system:serviceaccounts:rbacproxy"}, resource(listed, "create", "authorization.k8s.io", "subjectaccessreviews"), auditinternal.LevelRequest},
		{"listed: TokenReview", []string{"system:serviceaccounts:rbacproxy"}, resource(listed, "create", "authentication.k8s.io", "tokenreviews"), auditinternal.LevelMetadata},
		{"listed: TokenRequest", []string{"system:serviceaccounts:rbacproxy"}, authorizer.AttributesRecord{User: listed, Verb: "create", Resource: "serviceaccounts", Subresource: "token", ResourceRequest: true}, auditinternal.LevelMetadata},
		{"listed: get pods", []string{"system:serviceaccounts:rbacproxy"}, resource(listed, "get", "", "pods"), auditinternal.LevelMetadata},
		{"listed: non-resource", []string{"system:serviceaccounts:rbacproxy"}, authorizer.AttributesRecord{User: listed, Verb: "get", Path: "/openid/v1/jwks"}, auditinternal.LevelMetadata},
		{"other: SubjectAccessReview", []string{"system:serviceaccounts:rbacproxy"}, resource(other, "create", "authorization.k8s.io", "subjectaccessreviews"), auditinternal.LevelNone},
		{"other: get pods", []string{"system:serviceaccounts:rbacproxy"}, resource(other, "get", "", "pods"), auditinternal.LevelNone},
		{"other: resource.k8s.io", []string{"system:serviceaccounts:rbacproxy"}, resource(other, "create", "resource.k8s.io", "resourceslices"), auditinternal.LevelMetadata},
		{"no groups: SubjectAccessReview", nil, resource(listed, "create", "authorization.k8s.io", "subjectaccessreviews"), auditinternal.LevelNone},
		{"no groups: resource.k8s.io", nil, resource(listed, "get", "resource.k8s.io", "resourceclaims"), auditinternal.LevelMetadata},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.LoadPolicyFromBytes([]byte(cluster.AuditPolicy(tc.groups)))
			if err != nil {
				t.Fatalf("the API server does not load the policy: %v\n%s", err, cluster.AuditPolicy(tc.groups))
			}
			if got := policy.NewPolicyRuleEvaluator(p).EvaluatePolicyRule(tc.attrs).Level; got != tc.want {
				t.Errorf("level of %+v = %s; want %s", tc.attrs, got, tc.want)
			}
		})
	}
}
