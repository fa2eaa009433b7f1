package authz_test

import (
	"context"
	"errors"
	"testing"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
)

func nonResource(u user.Info, verb, path string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{User: u, Verb: verb, Path: path}
}

func TestAlwaysAllowGroups(t *testing.T) {
	t.Parallel()
	az := authz.AlwaysAllowGroups("system:masters", "ops")
	tests := []struct {
		name string
		u    user.Info
		want authorizer.Decision
	}{
		{name: "member", u: &user.DefaultInfo{Name: "a", Groups: []string{"x", "ops"}}, want: authorizer.DecisionAllow},
		{name: "not a member", u: &user.DefaultInfo{Name: "system:masters", Groups: []string{"x"}}, want: authorizer.DecisionNoOpinion},
		{name: "no groups", u: &user.DefaultInfo{Name: "a"}, want: authorizer.DecisionNoOpinion},
		{name: "no user", u: nil, want: authorizer.DecisionNoOpinion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if d, _, err := az.Authorize(context.Background(), getPods(tt.u)); d != tt.want || err != nil {
				t.Errorf("Authorize() = %v, %v; want %v", d, err, tt.want)
			}
		})
	}
	if d, _, _ := authz.AlwaysAllowGroups().Authorize(context.Background(), getPods(backup())); d != authorizer.DecisionNoOpinion {
		t.Errorf("AlwaysAllowGroups() with no groups = %v; want NoOpinion", d)
	}
}

// TestStaticRulesNonResourceURLs: NonResourceURLs match as RBAC's
// nonResourceURLs and apiserver's always-allow paths do (exact, or a prefix
// with a trailing "*"), on clean paths only.
func TestStaticRulesNonResourceURLs(t *testing.T) {
	t.Parallel()
	az := mustStatic(t, authz.Rule{Groups: []string{"system:serviceaccounts"}, Verbs: []string{"*"},
		NonResourceURLs: []string{"/healthz", "/readyz", "/logs/*", "/metrics*"}})
	u := backup()
	tests := []struct {
		name  string
		attrs authorizer.Attributes
		want  authorizer.Decision
	}{
		{name: "exact", attrs: nonResource(u, "get", "/healthz"), want: authorizer.DecisionAllow},
		{name: "exact, with a trailing slash, is another path", attrs: nonResource(u, "get", "/healthz/"), want: authorizer.DecisionNoOpinion},
		{name: "exact, any verb", attrs: nonResource(u, "post", "/readyz"), want: authorizer.DecisionAllow},
		{name: "exact is not a prefix", attrs: nonResource(u, "get", "/healthz/etcd"), want: authorizer.DecisionNoOpinion},
		{name: "dot-dot out of an allowed path", attrs: nonResource(u, "get", "/healthz/../secret"), want: authorizer.DecisionNoOpinion},
		{name: "dot-dot into an allowed path is not clean", attrs: nonResource(u, "get", "/x/../healthz"), want: authorizer.DecisionNoOpinion},
		{name: "double slash is not clean", attrs: nonResource(u, "get", "//healthz"), want: authorizer.DecisionNoOpinion},
		{name: "prefix with slash", attrs: nonResource(u, "get", "/logs/kubelet.log"), want: authorizer.DecisionAllow},
		{name: "prefix with slash excludes the directory", attrs: nonResource(u, "get", "/logs"), want: authorizer.DecisionNoOpinion},
		{name: "prefix with slash, dot-dot out", attrs: nonResource(u, "get", "/logs/../etc/passwd"), want: authorizer.DecisionNoOpinion},
		{name: "prefix with slash, escaped", attrs: nonResource(u, "get", "/logs/%2e%2e/etc/passwd"), want: authorizer.DecisionNoOpinion},
		{name: "prefix without slash", attrs: nonResource(u, "get", "/metrics"), want: authorizer.DecisionAllow},
		{name: "prefix without slash, longer", attrs: nonResource(u, "get", "/metrics/cadvisor"), want: authorizer.DecisionAllow},
		{name: "other path", attrs: nonResource(u, "get", "/configz"), want: authorizer.DecisionNoOpinion},
		{name: "empty path", attrs: nonResource(u, "get", ""), want: authorizer.DecisionNoOpinion},
		{name: "relative path", attrs: nonResource(u, "get", "healthz"), want: authorizer.DecisionNoOpinion},
		{name: "resource request with an allowed path", attrs: authorizer.AttributesRecord{User: u, Verb: "get", Path: "/healthz", Resource: "pods", ResourceRequest: true}, want: authorizer.DecisionNoOpinion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if d, _, err := az.Authorize(context.Background(), tt.attrs); d != tt.want || err != nil {
				t.Errorf("Authorize(%s %q) = %v, %v; want %v", tt.attrs.GetVerb(), tt.attrs.GetPath(), d, err, tt.want)
			}
		})
	}
}

