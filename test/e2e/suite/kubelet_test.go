package suite_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// upstreamMetrics is what the fake node endpoint behind metricsproxy serves
// on /metrics.
const upstreamMetrics = "# TYPE node_up gauge\nnode_up 1\n"

// proxy is a running metricsproxy example in front of a fake node
// endpoint.
type proxy struct {
	*example
	audience string
	node     string
	roots    *x509.CertPool
}

// startProxy runs the metricsproxy example for a made-up node, with a
// serving certificate from a fresh CA and the cluster's client CA as
// --client-ca-file, in front of an httptest server serving /metrics and
// /logs/.
func startProxy(t testing.TB, c *cluster.Cluster) *proxy {
	t.Helper()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/metrics":
			_, _ = io.WriteString(w, upstreamMetrics)
		case strings.HasPrefix(r.URL.Path, "/logs/"):
			_, _ = io.WriteString(w, "kubelet.log\n")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(upstream.Close)
	kubeconfig := reviewerKubeconfig(t, c, "metricsproxy")
	certFile, keyFile, roots := servingCert(t)
	clientCA := writeFile(t, "client-ca.crt", c.ClientCA().CertPEM)
	p := &proxy{audience: cluster.UniqueName("metricsproxy") + ".example.com", node: cluster.UniqueName("node-m"), roots: roots}
	p.example = startExample(t, metricsProxyBin, "--upstream="+upstream.URL, "--listen=127.0.0.1:0",
		"--kubeconfig="+kubeconfig, "--audience="+p.audience, "--node-name="+p.node,
		"--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile, "--client-ca-file="+clientCA)
	return p
}

// client returns an HTTP client trusting the proxy and presenting certs;
// its idle connections are closed when the test ends.
func (p *proxy) client(t testing.TB, certs ...tls.Certificate) *http.Client {
	tr := &http.Transport{TLSClientConfig: tlsConfig(p.roots, certs...)}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: callTimeout}
}

// get requests path with token (if any) and returns the status code and
// body.
func (p *proxy) get(ctx context.Context, t testing.TB, client *http.Client, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// nodeSubresource is the rule for one kubelet API subresource.
func nodeSubresource(sub string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes/" + sub}}
}

// nodeMetricsSpec is the SubjectAccessReview metricsproxy makes for /metrics.
func nodeMetricsSpec(user string, groups []string, node string) authorizationv1.SubjectAccessReviewSpec {
	return authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &authorizationv1.ResourceAttributes{
		Verb: "get", Resource: "nodes", Subresource: "metrics", Name: node,
	}}
}

// TestKubeletMetricsProxy runs the kubelet-style flow: a Prometheus
// ServiceAccount and client certificates authorized by RBAC on
// nodes/metrics through the metricsproxy example.
func TestKubeletMetricsProxy(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	p := startProxy(t, c)
	ns := c.UniqueNamespace(t, "monitoring")
	c.CreateServiceAccount(t, ns, "prometheus")
	role := cluster.UniqueName("node-metrics")
	c.CreateClusterRole(t, role, nodeSubresource("metrics"))
	certUser, certGroup := cluster.UniqueName("scraper"), cluster.UniqueName("scrapers")
	c.BindClusterRole(t, "", role, cluster.ServiceAccountSubject(ns, "prometheus"), cluster.UserSubject(certUser), cluster.GroupSubject(certGroup))
	c.WaitForAccess(t, nodeMetricsSpec(serviceAccountUser(ns, "prometheus"), nil, p.node), true)
	c.WaitForAccess(t, nodeMetricsSpec(certUser, nil, p.node), true)
	c.WaitForAccess(t, nodeMetricsSpec("anyone", []string{certGroup}, p.node), true)
	token := c.RequestToken(t, ns, "prometheus", cluster.TokenOptions{Audiences: []string{p.audience}})
	apiServerToken := c.RequestToken(t, ns, "prometheus", cluster.TokenOptions{})

	cert := func(user string, groups ...string) tls.Certificate {
		t.Helper()
		crt, err := c.ClientCA().ClientCert(user, groups...)
		if err != nil {
			t.Fatal(err)
		}
		return crt
	}
	otherCA, err := cluster.NewCA("not-the-client-ca")
	if err != nil {
		t.Fatal(err)
	}
	untrusted, err := otherCA.ClientCert(certUser, certGroup)
	if err != nil {
		t.Fatal(err)
	}

	plain := p.client(t)
	tests := []struct {
		name   string
		client *http.Client
		token  string
		path   string
		want   int
	}{
		{name: "prometheus token /metrics", client: plain, token: token, path: "/metrics", want: http.StatusOK},
		{name: "prometheus token /logs/", client: plain, token: token, path: "/logs/", want: http.StatusForbidden},
		{name: "prometheus token /stats/summary", client: plain, token: token, path: "/stats/summary", want: http.StatusForbidden},
		{name: "API server audience token", client: plain, token: apiServerToken, path: "/metrics", want: http.StatusUnauthorized},
		{name: "no credential", client: plain, path: "/metrics", want: http.StatusUnauthorized},
		{name: "certificate, CN bound", client: p.client(t, cert(certUser)), path: "/metrics", want: http.StatusOK},
		{name: "certificate, O bound", client: p.client(t, cert(cluster.UniqueName("someone"), certGroup)), path: "/metrics", want: http.StatusOK},
		{name: "certificate, CN bound, /logs/", client: p.client(t, cert(certUser)), path: "/logs/", want: http.StatusForbidden},
		{name: "certificate, unbound", client: p.client(t, cert(cluster.UniqueName("stranger"), cluster.UniqueName("strangers"))), path: "/metrics", want: http.StatusForbidden},
		{name: "certificate from another CA", client: p.client(t, untrusted), path: "/metrics", want: http.StatusUnauthorized},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := p.get(t.Context(), t, tc.client, tc.path, tc.token)
			if code != tc.want {
				t.Fatalf("GET %s = %d %q; want %d", tc.path, code, body, tc.want)
			}
			if tc.want == http.StatusOK && body != upstreamMetrics {
				t.Errorf("GET %s = %q; want the upstream's %q", tc.path, body, upstreamMetrics)
			}
			if tc.token != "" && strings.Contains(body, tc.token) {
				t.Errorf("GET %s = %q; the body contains the token", tc.path, body)
			}
		})
	}
}
