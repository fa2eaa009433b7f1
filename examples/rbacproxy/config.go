package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"os"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/yaml"

	"github.com/reviewauth/reviewauth/httpauth"
)

// The --config-file format is kube-rbac-proxy's (v0.21,
// pkg/authz/auth.go and cmd/kube-rbac-proxy/app): a YAML (or JSON) document
// with one top-level key, authorization. Its field names are matched as
// kube-rbac-proxy matches them (encoding/json: case-insensitively), so its
// files load unchanged; unlike kube-rbac-proxy, a field this format does
// not have is an error that names it, rather than silently ignored.

// configFile is the document.
type configFile struct {
	Authorization *authorizationConfig `json:"authorization,omitempty"`
}

// authorizationConfig says which SubjectAccessReviews a request needs.
type authorizationConfig struct {
	// Rewrites take the values of a query parameter or header and put
	// each into ResourceAttributes' templates: one SubjectAccessReview per
	// value, all must allow.
	Rewrites *rewritesConfig `json:"rewrites,omitempty"`
	// ResourceAttributes, when set, make every request a resource
	// request with these attributes (and the verb of its method); when
	// not, every request is a non-resource request for its path.
	ResourceAttributes *resourceAttributes `json:"resourceAttributes,omitempty"`
	// Static rules allow matching requests without a review.
	Static []staticRule `json:"static,omitempty"`
}

type rewritesConfig struct {
	ByQueryParameter *rewriteSource `json:"byQueryParameter,omitempty"`
	ByHTTPHeader     *rewriteSource `json:"byHttpHeader,omitempty"`
}

type rewriteSource struct {
	Name string `json:"name,omitempty"`
}

type resourceAttributes struct {
	Namespace   string `json:"namespace,omitempty"`
	APIGroup    string `json:"apiGroup,omitempty"`
	APIVersion  string `json:"apiVersion,omitempty"`
	Resource    string `json:"resource,omitempty"`
	Subresource string `json:"subresource,omitempty"`
	Name        string `json:"name,omitempty"`
}

// staticRule is kube-rbac-proxy's StaticAuthorizationConfig: every field
// left empty matches anything; a rule is either for resource requests
// (resourceRequest: true, no path) or for one path.
type staticRule struct {
	User            staticUser `json:"user"`
	Verb            string     `json:"verb,omitempty"`
	Namespace       string     `json:"namespace,omitempty"`
	APIGroup        string     `json:"apiGroup,omitempty"`
	Resource        string     `json:"resource,omitempty"`
	Subresource     string     `json:"subresource,omitempty"`
	Name            string     `json:"name,omitempty"`
	ResourceRequest bool       `json:"resourceRequest,omitempty"`
	Path            string     `json:"path,omitempty"`
}

type staticUser struct {
	Name   string   `json:"name,omitempty"`
	Groups []string `json:"groups,omitempty"`
}

// maxConfigBytes bounds the config file: a real one is a few hundred bytes.
const maxConfigBytes = 1 << 20

// loadConfig reads and checks the config file at path.
func loadConfig(path string) (*authorizationConfig, []string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--config-file: %w", err)
	}
	cfg, warnings, err := parseConfig(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("--config-file %s: %w", path, err)
	}
	return cfg, warnings, nil
}

// parseConfig parses and checks a config file's content. A missing or
// empty authorization section is the default: non-resource reviews by path.
// Warnings are what the file asks for that kube-rbac-proxy ignores, which
// is ignored here too.
func parseConfig(raw []byte) (cfg *authorizationConfig, warnings []string, err error) {
	if len(raw) > maxConfigBytes {
		return nil, nil, fmt.Errorf("larger than %d bytes", maxConfigBytes)
	}
	var f configFile
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		return nil, nil, err
	}
	cfg = f.Authorization
	if cfg == nil {
		cfg = &authorizationConfig{}
	}
	warnings, err = cfg.validate()
	if err != nil {
		return nil, nil, err
	}
	return cfg, warnings, nil
}

