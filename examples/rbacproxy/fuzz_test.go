package main

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"text/template"

	"github.com/reviewauth/reviewauth/examples/internal/difftest"
)

// FuzzParseConfig: any input either fails to parse or gives a config whose
// mapper maps requests without panicking, and never to zero attribute
// sets without an error.
func FuzzParseConfig(f *testing.F) {
	for _, raw := range krpConfigs {
		f.Add(raw, "/metrics?namespace=a", "t")
	}
	f.Add("authorization:\n  resourceAttributes:\n    resource: '{{.Value}}{{.Value}}'\n  rewrites:\n    byHttpHeader: {name: X-A}\n", "/", "v")
	f.Fuzz(func(t *testing.T, raw, target, header string) {
		cfg, _, err := parseConfig([]byte(raw))
		if err != nil {
			return
		}
		m, err := newMapper(cfg)
		if err != nil {
			t.Fatalf("newMapper() of a config that parsed: %v", err)
		}
		if !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \r\n\t#") {
			target = "/"
		}
		if _, err := url.ParseRequestURI(target); err != nil {
			target = "/" // net/http answers 400 before any handler; httptest.NewRequest panics
		}
		r := httptest.NewRequest("GET", "http://proxy"+target, nil)
		r.Header.Set("X-A", header)
		attrs, err := m.Attributes(r, alice)
		if err == nil && len(attrs) == 0 {
			t.Fatal("no attributes and no error")
		}
		if len(attrs) > MaxRewriteValues {
			t.Fatalf("%d attribute sets; want at most %d", len(attrs), MaxRewriteValues)
		}
		for _, a := range attrs {
			if a.GetUser() != alice {
				t.Fatal("attributes without the user")
			}
		}
		_ = staticAuthorizer(cfg.Static)
	})
}

// FuzzTemplate: the fast path of simple templates agrees with text/template.
func FuzzTemplate(f *testing.F) {
	f.Add("{{.Value}}", "ns")
	f.Add("a{{ .Value }}b{{.Value}}", "x")
	f.Fuzz(func(t *testing.T, tmpl, value string) {
		vt, err := newTemplate(tmpl)
		if err != nil {
			return
		}
		ref, err := template.New("value").Option("missingkey=error").Parse(tmpl)
		if err != nil {
			t.Fatalf("newTemplate accepted %q, text/template did not: %v", tmpl, err)
		}
		var want strings.Builder
		refErr := ref.Execute(&want, struct{ Value string }{value})
		got, err := vt.execute(value)
		if (err == nil) != (refErr == nil) || (err == nil && got != want.String()) {
			t.Fatalf("template %q with %q = %q, %v; text/template: %q, %v", tmpl, value, got, err, want.String(), refErr)
		}
	})
}

// FuzzForwardedIsAuthorized is TestForwardedIsAuthorized with fuzzed
// requests (any method, target and header lines, with the scraper's token
// unless they carry an Authorization of their own) through rbacproxy with
// kube-rbac-proxy's rewrites by query parameter and header and custom
// --auth-header-* fields, over HTTP/1.1: whatever reaches the upstream
// says what was authorized.
func FuzzForwardedIsAuthorized(f *testing.F) {
	e := newDiffEnv(f, diffConfigs[2])
	h1, _, closeIdle := difftest.Clients()
	f.Cleanup(closeIdle)
	p := e.checker(h1)
	f.Add("GET", "/metrics?namespace=team-a", "X-Namespace: team-b\nConnection: X-Namespace, X-Forwarded-User")
	f.Add("GET", "/metrics", "X_Namespace: team-a\nx_forwarded_user: system:admin\nX-Remote-User: system:admin")
	f.Add("HEAD", "/metrics?namespace=team-a&namespace=team-b", "x-namespace: team-b\nX-NAMESPACE: team-a\nConnection: keep-alive, x_forwarded_groups")
	f.Add("POST", "//metrics/../metrics?namespace=%74eam-a", "X-Namespace: kube-system")
	f.Fuzz(func(t *testing.T, method, target, headers string) {
		r, ok := difftest.FuzzRequest(method, target, headers, "Bearer "+e.scraper)
		if !ok {
			t.Skip()
		}
		if err := difftest.CheckOne(p, r); err != nil {
			t.Fatal(err)
		}
	})
}
