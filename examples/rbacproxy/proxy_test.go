package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/reviewauth/reviewauth/authtest"
)

// seen is one request the upstream received.
type seen struct {
	path, query string
	proto       int
	header      http.Header
}

// upstream records what reaches it.
type upstream struct {
	mu  sync.Mutex
	got []seen
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.got = append(u.got, seen{path: r.URL.Path, query: r.URL.RawQuery, proto: r.ProtoMajor, header: r.Header.Clone()})
	u.mu.Unlock()
	_, _ = io.WriteString(w, "upstream "+r.URL.Path)
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.got)
}

func (u *upstream) last() seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.got[len(u.got)-1]
}

const (
	scraperName = "system:serviceaccount:monitoring:prometheus"
	audience    = "rbacproxy"
)

// env is an API server with RBAC for the tests, tokens, and an upstream.
type env struct {
	api                                    *authtest.Server
	kubeconfig, dir                        string
	scraper, writer, apiAud, other, bobTok string
	up                                     *upstream
	upURL                                  string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	api := authtest.Start(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := api.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	api.SetPolicy(authtest.Rules(
		// kube-prometheus' RBAC for kube-rbac-proxy: get on the non-resource URL.
		authtest.Rule{Users: []string{scraperName}, Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}},
		// The rewrites example: metrics of a namespace.
		authtest.Rule{Users: []string{scraperName}, Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"namespace"},
			Subresources: []string{"metrics"}, Namespaces: []string{"team-a"}},
		// POST is "create" in kube-rbac-proxy's RBAC.
		authtest.Rule{Users: []string{"writer"}, Verbs: []string{"create"}, NonResourceURLs: []string{"/api/v1/write"}},
		authtest.Rule{Groups: []string{"cert-scrapers"}, Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}},
		authtest.Rule{Users: []string{"alice@example.com"}, Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}},
	))
	exp := time.Now().Add(time.Hour)
	scraper := &user.DefaultInfo{Name: scraperName, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	up := &upstream{}
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	return &env{api: api, kubeconfig: kubeconfig, dir: dir, up: up, upURL: upSrv.URL,
		scraper: api.MintToken(scraper, []string{audience}, exp),
		writer:  api.MintToken(&user.DefaultInfo{Name: "writer"}, []string{audience}, exp),
		apiAud:  api.MintToken(scraper, nil, exp),
		other:   api.MintToken(scraper, []string{"another-service"}, exp),
		bobTok:  api.MintToken(&user.DefaultInfo{Name: "bob", Groups: []string{"admins"}}, []string{audience}, exp),
	}
}

// args are kube-rbac-proxy's usual flags for the env.
func (e *env) args(extra ...string) []string {
	return append([]string{"--secure-listen-address=127.0.0.1:0", "--upstream=" + e.upURL + "/",
		"--kubeconfig=" + e.kubeconfig, "--auth-token-audiences=" + audience}, extra...)
}

func (e *env) config(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// proxy is rbacproxy running in-process.
type proxy struct {
	base, endpoints string
	client          *http.Client
}

// start runs rbacproxy with args until the test ends.
func start(t *testing.T, args ...string) *proxy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, args, pw, io.Discard)
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	p := &proxy{client: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}}
	br := bufio.NewReader(pr)
	for p.base == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			cancel()
			t.Fatalf("rbacproxy did not start: %v (run: %v)", err, <-done)
		}
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "listening on "); ok {
			p.base = v
		}
		if v, ok := strings.CutPrefix(line, "proxy endpoints on "); ok {
			p.endpoints = v
		}
	}
	go func() { _, _ = io.Copy(io.Discard, br) }()
	t.Cleanup(func() {
		p.client.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run() = %v after cancel; want nil", err)
		}
	})
	return p
}