func (c *authorizationConfig) validate() (warnings []string, err error) {
	var errs []error
	if c.Rewrites != nil && c.ResourceAttributes == nil {
		warnings = append(warnings, "authorization.rewrites is ignored without authorization.resourceAttributes (as in kube-rbac-proxy): requests are authorized by path")
	}
	if c.ResourceAttributes != nil {
		for i, field := range attributeFields {
			tmpl := c.ResourceAttributes.field(i)
			t, err := newTemplate(tmpl)
			if err == nil {
				_, err = t.execute("value")
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("authorization.resourceAttributes.%s %q: %w", field, tmpl, err))
			}
		}
		if r := c.Rewrites; r != nil && (r.ByQueryParameter == nil || r.ByQueryParameter.Name == "") && (r.ByHTTPHeader == nil || r.ByHTTPHeader.Name == "") {
			warnings = append(warnings, "authorization.rewrites names neither byQueryParameter.name nor byHttpHeader.name: every request will be refused with 400 (as in kube-rbac-proxy)")
		}
	}
	for i, s := range c.Static {
		if s.ResourceRequest != (s.Path == "") {
			errs = append(errs, fmt.Errorf("authorization.static[%d]: a rule is either resourceRequest: true without a path, or has a path (kube-rbac-proxy refuses it too)", i))
		}
		if s.Path != "" {
			if p, err := httpauth.CleanPath(s.Path); err != nil || p != s.Path {
				errs = append(errs, fmt.Errorf("authorization.static[%d].path %q: must be a clean absolute path (it is matched exactly against the cleaned request path)", i, s.Path))
			}
		}
	}
	return warnings, errors.Join(errs...)
}

// attributeFields are the fields of resourceAttributes, in the order of
// resourceAttributes.field.
var attributeFields = [...]string{"namespace", "apiGroup", "apiVersion", "resource", "subresource", "name"}

func (r *resourceAttributes) field(i int) string {
	return [...]string{r.Namespace, r.APIGroup, r.APIVersion, r.Resource, r.Subresource, r.Name}[i]
}

// valueTemplate is one attribute of resourceAttributes: a Go text/template
// over {.Value}, as kube-rbac-proxy executes it. Templates that are text and
// {{.Value}} (all the ones its documentation shows) are substituted
// directly; others are executed, parsed once.
type valueTemplate struct {
	parts []string // text, with the value between each two parts
	tmpl  *template.Template
}

func newTemplate(s string) (*valueTemplate, error) {
	t, err := template.New("value").Option("missingkey=error").Parse(s)
	if err != nil {
		return nil, err
	}
	if t.Tree != nil && t.Tree.Root != nil {
		if err := onlyValue(t.Tree.Root); err != nil {
			return nil, err
		}
	}
	vt := &valueTemplate{tmpl: t}
	if t.Tree == nil || t.Tree.Root == nil {
		vt.parts, vt.tmpl = []string{""}, nil
		return vt, nil
	}
	var text strings.Builder
	simple := true
	for _, n := range t.Tree.Root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
			text.Write(n.Text)
		case *parse.ActionNode:
			if len(n.Pipe.Decl) == 0 && len(n.Pipe.Cmds) == 1 && len(n.Pipe.Cmds[0].Args) == 1 {
				if f, ok := n.Pipe.Cmds[0].Args[0].(*parse.FieldNode); ok && len(f.Ident) == 1 && f.Ident[0] == "Value" {
					vt.parts = append(vt.parts, text.String())
					text.Reset()
					continue
				}
			}
			simple = false
		default:
			simple = false
		}
	}
	if simple {
		vt.parts = append(vt.parts, text.String())
		vt.tmpl = nil
	}
	return vt, nil
}