func TestStaticRulesNonResourceURLsInvalid(t *testing.T) {
	t.Parallel()
	rule := func(p string) authz.Rule {
		return authz.Rule{Users: []string{"a"}, Verbs: []string{"get"}, NonResourceURLs: []string{"/ok", p}}
	}
	for _, p := range []string{"", "healthz", "/a*b", "/*/x", "/a/../b", "/a//b", "/a/./b*", "/a%2fb"} {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			if _, err := authz.StaticRules(rule(p)); err == nil {
				t.Errorf("StaticRules(NonResourceURLs %q) = nil error; want an error", p)
			}
		})
	}
	for _, p := range []string{"/", "*", "/*", "/a/*", "/a*", "/a/b", "/a/"} {
		if _, err := authz.StaticRules(rule(p)); err != nil {
			t.Errorf("StaticRules(NonResourceURLs %q) = %v; want nil", p, err)
		}
	}
}

func TestStaticRules(t *testing.T) {
	t.Parallel()
	az, err := authz.StaticRules(
		authz.Rule{Groups: []string{"prometheus"}, Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}},
		authz.Rule{Users: []string{"alice"}, Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"pods"}, Namespaces: []string{"team-a"}},
		authz.Rule{Groups: []string{"backup"}, Verbs: []string{"*"}, APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots"}, Subresources: []string{"status"}, Names: []string{"s1"}},
	)
	if err != nil {
		t.Fatalf("StaticRules() = %v", err)
	}
	prom := &user.DefaultInfo{Name: "prom", Groups: []string{"prometheus"}}
	alice := &user.DefaultInfo{Name: "alice"}
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{"backup"}}
	res := func(u user.Info, verb, group, resource, sub, ns, name string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, Resource: resource, Subresource: sub, Namespace: ns, Name: name, ResourceRequest: true}
	}
	tests := []struct {
		name  string
		attrs authorizer.Attributes
		want  authorizer.Decision
	}{
		{name: "group matches non-resource", attrs: nonResource(prom, "get", "/metrics"), want: authorizer.DecisionAllow},
		{name: "group, wrong verb", attrs: nonResource(prom, "post", "/metrics"), want: authorizer.DecisionNoOpinion},
		{name: "group, wrong path", attrs: nonResource(prom, "get", "/metricsx"), want: authorizer.DecisionNoOpinion},
		{name: "user named like the group does not match", attrs: nonResource(&user.DefaultInfo{Name: "prometheus"}, "get", "/metrics"), want: authorizer.DecisionNoOpinion},
		{name: "user matches resource", attrs: res(alice, "list", "", "pods", "", "team-a", ""), want: authorizer.DecisionAllow},
		{name: "user, other namespace", attrs: res(alice, "list", "", "pods", "", "team-b", ""), want: authorizer.DecisionNoOpinion},
		{name: "user, subresource not listed", attrs: res(alice, "get", "", "pods", "log", "team-a", "p"), want: authorizer.DecisionNoOpinion},
		{name: "user, other group", attrs: res(alice, "get", "apps", "pods", "", "team-a", "p"), want: authorizer.DecisionNoOpinion},
		{name: "user, resource rule does not cover non-resource", attrs: nonResource(alice, "get", "/metrics"), want: authorizer.DecisionNoOpinion},
		{name: "group, subresource and name", attrs: res(bob, "update", "snapshot.storage.k8s.io", "volumesnapshots", "status", "any", "s1"), want: authorizer.DecisionAllow},
		{name: "group, other name", attrs: res(bob, "update", "snapshot.storage.k8s.io", "volumesnapshots", "status", "any", "s2"), want: authorizer.DecisionNoOpinion},
		{name: "group, no subresource", attrs: res(bob, "update", "snapshot.storage.k8s.io", "volumesnapshots", "", "any", "s1"), want: authorizer.DecisionNoOpinion},
		{name: "no user", attrs: nonResource(nil, "get", "/metrics"), want: authorizer.DecisionNoOpinion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if d, _, err := az.Authorize(context.Background(), tt.attrs); d != tt.want || err != nil {
				t.Errorf("Authorize() = %v, %v; want %v", d, err, tt.want)
			}
		})
	}
	if _, err := authz.StaticRules(authz.Rule{Users: []string{"a"}, Verbs: []string{"get"}, NonResourceURLs: []string{"/a*b"}}); err == nil {
		t.Error("StaticRules(bad NonResourceURLs) = nil error; want an error")
	}
	if d, _, _ := mustStatic(t, authz.Rule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}).Authorize(context.Background(), getPods(backup())); d != authorizer.DecisionNoOpinion {
		t.Errorf("rule without users or groups = %v; want NoOpinion (matches no one)", d)
	}
}