// do sends method path (as written, not cleaned by the client) with token
// and headers, and returns the status and body.
func (p *proxy) do(t *testing.T, method, path, token string, header map[string][]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, p.base+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = "//" + req.URL.Host + path
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// spoofed are identity headers a client might send, in spellings an
// upstream may read.
var spoofed = map[string][]string{
	"X-Remote-User": {"system:admin"}, "X-Remote-Group": {"system:masters"}, "X-Remote-Groups": {"system:masters"},
	"X-Remote-Extra-Scopes": {"all"}, "X-Remote_user": {"system:admin"}, "x-remote-groups": {"system:masters"},
	"Impersonate-User": {"system:admin"}, "Impersonate-Group": {"system:masters"}, "Impersonate_User": {"system:admin"},
}

func checkNoSpoof(t *testing.T, h http.Header, allowed ...string) {
	t.Helper()
	for k, v := range h {
		lk := strings.ReplaceAll(strings.ToLower(k), "_", "-")
		if lk == "authorization" || strings.HasPrefix(lk, "impersonate-") {
			t.Errorf("upstream received %s: %q", k, v)
		}
		if strings.HasPrefix(lk, "x-remote-") {
			ok := false
			for _, a := range allowed {
				ok = ok || lk == a
			}
			if !ok || strings.Contains(strings.Join(v, ","), "system:masters") || strings.Contains(strings.Join(v, ","), "system:admin") {
				t.Errorf("upstream received %s: %q", k, v)
			}
		}
	}
}

// TestDefaults: without --config-file every request is a non-resource
// request for its cleaned path, with kube-rbac-proxy's verbs; tokens must
// be for --auth-token-audiences; paths are cleaned; spoofed identity
// headers never reach the upstream.
func TestDefaults(t *testing.T) {
	e := newEnv(t)
	p := start(t, e.args("--auth-header-user-field-name=X-Forwarded-User")...)
	tests := []struct {
		name, method, path, token string
		header                    map[string][]string
		wantCode                  int
		wantUpstream              string
	}{
		{name: "scraper gets /metrics", method: "GET", path: "/metrics", token: e.scraper, wantCode: 200, wantUpstream: "/metrics"},
		{name: "HEAD is get", method: "HEAD", path: "/metrics", token: e.scraper, wantCode: 200, wantUpstream: "/metrics"},
		{name: "scraper is refused /logs", method: "GET", path: "/logs", token: e.scraper, wantCode: 403},
		{name: "POST is create", method: "POST", path: "/api/v1/write", token: e.writer, wantCode: 200, wantUpstream: "/api/v1/write"},
		{name: "OPTIONS has no verb", method: "OPTIONS", path: "/metrics", token: e.scraper, wantCode: 405},
		{name: "no token", method: "GET", path: "/metrics", wantCode: 401},
		{name: "API server audience", method: "GET", path: "/metrics", token: e.apiAud, wantCode: 401},
		{name: "another service's audience", method: "GET", path: "/metrics", token: e.other, wantCode: 401},
		{name: "garbage", method: "GET", path: "/metrics", token: "not-a-token-0123456789", wantCode: 401},
		{name: "double slash is cleaned, not redirected", method: "GET", path: "//metrics", token: e.scraper, wantCode: 200, wantUpstream: "/metrics"},
		{name: "dot-dot is cleaned before authorization", method: "GET", path: "/metrics/../logs", token: e.scraper, wantCode: 403},
		{name: "encoded dot-dot is refused", method: "GET", path: "/metrics/%2e%2e/logs", token: e.scraper, wantCode: 400},
		{name: "spoofed headers are stripped", method: "GET", path: "/metrics", token: e.scraper, header: spoofed, wantCode: 200, wantUpstream: "/metrics"},
		{name: "the configured user header is stripped", method: "GET", path: "/metrics", token: e.scraper,
			header: map[string][]string{"X-Forwarded-User": {"system:admin"}, "X-Forwarded_User": {"system:admin"}}, wantCode: 200, wantUpstream: "/metrics"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.up.count()
			code, body := p.do(t, tt.method, tt.path, tt.token, tt.header)
			if code != tt.wantCode {
				t.Fatalf("%s %s = %d; want %d (%s)", tt.method, tt.path, code, tt.wantCode, body)
			}
			for _, tok := range []string{e.scraper, e.apiAud, e.other} {
				if strings.Contains(body, tok) {
					t.Error("the answer echoes a token")
				}
			}
			if tt.wantUpstream == "" {
				if e.up.count() != before {
					t.Errorf("upstream was called; want not")
				}
				return
			}
			if e.up.count() != before+1 || e.up.last().path != tt.wantUpstream {
				t.Fatalf("upstream saw %d requests, last %+v; want one for %s", e.up.count()-before, e.up.last(), tt.wantUpstream)
			}
			checkNoSpoof(t, e.up.last().header)
			for k := range e.up.last().header {
				if strings.EqualFold(strings.ReplaceAll(k, "_", "-"), "x-forwarded-user") {
					t.Errorf("upstream received %s, the configured user header, from the client", k)
				}
			}
		})
	}
}