// onlyValue reports a field the template reads other than .Value, the
// only one there is ({{ .Namespace }}, {{ .Value.X }}, {{ $.Other }},
// {{ (.Value).X }}): executing it fails whatever the value, and
// kube-rbac-proxy would put "" in the attribute, so such a template is
// refused when the configuration is loaded, even where it is not reached
// with the value the configuration is checked with. A template that fails
// only for some values (an index out of range) is refused with 400 on the
// requests with those values.
func onlyValue(n parse.Node) error {
	var err error
	var walk func(parse.Node)
	walk = func(n parse.Node) {
		if err != nil || n == nil {
			return
		}
		switch n := n.(type) {
		case *parse.ListNode:
			if n == nil {
				return
			}
			for _, c := range n.Nodes {
				walk(c)
			}
		case *parse.ActionNode:
			walk(n.Pipe)
		case *parse.TemplateNode:
			walk(n.Pipe)
		case *parse.IfNode:
			walk(&n.BranchNode)
		case *parse.RangeNode:
			walk(&n.BranchNode)
		case *parse.WithNode:
			walk(&n.BranchNode)
		case *parse.BranchNode:
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *parse.PipeNode:
			if n == nil {
				return
			}
			for _, c := range n.Cmds {
				walk(c)
			}
		case *parse.CommandNode:
			for _, a := range n.Args {
				walk(a)
			}
		case *parse.FieldNode:
			if len(n.Ident) != 1 || n.Ident[0] != "Value" {
				err = fmt.Errorf("the template reads %s: the only field is .Value", n)
			}
		case *parse.VariableNode:
			if len(n.Ident) > 1 && (n.Ident[0] != "$" || len(n.Ident) != 2 || n.Ident[1] != "Value") {
				err = fmt.Errorf("the template reads %s: the only field is .Value", n)
			}
		case *parse.ChainNode:
			err = fmt.Errorf("the template reads %s: the only field is .Value", n)
		}
	}
	walk(n)
	return err
}

// execute returns the attribute for value. A template that fails is an
// error (the request is refused with 400); kube-rbac-proxy would use the
// empty string, which for name means every name.
func (v *valueTemplate) execute(value string) (string, error) {
	if v.tmpl == nil {
		return strings.Join(v.parts, value), nil
	}
	var b strings.Builder
	if err := v.tmpl.Execute(&b, struct{ Value string }{value}); err != nil {
		return "", err
	}
	return b.String(), nil
}

// MaxRewriteValues bounds the distinct rewrite values of one request, each
// of which costs a SubjectAccessReview when not cached. kube-rbac-proxy has
// no bound: ?namespace=a&namespace=b&... would send a review per value.
const MaxRewriteValues = 16

// errRewrite is a request the rewrites cannot map: no value, too many, or
// a template that fails. kube-rbac-proxy answers 400 to the first.
var errRewrite = errors.New("rbacproxy: the request does not say what to authorize")

// krpVerb is the verb kube-rbac-proxy gives a method, for resource and
// non-resource requests alike (its POST is "create", where the API server
// says "post" for a non-resource request), so that RBAC rules written for
// kube-rbac-proxy keep working: httpauth's resource verbs. HEAD is "get"
// (kube-rbac-proxy gives it "*", which only a "*" grant allows); any other
// method has no verb and is refused with 405 (kube-rbac-proxy authorizes
// it as "*").
var krpVerb = httpauth.ResourceVerb

// mapper turns a request into the attribute sets kube-rbac-proxy would
// review, all of which must allow.
type mapper struct {
	cfg    *authorizationConfig
	tmpl   [len(attributeFields)]*valueTemplate
	query  string // query parameter of the rewrites, or ""
	header string // canonical header of the rewrites, or ""
}

func newMapper(cfg *authorizationConfig) (*mapper, error) {
	m := &mapper{cfg: cfg}
	if ra := cfg.ResourceAttributes; ra != nil {
		for i := range attributeFields {
			t, err := newTemplate(ra.field(i))
			if err != nil {
				return nil, err
			}
			m.tmpl[i] = t
		}
	}
	if r := cfg.Rewrites; r != nil && cfg.ResourceAttributes != nil {
		if r.ByQueryParameter != nil {
			m.query = r.ByQueryParameter.Name
		}
		if r.ByHTTPHeader != nil && r.ByHTTPHeader.Name != "" {
			m.header = textproto.CanonicalMIMEHeaderKey(r.ByHTTPHeader.Name)
		}
	}
	return m, nil
}