func mustStatic(t *testing.T, rules ...authz.Rule) authorizer.Authorizer {
	t.Helper()
	az, err := authz.StaticRules(rules...)
	if err != nil {
		t.Fatal(err)
	}
	return az
}

func TestNodeLocal(t *testing.T) {
	t.Parallel()
	const uid = "1d2e3f40-0000-4000-8000-000000000002"
	withExtra := func(extra map[string][]string) user.Info {
		return &user.DefaultInfo{Name: "system:serviceaccount:dra:plugin", Extra: extra}
	}
	tests := []struct {
		name string
		opts authz.NodeLocalOptions
		u    user.Info
		want authorizer.Decision
	}{
		{name: "same node", opts: authz.NodeLocalOptions{NodeName: "node-a"}, u: backup(), want: authorizer.DecisionAllow},
		{name: "same node and uid", opts: authz.NodeLocalOptions{NodeName: "node-a", NodeUID: uid}, u: backup(), want: authorizer.DecisionAllow},
		{name: "same node, other uid", opts: authz.NodeLocalOptions{NodeName: "node-a", NodeUID: "other"}, u: backup(), want: authorizer.DecisionDeny},
		{name: "same node, no uid", opts: authz.NodeLocalOptions{NodeName: "node-a", NodeUID: uid}, u: withExtra(map[string][]string{"authentication.kubernetes.io/node-name": {"node-a"}}), want: authorizer.DecisionDeny},
		{name: "other node", opts: authz.NodeLocalOptions{NodeName: "node-b"}, u: backup(), want: authorizer.DecisionDeny},
		{name: "no node binding", opts: authz.NodeLocalOptions{NodeName: "node-a"}, u: withExtra(nil), want: authorizer.DecisionDeny},
		{name: "two node names", opts: authz.NodeLocalOptions{NodeName: "node-a"}, u: withExtra(map[string][]string{"authentication.kubernetes.io/node-name": {"node-a", "node-b"}}), want: authorizer.DecisionDeny},
		{name: "empty node name extra", opts: authz.NodeLocalOptions{NodeName: "node-a"}, u: withExtra(map[string][]string{"authentication.kubernetes.io/node-name": {""}}), want: authorizer.DecisionDeny},
		{name: "no user", opts: authz.NodeLocalOptions{NodeName: "node-a"}, u: nil, want: authorizer.DecisionDeny},
		{name: "unconfigured", opts: authz.NodeLocalOptions{}, u: withExtra(map[string][]string{"authentication.kubernetes.io/node-name": {""}}), want: authorizer.DecisionDeny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, reason, err := authz.NodeLocal(tt.opts).Authorize(context.Background(), getPods(tt.u))
			if d != tt.want || err != nil {
				t.Errorf("Authorize() = %v, %q, %v; want %v", d, reason, err, tt.want)
			}
			if d == authorizer.DecisionDeny && reason == "" {
				t.Error("Authorize() denied without a reason")
			}
		})
	}
}

