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

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// upstreamMetrics is what the fake node endpoint behind metricsproxy serves
// on /metrics.
const upstreamMetrics = "# TYPE node_up gauge\nnode_up 1\n"

// proxy is metricsproxy from examples/metricsproxy/deploy (its DaemonSet's
// metricsproxy container on a node of its own, with the manifests'
// ServiceAccount and RBAC) in front of a fake node endpoint, and the
// scraper of examples/metricsproxy/deploy/client, bound by the client's
// ClusterRoleBinding, with the token the kubelet would project into it.
type proxy struct {
	*server
	ns              string
	clientManifests *cluster.Manifests
	// scraper is the client's ServiceAccount, token its projected token.
	scraper, token string
	audience       string
	node           string
	roots          *x509.CertPool
}

// startProxy runs metricsproxy for a new Node, serving /metrics and
// /logs/ of an httptest upstream, with the cluster's client CA as
// --client-ca-file (for the certificate cases), and checks the probes of
// the manifests on its --metrics-listen port.
func startProxy(t testing.TB, c *cluster.Cluster) *proxy {
	t.Helper()
	return startProxyWith(t, c, deployOptions{})
}

// startProxyWith is startProxy with the manifests deployed with o (the
// client with them: in their namespace, with their suffix), after the
// README's Deploy steps: the Secret metricsproxy-tls with a serving
// certificate and the ConfigMap metricsproxy-ca with its CA, which the
// client trusts.
func startProxyWith(t testing.TB, c *cluster.Cluster, o deployOptions) *proxy {
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
	m := deploy(t, c, deployDir("metricsproxy"), o)
	p := &proxy{ns: m.Namespace(), node: c.CreateNode(t, cluster.UniqueName("node-m")).Name}
	ca := servingSecret(t, c, nil, p.ns, "metricsproxy-tls", "metricsproxy-ca", "metricsproxy."+p.ns+".svc")
	p.clientManifests = deploy(t, c, deployDir("metricsproxy", "client"), deployOptions{shipped: o.shipped, namespace: p.ns, suffix: m.NameSuffix})
	p.scraper = p.clientManifests.Name("metrics-scraper")
	p.token = projectedToken(t, c, p.clientManifests, "Job", "metricsproxy-smoke", "", "/var/run/secrets/metricsproxy")

	clientCA := writeFile(t, "client-ca.crt", c.ClientCA().CertPEM)
	p.server = startServer(t, c, m, "DaemonSet", "metricsproxy", p.node, "--upstream="+upstream.URL, "--listen=127.0.0.1:0",
		"--metrics-listen=127.0.0.1:0", "--client-ca-file="+clientCA)
	if got := p.arg(t, "node-name"); got != p.node {
		t.Fatalf("--node-name=%q from the downward API; want the pod's node %q", got, p.node)
	}
	p.audience = p.arg(t, "audience")
	metrics := strings.TrimSuffix(strings.TrimPrefix(p.lineAfter(t, "metrics on "), "http://"), "/metrics")
	p.checkProbes(t, map[int32]string{9090: metrics})
	p.roots = ca.Pool()
	return p
}

// metricsReader is the client's ClusterRole: get nodes/metrics.
func (p *proxy) metricsReader() string {
	return p.clientManifests.Name("metricsproxy-node-metrics-reader")
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
	// The client's ClusterRole, bound to certificate users too.
	certUser, certGroup := cluster.UniqueName("scraper"), cluster.UniqueName("scrapers")
	c.BindClusterRole(t, "", p.metricsReader(), cluster.UserSubject(certUser), cluster.GroupSubject(certGroup))
	c.WaitForAccess(t, nodeMetricsSpec(serviceAccountUser(p.ns, p.scraper), nil, p.node), true)
	c.WaitForAccess(t, nodeMetricsSpec(certUser, nil, p.node), true)
	c.WaitForAccess(t, nodeMetricsSpec("anyone", []string{certGroup}, p.node), true)
	token := p.token
	apiServerToken := c.RequestToken(t, p.ns, p.scraper, cluster.TokenOptions{})

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