// single holds one attribute set and the slice that returns it, so that
// the common cases allocate once per request.
type single struct {
	rec  authorizer.AttributesRecord
	list [1]authorizer.Attributes
}

func (m *mapper) Attributes(r *http.Request, u user.Info) ([]authorizer.Attributes, error) {
	verb, err := krpVerb(r.Method)
	if err != nil {
		return nil, err
	}
	ra := m.cfg.ResourceAttributes
	if ra == nil {
		s := &single{rec: authorizer.AttributesRecord{User: u, Verb: verb, Path: r.URL.Path}}
		s.list[0] = &s.rec
		return s.list[:], nil
	}
	if m.query == "" && m.header == "" && m.cfg.Rewrites == nil {
		s := &single{rec: authorizer.AttributesRecord{User: u, Verb: verb, Namespace: ra.Namespace, APIGroup: ra.APIGroup,
			APIVersion: ra.APIVersion, Resource: ra.Resource, Subresource: ra.Subresource, Name: ra.Name, ResourceRequest: true}}
		s.list[0] = &s.rec
		return s.list[:], nil
	}
	var values []string
	if m.query != "" {
		values = append(values, r.URL.Query()[m.query]...)
	}
	if m.header != "" {
		values = append(values, r.Header[m.header]...)
	}
	slices.Sort(values)
	values = slices.Compact(values)
	switch {
	case len(values) == 0:
		return nil, fmt.Errorf("%w: no %s", errRewrite, m.sources())
	case len(values) > MaxRewriteValues:
		return nil, fmt.Errorf("%w: %d values of %s, more than %d", errRewrite, len(values), m.sources(), MaxRewriteValues)
	}
	out := make([]authorizer.Attributes, 0, len(values))
	for _, v := range values {
		a := &authorizer.AttributesRecord{User: u, Verb: verb, ResourceRequest: true}
		for i, dst := range [...]*string{&a.Namespace, &a.APIGroup, &a.APIVersion, &a.Resource, &a.Subresource, &a.Name} {
			s, err := m.tmpl[i].execute(v)
			if err != nil {
				return nil, fmt.Errorf("%w: resourceAttributes.%s: %v", errRewrite, attributeFields[i], err)
			}
			*dst = s
		}
		out = append(out, a)
	}
	return out, nil
}

func (m *mapper) sources() string {
	var s []string
	if m.query != "" {
		s = append(s, "query parameter "+m.query)
	}
	if m.header != "" {
		s = append(s, "header "+m.header)
	}
	return strings.Join(s, " or ")
}

// staticAuthorizer allows requests matching one of kube-rbac-proxy's
// static rules, and has no opinion on others. It is not authz.StaticRules:
// kube-rbac-proxy's rules mean "any" where a field is empty and match paths
// exactly, where authz's RBAC-style rules match nothing on an empty list.
// Unlike kube-rbac-proxy (issue #333), user.groups is honoured: a rule
// with groups allows only members of one of them.
type staticAuthorizer []staticRule

func (s staticAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	for i, r := range s {
		if r.matches(a) {
			return authorizer.DecisionAllow, fmt.Sprintf("allowed by static rule %d of --config-file", i), nil
		}
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func (r *staticRule) matches(a authorizer.Attributes) bool {
	u := a.GetUser()
	if u == nil {
		return false
	}
	eq := func(rule, v string) bool { return rule == "" || rule == v }
	if !eq(r.User.Name, u.GetName()) {
		return false
	}
	if len(r.User.Groups) > 0 && !slices.ContainsFunc(u.GetGroups(), func(g string) bool { return slices.Contains(r.User.Groups, g) }) {
		return false
	}
	return r.ResourceRequest == a.IsResourceRequest() &&
		eq(r.Verb, a.GetVerb()) &&
		eq(r.Namespace, a.GetNamespace()) &&
		eq(r.APIGroup, a.GetAPIGroup()) &&
		eq(r.Resource, a.GetResource()) &&
		eq(r.Subresource, a.GetSubresource()) &&
		eq(r.Name, a.GetName()) &&
		eq(r.Path, a.GetPath())
}
