package suite_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// controllerRuntimeBin is examples/controllerruntime, a module of its own
// (controller-runtime stays out of the examples module), built next to
// the other examples.
const controllerRuntimeBin = "controllerruntime"

var (
	controllerRuntimeBuild    sync.Once
	controllerRuntimeBuildErr error
)

// buildControllerRuntime builds the controllerruntime example into the
// examples' directory.
func buildControllerRuntime(t testing.TB) {
	t.Helper()
	dir := buildExamples(t)
	controllerRuntimeBuild.Do(func() {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), exampleBuildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "-C", filepath.Join(examplesDir(), controllerRuntimeBin), "build",
			"-trimpath", "-o", filepath.Join(dir, controllerRuntimeBin), ".")
		cmd.Env = append(os.Environ(), exampleBuildEnv...)
		if out, err := cmd.CombinedOutput(); err != nil {
			controllerRuntimeBuildErr = fmt.Errorf("go build of the controllerruntime example: %v\n%s", err, out)
			return
		}
		fmt.Fprintf(os.Stderr, "e2e: controllerruntime example built in %v\n", time.Since(start).Round(time.Millisecond))
	})
	if controllerRuntimeBuildErr != nil {
		t.Fatal(controllerRuntimeBuildErr)
	}
}

// crEnv is a namespace with a scraper bound, as kubebuilder's
// config/prometheus and config/rbac bind it, to get on the nonResourceURL
// /metrics, a service account without that binding, and the manager's
// own service account (system:auth-delegator, and ConfigMaps of the
// watched namespace for its controller).
type crEnv struct {
	c          *cluster.Cluster
	ns         string
	audience   string
	kubeconfig string
	roots      *x509.CertPool
	certDir    string
}

