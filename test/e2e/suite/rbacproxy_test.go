package suite_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// rbacEnv is rbacproxy from examples/rbacproxy/deploy (its Deployment's
// rbacproxy container, with the manifests' ServiceAccount, RBAC and
// --config-file: kube-rbac-proxy's rewrites example, the metrics of the
// namespace named by ?namespace=) in front of a test upstream, and the
// caller of examples/rbacproxy/deploy/client, bound by RoleBindings to
// the client's ClusterRole in two namespaces (allowed, allowed2) but not
// a third (denied), with the token the kubelet would project into it.
type rbacEnv struct {
	*server
	// ns is the manifests' namespace; caller is the client's
	// ServiceAccount there, token the token projected for it.
	ns, caller, token         string
	allowed, allowed2, denied string
	client                    *http.Client
	// roots trust rbacproxy's serving certificate.
	roots *x509.CertPool

	mu       sync.Mutex
	upstream []http.Header
}

func startRBACProxy(t *testing.T, c *cluster.Cluster, extraArgs ...string) *rbacEnv {
	t.Helper()
	return startRBACProxyWith(t, c, deployOptions{}, extraArgs...)
}

// startRBACProxyWith is startRBACProxy with the manifests deployed with o
// (the client with them: in their namespace, with their suffix), after
// the README's Deploy steps: the Secret rbacproxy-tls with a serving
// certificate and the ConfigMap rbacproxy-ca with its CA, which the
// client trusts.
func startRBACProxyWith(t *testing.T, c *cluster.Cluster, o deployOptions, extraArgs ...string) *rbacEnv {
	t.Helper()
	e := &rbacEnv{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		h := r.Header.Clone()
		h.Set("X-Test-Path", r.URL.Path+"?"+r.URL.RawQuery)
		e.upstream = append(e.upstream, h)
		e.mu.Unlock()
		_, _ = io.WriteString(w, "# TYPE up gauge\nup 1\n")
	}))
	t.Cleanup(up.Close)
	m := deploy(t, c, deployDir("rbacproxy"), o)
	e.ns = m.Namespace()
	ca := servingSecret(t, c, nil, e.ns, "rbacproxy-tls", "rbacproxy-ca", "app."+e.ns+".svc")
	client := deploy(t, c, deployDir("rbacproxy", "client"), deployOptions{shipped: o.shipped, namespace: e.ns, suffix: m.NameSuffix})
	e.caller = client.Name("metrics-reader")
	e.allowed, e.allowed2, e.denied = c.UniqueNamespace(t, "team-a"), c.UniqueNamespace(t, "team-b"), c.UniqueNamespace(t, "kube")
	for _, ns := range []string{e.allowed, e.allowed2} {
		c.BindClusterRole(t, ns, client.Name("rbacproxy-namespace-metrics-reader"), cluster.ServiceAccountSubject(e.ns, e.caller))
		c.WaitForAccess(t, e.spec(ns), true)
	}
	e.token = projectedToken(t, c, client, "Job", "rbacproxy-smoke", "", "/var/run/secrets/rbacproxy")

	health := freePort(t)
	e.server = startServer(t, c, m, "Deployment", "app", "", append([]string{"--secure-listen-address=127.0.0.1:0", "--upstream=" + up.URL + "/",
		"--proxy-endpoints-port=" + strconv.Itoa(health)}, extraArgs...)...)
	e.checkProbes(t, map[int32]string{8444: loopback(health)})
	e.roots = ca.Pool()
	tr := &http.Transport{TLSClientConfig: tlsConfig(e.roots)}
	t.Cleanup(tr.CloseIdleConnections)
	e.client = &http.Client{Transport: tr, Timeout: callTimeout}
	return e
}

// spec is the SubjectAccessReview rbacproxy sends for ?namespace=ns.
func (e *rbacEnv) spec(ns string) authorizationv1.SubjectAccessReviewSpec {
	return authorizationv1.SubjectAccessReviewSpec{User: serviceAccountUser(e.ns, e.caller), ResourceAttributes: &authorizationv1.ResourceAttributes{
		Namespace: ns, Verb: "get", Version: "v1", Resource: "namespaces", Subresource: "metrics"}}
}

func (e *rbacEnv) get(t testing.TB, ctx context.Context, path, token string, header map[string]string) (int, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header[k] = []string{v}
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

func (e *rbacEnv) upstreamCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.upstream)
}