// TestRewrites (issue #12): kube-rbac-proxy's rewrites by query parameter
// and by header: one review per distinct value, all must allow; no value
// is 400; the upstream gets the query as authorized.
func TestRewrites(t *testing.T) {
	e := newEnv(t)
	query := start(t, e.args("--config-file="+e.config(t, krpConfigs["rewrites"]))...)
	header := start(t, e.args("--config-file="+e.config(t, `
authorization:
  rewrites:
    byHttpHeader:
      name: X-Namespace
  resourceAttributes:
    apiVersion: v1
    resource: namespace
    subresource: metrics
    namespace: "{{ .Value }}"
`))...)
	tests := []struct {
		name     string
		p        *proxy
		path     string
		header   map[string][]string
		wantCode int
	}{
		{"query: allowed namespace", query, "/metrics?namespace=team-a", nil, 200},
		{"query: other namespace", query, "/metrics?namespace=team-b", nil, 403},
		{"query: both, one denied", query, "/metrics?namespace=team-a&namespace=team-b", nil, 403},
		{"query: none", query, "/metrics", nil, 400},
		{"query: semicolon", query, "/metrics?namespace=team-a;namespace=team-b", nil, 400},
		{"header: allowed", header, "/metrics", map[string][]string{"X-Namespace": {"team-a"}}, 200},
		{"header: two lines, one denied", header, "/metrics", map[string][]string{"X-Namespace": {"team-a", "kube-system"}}, 403},
		{"header: none", header, "/metrics", nil, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.up.count()
			code, body := tt.p.do(t, "GET", tt.path, e.scraper, tt.header)
			if code != tt.wantCode {
				t.Fatalf("GET %s = %d; want %d (%s)", tt.path, code, tt.wantCode, body)
			}
			if (e.up.count() > before) != (code == 200) {
				t.Errorf("upstream called %v for %d", e.up.count() > before, code)
			}
			if code == 200 && strings.HasPrefix(tt.name, "query") && e.up.last().query != "namespace=team-a" {
				t.Errorf("upstream query = %q; want namespace=team-a", e.up.last().query)
			}
		})
	}
	// One review per distinct value, then cached.
	before := e.api.Count(authtest.SubjectAccessReviews)
	for range 20 {
		query.do(t, "GET", "/metrics?namespace=team-c&namespace=team-d", e.scraper, nil)
	}
	if got := e.api.Count(authtest.SubjectAccessReviews) - before; got != 1 {
		// team-c is denied first; All stops at the first denial.
		t.Errorf("SubjectAccessReviews for 20 requests = %d; want 1", got)
	}
}

// TestStaticRulesConfig: static rules allow without a review; groups are
// honoured.
func TestStaticRulesConfig(t *testing.T) {
	e := newEnv(t)
	p := start(t, e.args("--config-file="+e.config(t, `
authorization:
  static:
    - user:
        name: bob
        groups: [admins]
      verb: get
      path: /admin
    - user:
        name: writer
        groups: [admins]
      verb: get
      path: /admin
`))...)
	before := e.api.Count(authtest.SubjectAccessReviews)
	if code, _ := p.do(t, "GET", "/admin", e.bobTok, nil); code != 200 {
		t.Errorf("static rule user in group = %d; want 200", code)
	}
	if got := e.api.Count(authtest.SubjectAccessReviews) - before; got != 0 {
		t.Errorf("SubjectAccessReviews for a static allow = %d; want 0", got)
	}
	if code, _ := p.do(t, "GET", "/admin", e.writer, nil); code != 403 {
		t.Errorf("static rule user not in the group = %d; want 403 (kube-rbac-proxy #333 would allow)", code)
	}
}

// TestHeaderFields: --auth-header-fields-enabled sets the caller's name and
// groups; a client's own values never pass.
func TestHeaderFields(t *testing.T) {
	e := newEnv(t)
	p := start(t, e.args("--auth-header-fields-enabled", "--auth-header-groups-field-separator=,")...)
	code, _ := p.do(t, "GET", "/metrics", e.scraper, spoofed)
	if code != 200 {
		t.Fatalf("GET /metrics = %d", code)
	}
	h := e.up.last().header
	if got := h.Values("X-Remote-User"); len(got) != 1 || got[0] != scraperName {
		t.Errorf("X-Remote-User = %q; want %q", got, scraperName)
	}
	if got := h.Values("X-Remote-Groups"); len(got) != 1 || got[0] != "system:serviceaccounts,system:authenticated" {
		t.Errorf("X-Remote-Groups = %q", got)
	}
	checkNoSpoof(t, h, "x-remote-user", "x-remote-groups")
}