// fixed is an authorizer with a fixed answer that counts its calls.
type fixed struct {
	d     authorizer.Decision
	err   error
	calls int
}

func (f *fixed) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	f.calls++
	return f.d, f.d.String(), f.err
}

func TestAll(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name      string
		chain     []*fixed
		want      authorizer.Decision
		wantErr   bool
		wantCalls []int
	}{
		{name: "all allow", chain: []*fixed{{d: authorizer.DecisionAllow}, {d: authorizer.DecisionAllow}}, want: authorizer.DecisionAllow, wantCalls: []int{1, 1}},
		{name: "deny stops", chain: []*fixed{{d: authorizer.DecisionAllow}, {d: authorizer.DecisionDeny}, {d: authorizer.DecisionAllow}}, want: authorizer.DecisionDeny, wantCalls: []int{1, 1, 0}},
		{name: "no opinion is deny", chain: []*fixed{{d: authorizer.DecisionNoOpinion}, {d: authorizer.DecisionAllow}}, want: authorizer.DecisionDeny, wantCalls: []int{1, 0}},
		{name: "allow with error is deny", chain: []*fixed{{d: authorizer.DecisionAllow, err: boom}, {d: authorizer.DecisionAllow}}, want: authorizer.DecisionDeny, wantErr: true, wantCalls: []int{1, 0}},
		{name: "unknown decision is deny", chain: []*fixed{{d: authorizer.Decision(7)}}, want: authorizer.DecisionDeny, wantCalls: []int{1}},
		{name: "empty denies", want: authorizer.DecisionDeny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var chain []authorizer.UnconditionalAuthorizer
			for _, f := range tt.chain {
				chain = append(chain, f)
			}
			d, _, err := authz.All(chain...).Authorize(context.Background(), getPods(backup()))
			if d != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("All().Authorize() = %v, %v; want %v, error %v", d, err, tt.want, tt.wantErr)
			}
			for i, f := range tt.chain {
				if f.calls != tt.wantCalls[i] {
					t.Errorf("authorizer #%d called %d times; want %d", i, f.calls, tt.wantCalls[i])
				}
			}
		})
	}
}

func TestFirst(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name      string
		chain     []*fixed
		want      authorizer.Decision
		wantErr   bool
		wantCalls []int
	}{
		{name: "first allow wins", chain: []*fixed{{d: authorizer.DecisionNoOpinion}, {d: authorizer.DecisionAllow}, {d: authorizer.DecisionDeny}}, want: authorizer.DecisionAllow, wantCalls: []int{1, 1, 0}},
		{name: "first deny wins", chain: []*fixed{{d: authorizer.DecisionDeny}, {d: authorizer.DecisionAllow}}, want: authorizer.DecisionDeny, wantCalls: []int{1, 0}},
		{name: "all no opinion", chain: []*fixed{{d: authorizer.DecisionNoOpinion}, {d: authorizer.DecisionNoOpinion}}, want: authorizer.DecisionNoOpinion, wantCalls: []int{1, 1}},
		{name: "error stops and denies", chain: []*fixed{{d: authorizer.DecisionNoOpinion, err: boom}, {d: authorizer.DecisionAllow}}, want: authorizer.DecisionDeny, wantErr: true, wantCalls: []int{1, 0}},
		{name: "allow with error denies", chain: []*fixed{{d: authorizer.DecisionAllow, err: boom}}, want: authorizer.DecisionDeny, wantErr: true, wantCalls: []int{1}},
		{name: "unknown decision is deny", chain: []*fixed{{d: authorizer.Decision(7)}, {d: authorizer.DecisionAllow}}, want: authorizer.DecisionDeny, wantCalls: []int{1, 0}},
		{name: "empty has no opinion", want: authorizer.DecisionNoOpinion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var chain []authorizer.UnconditionalAuthorizer
			for _, f := range tt.chain {
				chain = append(chain, f)
			}
			d, _, err := authz.First(chain...).Authorize(context.Background(), getPods(backup()))
			if d != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("First().Authorize() = %v, %v; want %v, error %v", d, err, tt.want, tt.wantErr)
			}
			for i, f := range tt.chain {
				if f.calls != tt.wantCalls[i] {
					t.Errorf("authorizer #%d called %d times; want %d", i, f.calls, tt.wantCalls[i])
				}
			}
		})
	}
}