func newCREnv(t *testing.T, c *cluster.Cluster) *crEnv {
	t.Helper()
	buildControllerRuntime(t)
	e := &crEnv{c: c, ns: c.UniqueNamespace(t, "monitoring"), audience: cluster.UniqueName("operator-metrics")}
	c.CreateServiceAccount(t, e.ns, "prometheus")
	c.CreateServiceAccount(t, e.ns, "stranger")
	reader := cluster.UniqueName("metrics-reader")
	c.CreateClusterRole(t, reader, rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}})
	c.BindClusterRole(t, "", reader, cluster.ServiceAccountSubject(e.ns, "prometheus"))
	c.WaitForAccess(t, e.spec("prometheus"), true)
	configMaps := cluster.UniqueName("configmap-reader")
	c.CreateClusterRole(t, configMaps, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}})
	e.kubeconfig = reviewerKubeconfig(t, c, "controller-manager", configMaps)

	// The metrics server's certificate, as kubebuilder's cert-manager
	// overlay mounts it: tls.crt and tls.key in one directory.
	ca, err := cluster.NewCA(cluster.UniqueName("e2e-metrics-ca"))
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue(cluster.CertOptions{CommonName: "controller-manager-metrics", DNSNames: []string{"localhost"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	e.certDir = t.TempDir()
	for name, b := range map[string][]byte{"tls.crt": cert, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(e.certDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e.roots = ca.Pool()
	return e
}

// spec is the SubjectAccessReview both filters send for GET /metrics by
// the service account sa.
func (e *crEnv) spec(sa string) authorizationv1.SubjectAccessReviewSpec {
	return authorizationv1.SubjectAccessReviewSpec{User: serviceAccountUser(e.ns, sa),
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}
}

// token returns a new token of sa, for the metrics' audience or, with
// apiServer, for the API server's (what Prometheus scrapes with by
// default, and controller-runtime's filter accepts).
func (e *crEnv) token(t testing.TB, sa string, apiServer bool) string {
	t.Helper()
	o := cluster.TokenOptions{Audiences: []string{e.audience}}
	if apiServer {
		o = cluster.TokenOptions{}
	}
	return e.c.RequestToken(t, e.ns, sa, o)
}

// manager is a running controllerruntime example.
type manager struct {
	*example
	client *http.Client
}

// start runs the example with --metrics-auth=auth (reviewauth or
// controller-runtime), its metrics server on a loopback port with the
// test's certificate, watching watchNamespace's ConfigMaps when not empty.
func (e *crEnv) start(t *testing.T, auth, watchNamespace string) *manager {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	args := []string{"--kubeconfig=" + e.kubeconfig, "--metrics-bind-address=" + addr, "--metrics-auth=" + auth,
		"--metrics-cert-path=" + e.certDir}
	if auth == "reviewauth" {
		args = append(args, "--metrics-audience="+e.audience)
	}
	if watchNamespace != "" {
		args = append(args, "--watch-namespace="+watchNamespace)
	}
	m := &manager{example: startExample(t, controllerRuntimeBin, args...)}
	tr := &http.Transport{TLSClientConfig: tlsConfig(e.roots)}
	t.Cleanup(tr.CloseIdleConnections)
	m.client = &http.Client{Transport: tr, Timeout: callTimeout}
	return m
}

// scrape gets /metrics with token (if any) and returns the status, the
// Retry-After header and the body.
func (m *manager) scrape(t testing.TB, ctx context.Context, token string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}

// TestControllerRuntimeMetrics runs a controller-runtime v0.25.2 manager
// (examples/controllerruntime, kubebuilder's metrics scaffold) with
// reviewauth's FilterProvider against the real API server, next to the
// same manager with controller-runtime's own filter: the scraper bound to
// get /metrics is served by both, another service account is 403 by both;
// reviewauth wants a token for the metrics' audience and refuses the
// scraper's API server token (401), which controller-runtime accepts;
// reviewauth's metrics and the controller's are served on /metrics.
func TestControllerRuntimeMetrics(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	e := newCREnv(t, c)
	watched := c.UniqueNamespace(t, "watched")
	ours := e.start(t, "reviewauth", watched)
	theirs := e.start(t, "controller-runtime", "")
	ctx, cancel := ctxFor(t, time.Minute)
	defer cancel()
	if _, err := c.Clientset().CoreV1().ConfigMaps(watched).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var tokens []string
	tok := func(sa string, apiServer bool) string {
		s := e.token(t, sa, apiServer)
		tokens = append(tokens, s)
		return s
	}
	tests := []struct {
		name  string
		m     *manager
		token string
		want  int
	}{
		{"reviewauth: scraper, metrics' audience", ours, tok("prometheus", false), http.StatusOK},
		{"reviewauth: scraper, API server audience", ours, tok("prometheus", true), http.StatusUnauthorized},
		{"reviewauth: no RBAC", ours, tok("stranger", false), http.StatusForbidden},
		{"reviewauth: no token", ours, "", http.StatusUnauthorized},
		{"controller-runtime: scraper, API server audience", theirs, tok("prometheus", true), http.StatusOK},
		{"controller-runtime: no RBAC", theirs, tok("stranger", true), http.StatusForbidden},
		{"controller-runtime: no token", theirs, "", http.StatusUnauthorized},
		// controller-runtime reviews without an audience: a token for
		// another audience is an error of the API server's, which it
		// answers with 500.
		{"controller-runtime: scraper, metrics' audience", theirs, tok("prometheus", false), http.StatusInternalServerError},
	}
	for _, tt := range tests {
		code, _, body := tt.m.scrape(t, ctx, tt.token)
		t.Logf("observed: %s: %d", tt.name, code)
		if code != tt.want {
			t.Errorf("%s: GET /metrics = %d; want %d\n%s", tt.name, code, tt.want, body)
		}
	}

	// On controller-runtime's registry: reviewauth's metrics and the
	// controller's, which counts the ConfigMap once its cache has synced.
	scraper := e.token(t, "prometheus", false)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, body := ours.scrape(t, ctx, scraper)
		if strings.Contains(body, `reviewauth_decisions_total{outcome="allowed",transport="http"}`) &&
			strings.Contains(body, "reviewauth_reviews_total{") && strings.Contains(body, "controllerruntime_example_reconciles_total 1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks reviewauth's or the controller's metrics:\n%s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	tokens = append(tokens, scraper)
	for _, m := range []*manager{ours, theirs} {
		out := m.stdout.String() + m.stderr.String()
		for _, tok := range tokens {
			if strings.Contains(out, tok) || strings.Contains(out, tok[len(tok)-40:]) {
				t.Errorf("the %s manager's output holds a token", m.name)
			}
		}
	}
}

// TestControllerRuntimeMetricsCostAndOutage counts, with the API server's
// apiserver_request_total, what 1,000 scrapes from one token cost with
// reviewauth's filter and with controller-runtime's, one after the other
// in the same run, from 10 scrapers at once and cold caches; then 1,000
// scrapes with a token the API server rejects; then stops the API server:
// reviewauth answers 503 with Retry-After where it cannot check, and
// serves what it has cached. It counts every review and stops the shared
// API server, so it does not run in parallel.
func TestControllerRuntimeMetricsCostAndOutage(t *testing.T) {
	c := cluster.Get(t)
	e := newCREnv(t, c)
	ours := e.start(t, "reviewauth", "")
	theirs := e.start(t, "controller-runtime", "")
	ctx, cancel := ctxFor(t, 5*time.Minute)
	defer cancel()

	const calls, workers = 1000, 10
	burst := func(m *manager, token string, want int) (trs, sars float64, took time.Duration) {
		t.Helper()
		tr0, sar0, err := reviewCounts(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var wg sync.WaitGroup
		failures := make(chan int, calls)
		for range workers {
			wg.Go(func() {
				for range calls / workers {
					if code, _, _ := m.scrape(t, ctx, token); code != want {
						failures <- code
					}
				}
			})
		}
		wg.Wait()
		took = time.Since(start)
		close(failures)
		for code := range failures {
			t.Fatalf("%s: a scrape got %d; want %d", m.name, code, want)
		}
		trs, sars = settledReviewCounts(t, ctx, c, tr0, sar0, 1, 0)
		return trs, sars, took
	}

	type row struct {
		name       string
		trs, sars  float64
		took       time.Duration
		maxTR, max float64 // reviewauth's bounds; 0: recorded only
	}
	var rows []row
	trs, sars, took := burst(ours, e.token(t, "prometheus", false), http.StatusOK)
	rows = append(rows, row{"reviewauth, allowed", trs, sars, took, 1, 1})
	trs, sars, took = burst(theirs, e.token(t, "prometheus", true), http.StatusOK)
	rows = append(rows, row{"controller-runtime, allowed", trs, sars, took, 0, 0})
	// A token the API server rejects: for another audience on each side.
	trs, sars, took = burst(ours, e.token(t, "prometheus", true), http.StatusUnauthorized)
	// The rejection is cached for 10 s: one review per 10 s of the burst.
	rows = append(rows, row{"reviewauth, rejected token", trs, sars, took, 1 + float64(took/(10*time.Second)), 0})
	trs, sars, took = burst(theirs, e.token(t, "prometheus", false), http.StatusInternalServerError)
	rows = append(rows, row{"controller-runtime, rejected token", trs, sars, took, 0, 0})
	for _, r := range rows {
		t.Logf("observed: %s: %d scrapes from one token (%d at once) in %v cost %v TokenReviews and %v SubjectAccessReviews",
			r.name, calls, workers, r.took.Round(time.Millisecond), r.trs, r.sars)
		if r.maxTR > 0 && (r.trs > r.maxTR || r.sars > r.max) {
			t.Errorf("%s: %v TokenReviews and %v SubjectAccessReviews; want at most %v and %v", r.name, r.trs, r.sars, r.maxTR, r.max)
		}
	}

	// Outage: a warm token is served from the caches, a new one is 503
	// with Retry-After (controller-runtime: recorded).
	warmOurs, warmTheirs := e.token(t, "prometheus", false), e.token(t, "prometheus", true)
	for _, p := range []struct {
		m   *manager
		tok string
	}{{ours, warmOurs}, {theirs, warmTheirs}} {
		if code, _, _ := p.m.scrape(t, ctx, p.tok); code != http.StatusOK {
			t.Fatalf("%s: warm-up scrape = %d; want 200", p.m.name, code)
		}
	}
	freshOurs, freshTheirs := e.token(t, "prometheus", false), e.token(t, "prometheus", true)
	c.Stop()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := c.Restart(context.Background()); err != nil {
				t.Errorf("Restart: %v", err)
			}
		}
	})
	if code, _, _ := ours.scrape(t, ctx, warmOurs); code != http.StatusOK {
		t.Errorf("reviewauth: warm token during the outage = %d; want 200 from the caches", code)
	}
	code, retryAfter, _ := ours.scrape(t, ctx, freshOurs)
	t.Logf("observed: outage, reviewauth: new token %d (Retry-After %q)", code, retryAfter)
	if code != http.StatusServiceUnavailable || retryAfter == "" {
		t.Errorf("reviewauth: new token during the outage = %d (Retry-After %q); want 503 with Retry-After", code, retryAfter)
	}
	warm, _, _ := theirs.scrape(t, ctx, warmTheirs)
	fresh, _, _ := theirs.scrape(t, ctx, freshTheirs)
	t.Logf("observed: outage, controller-runtime: warm token %d, new token %d", warm, fresh)
	restarted = true
	if err := c.Restart(context.Background()); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	// Nothing failed is cached: the next scrape after the restart passes.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _, _ := ours.scrape(t, ctx, freshOurs)
		if code == http.StatusOK {
			break
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("reviewauth: new token after the restart = %d; want 200", code)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