// TestAllowAndIgnorePaths: --allow-paths serves only matching paths (404
// otherwise, before authentication); --ignore-paths serves GET and HEAD
// without a credential, with no identity sent upstream, and authorizes
// other methods; a presented credential must be valid.
func TestAllowAndIgnorePaths(t *testing.T) {
	e := newEnv(t)
	allow := start(t, e.args("--allow-paths=/metrics,/metrics/*")...)
	for _, tt := range []struct {
		path, token string
		want        int
	}{{"/metrics", e.scraper, 200}, {"/metrics/cadvisor", "", 401}, {"/other", "", 404}, {"/other", e.scraper, 404}, {"//metrics", e.scraper, 200}, {"/metrics/a/b", e.scraper, 404}} {
		if code, _ := allow.do(t, "GET", tt.path, tt.token, nil); code != tt.want {
			t.Errorf("--allow-paths: GET %s = %d; want %d", tt.path, code, tt.want)
		}
	}
	ignore := start(t, e.args("--ignore-paths=/healthz,/ready*", "--auth-header-fields-enabled")...)
	for _, tt := range []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/healthz", "", 200}, {"HEAD", "/healthz", "", 200}, {"GET", "/readyz", "", 200},
		{"POST", "/healthz", "", 401}, {"DELETE", "/healthz", e.scraper, 403},
		{"GET", "/healthz", "not-a-token-0123456789", 401}, {"GET", "/healthz/x", "", 401}, {"GET", "/metrics", "", 401},
	} {
		before := e.up.count()
		if code, _ := ignore.do(t, tt.method, tt.path, tt.token, spoofed); code != tt.want {
			t.Errorf("--ignore-paths: %s %s = %d; want %d", tt.method, tt.path, code, tt.want)
		}
		if tt.want == 200 {
			if e.up.count() != before+1 {
				t.Fatalf("upstream not called")
			}
			checkNoSpoof(t, e.up.last().header) // no identity at all for the anonymous caller
		}
	}
	widened := start(t, e.args("--ignore-paths=/hook", "--ignore-paths-methods=POST")...)
	if code, _ := widened.do(t, "POST", "/hook", "", nil); code != 200 {
		t.Errorf("--ignore-paths-methods=POST: POST /hook = %d; want 200", code)
	}
}

