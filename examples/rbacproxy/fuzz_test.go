package main

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"text/template"
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