// TestRBACProxy runs rbacproxy as kube-rbac-proxy users run it, with a
// kube-rbac-proxy config file (resourceAttributes with a namespace rewrite
// from a query parameter), against a real API server: a scraper bound by
// RBAC gets its namespace's metrics, another namespace is 403, a token for
// the API server's audience is 401, and spoofed identity headers never
// reach the upstream.
func TestRBACProxy(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	e := startRBACProxy(t, c)
	token := e.token
	apiServerToken := c.RequestToken(t, e.ns, e.caller, cluster.TokenOptions{})
	spoofed := map[string]string{"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters", "X-Remote-Groups": "system:masters",
		"X-Remote-Extra-Scopes": "all", "Impersonate-User": "system:admin", "Impersonate-Group": "system:masters", "X-Remote_User": "system:admin"}
	tests := []struct {
		name, path, token string
		header            map[string]string
		want              int
	}{
		{"bound namespace", "/metrics?namespace=" + e.allowed, token, nil, http.StatusOK},
		{"another namespace", "/metrics?namespace=" + e.denied, token, nil, http.StatusForbidden},
		{"bound and another", "/metrics?namespace=" + e.allowed + "&namespace=" + e.denied, token, nil, http.StatusForbidden},
		{"no namespace", "/metrics", token, nil, http.StatusBadRequest},
		{"API server audience", "/metrics?namespace=" + e.allowed, apiServerToken, nil, http.StatusUnauthorized},
		{"no token", "/metrics?namespace=" + e.allowed, "", nil, http.StatusUnauthorized},
		{"spoofed identity headers", "/metrics?namespace=" + e.allowed, token, spoofed, http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := ctxFor(t, callTimeout)
			defer cancel()
			before := e.upstreamCount()
			code, _ := e.get(t, ctx, tc.path, tc.token, tc.header)
			if code != tc.want {
				t.Fatalf("GET %s = %d; want %d", tc.path, code, tc.want)
			}
			if (e.upstreamCount() > before) != (code == http.StatusOK) {
				t.Fatalf("upstream called: %v; want %v", e.upstreamCount() > before, code == http.StatusOK)
			}
		})
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, h := range e.upstream {
		for k, v := range h {
			lk := strings.ReplaceAll(strings.ToLower(k), "_", "-")
			if lk == "authorization" || strings.HasPrefix(lk, "x-remote-") || strings.HasPrefix(lk, "impersonate-") {
				t.Errorf("the upstream received %s: %q", k, v)
			}
		}
	}
	if strings.Contains(e.stdout.String()+e.stderr.String(), token) {
		t.Error("rbacproxy's output holds a token")
	}
}

// TestRBACProxyCertificateCallers (issue #21): a client certificate
// without organizations, whose CN RBAC knows only through the group
// system:authenticated (a RoleBinding to that group), is allowed by
// rbacproxy exactly as the API server allows the same certificate (its
// SelfSubjectAccessReview); with --auth-header-fields-enabled the upstream
// is told the groups the API server gives it (its SelfSubjectReview),
// system:authenticated included, even when the client's Connection header
// names the identity headers, which httputil.ReverseProxy drops as
// hop-by-hop before Rewrite. Before, rbacproxy said 403 where the API
// server and kube-rbac-proxy say 200, and the upstream got no identity.
func TestRBACProxyCertificateCallers(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	e := startRBACProxy(t, c, "--client-ca-file="+writeFile(t, "client-ca.crt", c.ClientCA().CertPEM), "--auth-header-fields-enabled")
	ns := c.UniqueNamespace(t, "by-group")
	c.CreateRole(t, ns, "metrics-reader", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"namespaces/metrics"}})
	c.BindRole(t, ns, "metrics-reader", cluster.GroupSubject(user.AllAuthenticated))
	certUser := cluster.UniqueName("cert-scraper")
	spec := authorizationv1.SubjectAccessReviewSpec{User: certUser, Groups: []string{user.AllAuthenticated}, ResourceAttributes: &authorizationv1.ResourceAttributes{
		Namespace: ns, Verb: "get", Version: "v1", Resource: "namespaces", Subresource: "metrics"}}
	c.WaitForAccess(t, spec, true)

	// The API server's own answers for a certificate of certUser.
	cfg, err := c.UserConfig(certUser)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := ctxFor(t, callTimeout)
	defer cancel()
	self, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ssar, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: spec.ResourceAttributes}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !ssar.Status.Allowed || !slices.Contains(self.Status.UserInfo.Groups, user.AllAuthenticated) {
		t.Fatalf("the API server: groups %q, allowed %v; the test assumes system:authenticated and allowed", self.Status.UserInfo.Groups, ssar.Status.Allowed)
	}

	crt, err := c.ClientCA().ClientCert(certUser)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: tlsConfig(e.roots, crt)}
	t.Cleanup(tr.CloseIdleConnections)
	e.client = &http.Client{Transport: tr, Timeout: callTimeout}
	for _, header := range []map[string]string{nil, {"Connection": "X-Remote-User, X-Remote-Groups"}} {
		before := e.upstreamCount()
		if code, _ := e.get(t, ctx, "/metrics?namespace="+ns, "", header); code != http.StatusOK || e.upstreamCount() != before+1 {
			t.Fatalf("certificate of %s, headers %v: %d, upstream called %d times; want 200 as the API server allows it, once", certUser, header, code, e.upstreamCount()-before)
		}
		e.mu.Lock()
		got := e.upstream[len(e.upstream)-1]
		e.mu.Unlock()
		if want := strings.Join(self.Status.UserInfo.Groups, "|"); got.Get("X-Remote-User") != certUser || got.Get("X-Remote-Groups") != want {
			t.Errorf("headers %v: the upstream was told user %q groups %q; want %q and the API server's %q", header,
				got.Get("X-Remote-User"), got.Get("X-Remote-Groups"), certUser, want)
		}
	}
}