// TestOutage: the API server down is 503 with Retry-After, never 401 or
// 500; a cached identity and decision keep working.
func TestOutage(t *testing.T) {
	e := newEnv(t)
	p := start(t, e.args()...)
	if code, _ := p.do(t, "GET", "/metrics", e.scraper, nil); code != 200 {
		t.Fatalf("warm-up = %d", code)
	}
	e.api.Close()
	if code, _ := p.do(t, "GET", "/metrics", e.scraper, nil); code != 200 {
		t.Errorf("cached caller during the outage = %d; want 200", code)
	}
	req, _ := http.NewRequest("GET", p.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+e.writer)
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("new caller during the outage = %d (Retry-After %q); want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// TestFlagErrors: what rbacproxy refuses to start with, and the
// kube-rbac-proxy flags it accepts.
func TestFlagErrors(t *testing.T) {
	t.Parallel()
	base := []string{"--secure-listen-address=127.0.0.1:0", "--upstream=http://127.0.0.1:1", "--kubeconfig=/nonexistent"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no audience", base, "--auth-token-audiences is required"},
		{"insecure listener", append(base, "--auth-token-audiences=a", "--insecure-listen-address=:8080"), "--insecure-listen-address is not supported"},
		{"no listener", []string{"--upstream=http://x", "--auth-token-audiences=a"}, "--secure-listen-address is required"},
		{"no upstream", []string{"--secure-listen-address=:0", "--auth-token-audiences=a"}, "--upstream"},
		{"allow and ignore", append(base, "--auth-token-audiences=a", "--allow-paths=/a", "--ignore-paths=/b"), "cannot use --allow-paths and --ignore-paths together"},
		{"bad glob", append(base, "--auth-token-audiences=a", "--allow-paths=/[a"), "--authentication-kubeconfig"},
		{"h2c to https", []string{"--secure-listen-address=:0", "--upstream=https://x", "--auth-token-audiences=a", "--upstream-force-h2c"}, "--upstream-force-h2c"},
		{"client cert without key", append(base, "--auth-token-audiences=a", "--upstream-client-cert-file=c"), "go together"},
		{"oidc without client id", append(base, "--auth-token-audiences=a", "--oidc-issuer=https://issuer"), "--oidc-clientID"},
		{"bad tls version", append(base, "--auth-token-audiences=a", "--tls-min-version=VersionSSL3"), "--tls-min-version"},
		{"missing config file", append(base, "--auth-token-audiences=a", "--config-file=/nonexistent"), "--authentication-kubeconfig"},
		{"unknown flag", append(base, "--nope"), "unknown flag: --nope"},
		{"klog's removed flags are accepted", append(base, "--auth-token-audiences=a", "--logtostderr=true", "--stderrthreshold=INFO", "--tls-reload-interval=2m"), "--authentication-kubeconfig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := run(context.Background(), tt.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run(%q) = %v; want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
	var out strings.Builder
	// kube-rbac-proxy's manifests pass --version=raw: every field, as
	// component-base's verflag prints them.
	if err := run(context.Background(), []string{"--version=raw"}, &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "version.Info{") {
		t.Errorf("run(--version=raw) = %v, %q; want version.Info{...}", err, out.String())
	}
}

// freePort returns a port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestProxyEndpointsPort: /healthz, /livez and /readyz on their own port,
// over TLS, without a credential; not on the proxy's port.
func TestProxyEndpointsPort(t *testing.T) {
	e := newEnv(t)
	p := start(t, e.args("--proxy-endpoints-port="+strconv.Itoa(freePort(t)))...)
	if p.endpoints == "" {
		t.Fatal("no proxy endpoints line")
	}
	for _, path := range []string{"/healthz", "/livez", "/readyz"} {
		resp, err := p.client.Get(p.endpoints + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != "ok" {
			t.Errorf("GET %s = %d %q; want 200 ok", path, resp.StatusCode, body)
		}
	}
	if code, _ := p.do(t, "GET", "/healthz", "", nil); code != 401 {
		t.Errorf("/healthz on the proxy port = %d; want 401 (it is the upstream's)", code)
	}
}

// writeCert writes a certificate (and its key) for the upstream, and
// returns the files and a client certificate the upstream trusts.
func upstreamTLS(t *testing.T, dir string) (srv *httptest.Server, up *upstream, caFile, certFile, keyFile string) {
	t.Helper()
	up = &upstream{}
	srv = httptest.NewUnstartedServer(up)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile = filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	// httptest's certificate and key serve as the proxy's client pair.
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	cert := srv.TLS.Certificates[0]
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	return srv, up, caFile, certFile, keyFile
}

// TestUpstreamTLSAndH2C: --upstream-ca-file and the client certificate
// reach a TLS upstream that requires one; --upstream-force-h2c speaks
// HTTP/2 to a cleartext upstream.
func TestUpstreamTLSAndH2C(t *testing.T) {
	e := newEnv(t)
	srv, up, ca, cert, key := upstreamTLS(t, e.dir)
	p := start(t, "--secure-listen-address=127.0.0.1:0", "--upstream="+srv.URL, "--kubeconfig="+e.kubeconfig,
		"--auth-token-audiences="+audience, "--upstream-ca-file="+ca, "--upstream-client-cert-file="+cert, "--upstream-client-key-file="+key)
	if code, body := p.do(t, "GET", "/metrics", e.scraper, nil); code != 200 || up.count() != 1 {
		t.Errorf("TLS upstream = %d %q, upstream saw %d; want 200 and 1", code, body, up.count())
	}

	h2up := &upstream{}
	h2srv := &http.Server{Handler: h2up, Protocols: new(http.Protocols)}
	h2srv.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = h2srv.Serve(ln) }()
	t.Cleanup(func() { h2srv.Close() })
	p2 := start(t, "--secure-listen-address=127.0.0.1:0", "--upstream=http://"+ln.Addr().String(), "--kubeconfig="+e.kubeconfig,
		"--auth-token-audiences="+audience, "--upstream-force-h2c")
	if code, _ := p2.do(t, "GET", "/metrics", e.scraper, nil); code != 200 || h2up.count() != 1 || h2up.last().proto != 2 {
		t.Errorf("h2c upstream = %d; want 200 over HTTP/2", code)
	}
}

// TestClientCertificate: --client-ca-file authenticates client
// certificates (CN user, O groups).
func TestClientCertificate(t *testing.T) {
	e := newEnv(t)
	caFile, cert := clientCA(t, e.dir, "cert-scraper", "cert-scrapers")
	p := start(t, e.args("--client-ca-file="+caFile)...)
	tlsConfig := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}}
	p.client = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	if code, _ := p.do(t, "GET", "/metrics", "", nil); code != 200 {
		t.Errorf("client certificate in cert-scrapers = %d; want 200", code)
	}
	if code, _ := p.do(t, "GET", "/logs", "", nil); code != 403 {
		t.Errorf("client certificate, /logs = %d; want 403", code)
	}
}
