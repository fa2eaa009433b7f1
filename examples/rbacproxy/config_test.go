package main

import (
	"net/http/httptest"
	"strings"
	"testing"
	"text/template"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// krpConfigs are configuration files in kube-rbac-proxy v0.21's format,
// as its examples and end-to-end tests write them (examples/rewrites,
// examples/static-auth, examples/resource-attributes,
// test/e2e/static_authorizer.go).
var krpConfigs = map[string]string{
	"resource-attributes": `
authorization:
  resourceAttributes:
    namespace: default
    apiVersion: v1
    resource: services
    subresource: proxy
    name: kube-rbac-proxy
`,
	"rewrites": `
authorization:
  rewrites:
    byQueryParameter:
      name: "namespace"
  resourceAttributes:
    apiVersion: v1
    resource: namespace
    subresource: metrics
    namespace: "{{ .Value }}"
`,
	"static-auth": `
authorization:
  rewrites:
    byQueryParameter:
      name: "namespace"
  resourceAttributes:
    apiVersion: v1
    resource: namespace
    subresource: metrics
    namespace: "{{ .Value }}"
  static:
    - resourceRequest: true
      resource: namespace
      subresource: metrics
`,
	"e2e static resource": `
authorization:
  rewrites:
    byQueryParameter:
      name: "namespace"
  resourceAttributes:
    resource: namespaces
    subresource: metrics
    namespace: "{{ .Value }}"
  static:
    - user:
        name: system:serviceaccount:default:default
      resourceRequest: true
      resource: namespaces
      subresource: metrics
      namespace: default
      verb: get
`,
	"e2e static non-resource": `
authorization:
  static:
    - user:
        name: system:serviceaccount:default:default
      resourceRequest: false
      verb: get
      path: /metrics
`,
	"header rewrite, JSON, other case": `{"Authorization": {"Rewrites": {"ByHTTPHeader": {"Name": "X-Tenant"}},
  "ResourceAttributes": {"Resource": "namespaces", "Subresource": "metrics", "Namespace": "{{.Value}}"}}}`,
	"empty":                   ``,
	"no authorization":        `authorization: {}`,
	"rewrites without target": "authorization:\n  rewrites:\n    byQueryParameter:\n      name: ns\n",
}

// TestKubeRBACProxyConfigsLoad (issue #12): kube-rbac-proxy's files load
// unchanged.
func TestKubeRBACProxyConfigsLoad(t *testing.T) {
	t.Parallel()
	for name, raw := range krpConfigs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, warnings, err := parseConfig([]byte(raw))
			if err != nil {
				t.Fatalf("parseConfig() = %v", err)
			}
			if _, err := newMapper(cfg); err != nil {
				t.Fatalf("newMapper() = %v", err)
			}
			if name == "rewrites without target" && len(warnings) != 1 {
				t.Errorf("warnings = %q; want one saying the rewrites are ignored", warnings)
			}
		})
	}
}