// TestRBACProxyCostAndOutage counts what 1,000 requests from one token
// cost the API server (apiserver_request_total): one TokenReview, and one
// SubjectAccessReview per distinct rewrite (two namespaces); then stops the
// API server: the warm token keeps working from the caches, a new one is
// 503 with Retry-After, never 401 or 403. It counts every review and stops
// the shared API server, so it does not run in parallel.
func TestRBACProxyCostAndOutage(t *testing.T) {
	c := cluster.Get(t)
	e := startRBACProxy(t, c)
	token := e.token
	fresh := c.RequestToken(t, e.ns, e.caller, cluster.TokenOptions{Audiences: []string{e.arg(t, "auth-token-audiences")}})

	ctx, cancel := ctxFor(t, 3*time.Minute)
	defer cancel()
	tr0, sar0, err := reviewCounts(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	const calls, workers = 1000, 10
	start := time.Now()
	var wg sync.WaitGroup
	failures := make(chan string, calls)
	for w := range workers {
		wg.Go(func() {
			for i := range calls / workers {
				ns := e.allowed
				if (w+i)%2 == 1 {
					ns = e.allowed2
				}
				if code, _ := e.get(t, ctx, "/metrics?namespace="+ns, token, nil); code != http.StatusOK {
					failures <- fmt.Sprintf("GET ?namespace=%s = %d", ns, code)
				}
			}
		})
	}
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Fatal(f)
	}
	trs, sars := settledReviewCounts(t, ctx, c, tr0, sar0, 1, 2)
	t.Logf("observed: %d requests from one token over 2 namespaces in %v cost %v TokenReviews and %v SubjectAccessReviews",
		calls, time.Since(start).Round(time.Millisecond), trs, sars)
	if trs != 1 || sars != 2 {
		t.Errorf("reviews for %d requests = %v TokenReviews, %v SubjectAccessReviews; want 1 and 2 (one per distinct rewrite)", calls, trs, sars)
	}

	c.Stop()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := c.Restart(context.Background()); err != nil {
				t.Errorf("Restart: %v", err)
			}
		}
	})
	if code, _ := e.get(t, ctx, "/metrics?namespace="+e.allowed, token, nil); code != http.StatusOK {
		t.Errorf("warm token during the outage = %d; want 200 from the caches", code)
	}
	code, h := e.get(t, ctx, "/metrics?namespace="+e.allowed, fresh, nil)
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
		t.Errorf("new token during the outage = %d (Retry-After %q); want 503 with Retry-After", code, h.Get("Retry-After"))
	}
	restarted = true
	if err := c.Restart(context.Background()); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	// Reviews are retried by the next request, not cached as failures.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _ := e.get(t, ctx, "/metrics?namespace="+e.allowed, fresh, nil)
		if code == http.StatusOK {
			break
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("new token after the restart = %d; want 200", code)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