// TestLocalRulesBeforeSAR composes every local rule with the SAR authorizer
// against authtest and checks which requests reach the API server.
func TestLocalRulesBeforeSAR(t *testing.T) {
	t.Parallel()
	static := mustStatic(t, authz.Rule{Groups: []string{"prometheus"}, Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}})
	prom := &user.DefaultInfo{Name: "prom", Groups: []string{"prometheus"}}
	remote := backup()
	remote.Extra["authentication.kubernetes.io/node-name"] = []string{"node-b"}
	tests := []struct {
		name     string
		local    func(sar authorizer.Authorizer) authorizer.Authorizer
		attrs    authorizer.Attributes
		want     error // nil, ErrDenied
		wantSARs int
	}{
		{name: "always-allow group skips the SAR", local: func(sar authorizer.Authorizer) authorizer.Authorizer {
			return authz.First(authz.AlwaysAllowGroups("system:masters"), sar)
		}, attrs: getPods(&user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}), wantSARs: 0},
		{name: "other groups reach the SAR", local: func(sar authorizer.Authorizer) authorizer.Authorizer {
			return authz.First(authz.AlwaysAllowGroups("system:masters"), sar)
		}, attrs: getPods(&user.DefaultInfo{Name: "eve", Groups: []string{"x"}}), want: reviewauth.ErrDenied, wantSARs: 1},
		{name: "static rule skips the SAR", local: func(sar authorizer.Authorizer) authorizer.Authorizer {
			return authz.First(static, sar)
		}, attrs: nonResource(prom, "get", "/metrics"), wantSARs: 0},
		{name: "node-local caller reaches the SAR and is allowed", local: func(sar authorizer.Authorizer) authorizer.Authorizer {
			return authz.All(authz.NodeLocal(authz.NodeLocalOptions{NodeName: "node-a"}), sar)
		}, attrs: getPods(backup()), wantSARs: 1},
		{name: "remote caller is denied without a SAR", local: func(sar authorizer.Authorizer) authorizer.Authorizer {
			return authz.All(authz.NodeLocal(authz.NodeLocalOptions{NodeName: "node-a"}), sar)
		}, attrs: getPods(remote), want: reviewauth.ErrDenied, wantSARs: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, allowBackupPods, authz.Options{})
			err := authz.Check(context.Background(), tt.local(f.az), tt.attrs)
			if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Errorf("Check() = %v; want %v", err, tt.want)
			}
			if got := f.srv.Count(authtest.SubjectAccessReviews); got != tt.wantSARs {
				t.Errorf("SARs = %d; want %d", got, tt.wantSARs)
			}
		})
	}
}

// TestNodeExtraKeysAreAPIServers: the extra keys NodeLocal and NodeScope
// read, and the credential-id key, are k8s.io/apiserver's.
func TestNodeExtraKeysAreAPIServers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ ours, theirs string }{
		{authz.NodeNameKey, serviceaccount.NodeNameKey},
		{authz.NodeUIDKey, serviceaccount.NodeUIDKey},
		{authz.CredentialIDExtra, user.CredentialIDKey},
	} {
		if tt.ours != tt.theirs {
			t.Errorf("extra key %q; want apiserver's %q", tt.ours, tt.theirs)
		}
	}
}