// TestConfigErrors: a field the format does not have is an error naming
// it; so are static rules kube-rbac-proxy refuses, and templates that
// cannot run.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, raw, want string }{
		{"unknown top-level field", "authorisation: {}", `unknown field "authorisation"`},
		{"unknown nested field", "authorization:\n  resourceAttributes:\n    namespce: x\n    resource: pods\n", `unknown field "namespce"`},
		{"unknown static field", "authorization:\n  static:\n    - user: {name: a, group: b}\n      path: /x\n", `unknown field "group"`},
		{"duplicate key", "authorization:\n  static: []\n  static: []\n", `already set`},
		{"static path with resourceRequest", "authorization:\n  static:\n    - resourceRequest: true\n      path: /metrics\n", "authorization.static[0]"},
		{"static without path or resourceRequest", "authorization:\n  static:\n    - verb: get\n", "authorization.static[0]"},
		{"static path not clean", "authorization:\n  static:\n    - path: /a//b\n", "clean absolute path"},
		{"template syntax", "authorization:\n  resourceAttributes:\n    resource: pods\n    namespace: '{{ .Value'\n", "resourceAttributes.namespace"},
		{"template field", "authorization:\n  resourceAttributes:\n    resource: pods\n    namespace: '{{ .Other }}'\n", "resourceAttributes.namespace"},
		// A field that is missing whatever the value, even on a branch the
		// check with a sample value does not take: refused at start, not
		// 400 on some requests.
		{"template field on a branch", "authorization:\n  resourceAttributes:\n    resource: pods\n    namespace: '{{ if eq .Value \"x\" }}{{ .Other }}{{ end }}'\n", "the only field is .Value"},
		{"template field of the value", "authorization:\n  resourceAttributes:\n    resource: pods\n    name: '{{ with .Value }}{{ .Len }}{{ end }}'\n", "the only field is .Value"},
		{"template field through $", "authorization:\n  resourceAttributes:\n    resource: pods\n    name: '{{ range $i, $v := .Value }}{{ $.Other }}{{ end }}'\n", "the only field is .Value"},
		{"template chain", "authorization:\n  resourceAttributes:\n    resource: pods\n    name: '{{ (.Value).X }}'\n", "the only field is .Value"},
		{"template variable field", "authorization:\n  resourceAttributes:\n    resource: pods\n    name: '{{ $v := .Value }}{{ $v.X }}'\n", "the only field is .Value"},
		{"not YAML", "authorization: [", "error converting YAML"},
		{"too large", strings.Repeat("#", maxConfigBytes+1), "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := parseConfig([]byte(tt.raw))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("parseConfig() = %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

var alice = &user.DefaultInfo{Name: "alice", Groups: []string{"monitoring", "system:authenticated"}}

func attrsFor(t *testing.T, raw, method, target string, header map[string][]string) ([]authorizer.Attributes, error) {
	t.Helper()
	cfg, _, err := parseConfig([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMapper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		r.Header[k] = v
	}
	return m.Attributes(r, alice)
}

// TestMapper: the attribute sets of kube-rbac-proxy for each kind of
// configuration, with its verbs.
func TestMapper(t *testing.T) {
	t.Parallel()
	rec := func(a authorizer.AttributesRecord) authorizer.Attributes {
		a.User = alice
		return &a
	}
	headerCfg := "authorization:\n  rewrites:\n    byHttpHeader:\n      name: x-tenant\n  resourceAttributes:\n    resource: namespaces\n    subresource: metrics\n    namespace: '{{.Value}}'\n    name: 'ns-{{ .Value }}-x'\n"
	tests := []struct {
		name, cfg, method, target string
		header                    map[string][]string
		want                      []authorizer.Attributes
		wantErr                   string
	}{
		{name: "non-resource GET", method: "GET", target: "/metrics",
			want: []authorizer.Attributes{rec(authorizer.AttributesRecord{Verb: "get", Path: "/metrics"})}},
		{name: "non-resource HEAD is get", method: "HEAD", target: "/metrics",
			want: []authorizer.Attributes{rec(authorizer.AttributesRecord{Verb: "get", Path: "/metrics"})}},
		{name: "non-resource POST is create, as in kube-rbac-proxy", method: "POST", target: "/api/v1/write",
			want: []authorizer.Attributes{rec(authorizer.AttributesRecord{Verb: "create", Path: "/api/v1/write"})}},
		{name: "PUT PATCH DELETE", method: "DELETE", target: "/x",
			want: []authorizer.Attributes{rec(authorizer.AttributesRecord{Verb: "delete", Path: "/x"})}},
		{name: "OPTIONS has no verb", method: "OPTIONS", target: "/x", wantErr: "method not allowed"},
		{name: "resource attributes", cfg: krpConfigs["resource-attributes"], method: "GET", target: "/metrics",
			want: []authorizer.Attributes{rec(authorizer.AttributesRecord{Verb: "get", Namespace: "default", APIVersion: "v1",
				Resource: "services", Subresource: "proxy", Name: "kube-rbac-proxy", ResourceRequest: true})}},
		{name: "query rewrite", cfg: krpConfigs["rewrites"], method: "GET", target: "/metrics?namespace=team-a",
			want: []authorizer.Attributes{rec(authorizer.AttributesRecord{Verb: "get", Namespace: "team-a", APIVersion: "v1",
				Resource: "namespace", Subresource: "metrics", ResourceRequest: true})}},
		{name: "query rewrite, two values, one review each", cfg: krpConfigs["rewrites"], method: "GET", target: "/metrics?namespace=b&namespace=a&namespace=b",
			want: []authorizer.Attributes{
				rec(authorizer.AttributesRecord{Verb: "get", Namespace: "a", APIVersion: "v1", Resource: "namespace", Subresource: "metrics", ResourceRequest: true}),
				rec(authorizer.AttributesRecord{Verb: "get", Namespace: "b", APIVersion: "v1", Resource: "namespace", Subresource: "metrics", ResourceRequest: true}),
			}},
		{name: "query rewrite without the parameter", cfg: krpConfigs["rewrites"], method: "GET", target: "/metrics", wantErr: "no query parameter namespace"},
		{name: "query rewrite, semicolon is not a separator", cfg: krpConfigs["rewrites"], method: "GET", target: "/metrics?namespace=a;namespace=b", wantErr: "no query parameter"},
		{name: "template that fails for this value only: 400", cfg: "authorization:\n  rewrites:\n    byQueryParameter:\n      name: ns\n  resourceAttributes:\n    resource: pods\n    namespace: '{{ if eq .Value \"kube-system\" }}{{ index .Value 99 }}{{ else }}{{ .Value }}{{ end }}'\n",
			method: "GET", target: "/metrics?ns=kube-system", wantErr: "resourceAttributes.namespace"},
		{name: "header rewrite, values of two header lines", cfg: headerCfg, method: "POST", target: "/", header: map[string][]string{"X-Tenant": {"t1", "t2"}},
			want: []authorizer.Attributes{
				rec(authorizer.AttributesRecord{Verb: "create", Namespace: "t1", Resource: "namespaces", Subresource: "metrics", Name: "ns-t1-x", ResourceRequest: true}),
				rec(authorizer.AttributesRecord{Verb: "create", Namespace: "t2", Resource: "namespaces", Subresource: "metrics", Name: "ns-t2-x", ResourceRequest: true}),
			}},
	}
	// MaxRewriteValues distinct values: at the limit.
	var at []string
	for i := range MaxRewriteValues {
		at = append(at, "namespace=n"+string(rune('a'+i)))
	}
	if _, err := attrsFor(t, krpConfigs["rewrites"], "GET", "/m?"+strings.Join(at, "&"), nil); err != nil {
		t.Errorf("%d rewrite values: %v; want allowed", MaxRewriteValues, err)
	}
	if _, err := attrsFor(t, krpConfigs["rewrites"], "GET", "/m?"+strings.Join(at, "&")+"&namespace=zz", nil); err == nil {
		t.Errorf("%d rewrite values: nil error; want refused", MaxRewriteValues+1)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := attrsFor(t, tt.cfg, tt.method, tt.target, tt.header)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Attributes() = %v, %v; want error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Attributes() (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStaticRules: kube-rbac-proxy's static rules, where an empty field
// matches anything, with user.groups honoured (kube-rbac-proxy #333
// ignores them, allowing everyone named by the rest of the rule).
func TestStaticRules(t *testing.T) {
	t.Parallel()
	rules := staticAuthorizer{
		{User: staticUser{Name: "alice"}, Verb: "get", Path: "/metrics"},
		{User: staticUser{Groups: []string{"monitoring"}}, ResourceRequest: true, Resource: "namespaces", Subresource: "metrics"},
		{User: staticUser{Name: "bob", Groups: []string{"admins"}}, Path: "/admin"},
	}
	tests := []struct {
		name string
		a    authorizer.AttributesRecord
		want authorizer.Decision
	}{
		{"user and path", authorizer.AttributesRecord{User: alice, Verb: "get", Path: "/metrics"}, authorizer.DecisionAllow},
		{"other verb", authorizer.AttributesRecord{User: alice, Verb: "create", Path: "/metrics"}, authorizer.DecisionNoOpinion},
		{"path is exact", authorizer.AttributesRecord{User: alice, Verb: "get", Path: "/metrics/x"}, authorizer.DecisionNoOpinion},
		{"other user", authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "eve"}, Verb: "get", Path: "/metrics"}, authorizer.DecisionNoOpinion},
		{"group, any namespace and verb", authorizer.AttributesRecord{User: alice, Verb: "create", Namespace: "x", Resource: "namespaces", Subresource: "metrics", ResourceRequest: true}, authorizer.DecisionAllow},
		{"not in the group", authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "eve", Groups: []string{"other"}}, Verb: "get", Resource: "namespaces", Subresource: "metrics", ResourceRequest: true}, authorizer.DecisionNoOpinion},
		{"resource rule does not match non-resource", authorizer.AttributesRecord{User: alice, Verb: "get", Path: "/namespaces"}, authorizer.DecisionNoOpinion},
		{"name and groups: both needed", authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "bob"}, Verb: "get", Path: "/admin"}, authorizer.DecisionNoOpinion},
		{"name and groups: both there", authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "bob", Groups: []string{"admins"}}, Verb: "get", Path: "/admin"}, authorizer.DecisionAllow},
		{"no user", authorizer.AttributesRecord{Verb: "get", Path: "/metrics"}, authorizer.DecisionNoOpinion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, _, err := rules.Authorize(t.Context(), &tt.a)
			if err != nil || d != tt.want {
				t.Errorf("Authorize() = %v, %v; want %v", d, err, tt.want)
			}
		})
	}
}

// TestTemplateFastPath: templates that are text and {{.Value}} give what
// text/template gives.
func TestTemplateFastPath(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "x", "{{.Value}}", "{{ .Value }}", "a-{{.Value}}-b-{{ .Value }}", "{{- .Value -}}", "{{.Value | printf \"%q\"}}", "{{if .Value}}y{{end}}"} {
		vt, err := newTemplate(s)
		if err != nil {
			t.Fatalf("newTemplate(%q): %v", s, err)
		}
		ref := template.Must(template.New("").Parse(s))
		for _, v := range []string{"", "ns", "{{.Value}}", "a b"} {
			var want strings.Builder
			_ = ref.Execute(&want, struct{ Value string }{v})
			got, err := vt.execute(v)
			if err != nil || got != want.String() {
				t.Errorf("template %q with %q = %q, %v; want %q", s, v, got, err, want.String())
			}
		}
	}
}
