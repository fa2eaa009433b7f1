package suite_test

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

const (
	// revocationDeadline is how soon after a pod or a RoleBinding is
	// deleted its token or permission must be refused (issue #31): five
	// times faster than the API server's own token cache (10 s), thirty
	// times the servers' default TTLs (1 m).
	revocationDeadline = 2 * time.Second
	// revocationTries is how many deletions each pod case measures, all at
	// once: the p99 of 20 is their maximum.
	revocationTries = 20
	// revocationPoll is how often a try asks again.
	revocationPoll = 20 * time.Millisecond
	// revokerSyncTimeout bounds the wait for a revoker to be in sync: a
	// list and a watch each, after the API server answered.
	revokerSyncTimeout = 30 * time.Second
)

// exampleMetric returns the sum of the samples of the metric name in the
// Prometheus text an example serves at http://addr/metrics, over the
// series whose labels contain each of match (`reason="relist"`); -1 when
// it has none.
func exampleMetric(ctx context.Context, addr, name string, match ...string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	sum, found := 0.0, false
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest == "" || (rest[0] != ' ' && rest[0] != '{')) {
			continue
		}
		if slices.ContainsFunc(match, func(m string) bool { return !strings.Contains(rest, m) }) {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", name, line, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		return -1, nil
	}
	return sum, nil
}

// waitRevokerSynced waits, boundedly, until the example serving metrics at
// addr says its revoker is in sync (reviewauth_revocation_synced 1), and
// returns how long that took.
func waitRevokerSynced(t testing.TB, addr string) time.Duration {
	t.Helper()
	start := time.Now()
	var v float64
	var err error
	for time.Since(start) < revokerSyncTimeout {
		if v, err = exampleMetric(t.Context(), addr, "reviewauth_revocation_synced"); err == nil && v == 1 {
			return time.Since(start)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("reviewauth_revocation_synced = %v (%v) after %v; want 1", v, err, revokerSyncTimeout)
	return 0
}

// metricsAddr is the address of an example's --metrics-listen port, from
// its "metrics on" line.
func metricsAddr(t testing.TB, s *server) string {
	t.Helper()
	return strings.TrimSuffix(strings.TrimPrefix(s.lineAfter(t, "metrics on "), "http://"), "/metrics")
}

// revocationTry is one measurement: probe answers 200 (the token or
// permission is cached), revoke deletes what it rests on, then probe is
// asked every revocationPoll until it answers refused; the delay is from
// the moment revoke returned. It gives up after limit. It uses no
// testing.T, to run in goroutines.
type revocationTry struct {
	probe   func(context.Context) (int, error)
	revoke  func(context.Context) error
	refused int
}

func (r revocationTry) run(ctx context.Context, limit time.Duration) (time.Duration, error) {
	if code, err := r.probe(ctx); err != nil || code != http.StatusOK {
		return 0, fmt.Errorf("before: %d, %v; want 200", code, err)
	}
	if err := r.revoke(ctx); err != nil {
		return 0, err
	}
	start := time.Now()
	for {
		code, err := r.probe(ctx)
		switch {
		case err != nil:
			return 0, err
		case code == r.refused:
			return time.Since(start), nil
		case code != http.StatusOK:
			return 0, fmt.Errorf("after %v: %d; want 200 or %d", time.Since(start), code, r.refused)
		case time.Since(start) > limit:
			return 0, fmt.Errorf("still 200 after %v; want %d", limit, r.refused)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(revocationPoll):
		}
	}
}

// runTries runs tries at once and fails the test unless every one is
// refused within revocationDeadline; it logs p50 and p99 (nearest rank).
func runTries(t *testing.T, what string, tries []revocationTry) []time.Duration {
	t.Helper()
	delays := make([]time.Duration, len(tries))
	errs := make([]error, len(tries))
	var wg sync.WaitGroup
	for i, tr := range tries {
		wg.Go(func() { delays[i], errs[i] = tr.run(t.Context(), 3*revocationDeadline) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s, try %d: %v", what, i, err)
		}
	}
	sorted := slices.Sorted(slices.Values(delays))
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(sorted))+0.999999) - 1
		return sorted[max(i, 0)]
	}
	t.Logf("observed: %s: refused after p50 %v, p99 %v (max %v, min %v) over %d tries at once, polled every %v",
		what, rank(0.5).Round(time.Millisecond), rank(0.99).Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond),
		sorted[0].Round(time.Millisecond), len(sorted), revocationPoll)
	if p99 := rank(0.99); p99 > revocationDeadline {
		t.Errorf("%s: p99 %v; want within %v", what, p99, revocationDeadline)
	}
	return delays
}

// getCode sends GET url with token through client and returns the status.
func getCode(ctx context.Context, client *http.Client, u, token string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// deletePod deletes ns/name at once (grace period 0, as cluster.DeletePod).
func deletePod(c *cluster.Cluster, ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		return c.Clientset().CoreV1().Pods(ns).Delete(ctx, name, *metav1.NewDeleteOptions(0))
	}
}

// TestRevocation: with the servers at their default TTLs (1 m), a deleted
// pod's token is refused through metricsproxy and draproxy within 2 s
// (p99 of 20 tries), a deleted RoleBinding's permission through rbacproxy,
// and a driver's deleted ClusterRoleBinding and RoleBinding through
// draproxy (which forwards as its node: the API server does not check the
// driver again), because their revokers (the manifests' defaults) watch
// the pods of their node and RBAC; and where a revoker's watches never
// deliver, it says it is out of sync and the TTL still bounds how long a
// deleted pod's token works. (TestOutage restarts the API server under
// metricsproxy: its revoker lists again and still revokes.)
func TestRevocation(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)

	t.Run("metricsproxy, pod deleted", func(t *testing.T) {
		t.Parallel()
		p := startProxy(t, c)
		addr := metricsAddr(t, p.server)
		t.Logf("observed: metricsproxy's revoker in sync %v after it printed its metrics address", waitRevokerSynced(t, addr).Round(time.Millisecond))
		c.WaitForAccess(t, nodeMetricsSpec(serviceAccountUser(p.ns, p.scraper), nil, p.node), true)
		web := p.client(t)
		var tries []revocationTry
		for range revocationTries {
			// A scraper on metricsproxy's node: the revoker watches the
			// pods of its node.
			pod := c.CreatePodFromTemplate(t, p.clientManifests, "Job", "metricsproxy-smoke", cluster.PodOptions{NodeName: p.node})
			token := podProjectedToken(t, c, pod, "/var/run/secrets/metricsproxy")
			tries = append(tries, revocationTry{
				probe:   func(ctx context.Context) (int, error) { return getCode(ctx, web, p.addr+"/metrics", token) },
				revoke:  deletePod(c, pod.Namespace, pod.Name),
				refused: http.StatusUnauthorized,
			})
		}
		runTries(t, "metricsproxy, a deleted pod's token", tries)
		if v, err := exampleMetric(t.Context(), addr, "reviewauth_revocations_total", `resource="pods"`); err != nil || v < revocationTries {
			t.Errorf("metricsproxy's reviewauth_revocations_total{resource=pods} = %v, %v; want at least %d", v, err, revocationTries)
		}
	})

	// draproxy from its manifests at its defaults (its caches' TTLs, its
	// revoker's --revocation-watch), shared by its two cases.
	t.Run("draproxy", func(t *testing.T) {
		t.Parallel()
		e := setupDRA(t, c)
		waitRevokerSynced(t, metricsAddr(t, e.proxy))
		client := draproxyHTTP(t, e)
		t.Run("pod deleted", func(t *testing.T) {
			t.Parallel()
			var tries []revocationTry
			for range revocationTries {
				// Another pod of identity 1's DaemonSet on node A.
				pod := e.podA.DeepCopy()
				pod.ObjectMeta = metav1.ObjectMeta{Namespace: e.podA.Namespace, Name: cluster.UniqueName("driver"), Labels: e.podA.Labels}
				pod.Status = corev1.PodStatus{}
				pod, err := c.Clientset().CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				token := e.token(t, pod)
				path := "/api/v1/nodes/" + e.nodeA.Name
				tries = append(tries, revocationTry{
					probe:   func(ctx context.Context) (int, error) { return getCode(ctx, client, "http://localhost"+path, token) },
					revoke:  deletePod(c, pod.Namespace, pod.Name),
					refused: http.StatusUnauthorized,
				})
			}
			runTries(t, "draproxy, a deleted pod's token", tries)
		})
		t.Run("binding deleted", func(t *testing.T) {
			t.Parallel()
			draproxyBindingsDeleted(t, c, e, client)
		})
	})

	t.Run("rbacproxy, RoleBinding deleted", func(t *testing.T) {
		t.Parallel()
		e := startRBACProxy(t, c, "--metrics-listen=127.0.0.1:0")
		waitRevokerSynced(t, metricsAddr(t, e.server))
		// The client's ClusterRole, as the flow's own bindings name it.
		rbs, err := c.Clientset().RbacV1().RoleBindings(e.allowed).List(t.Context(), metav1.ListOptions{})
		if err != nil || len(rbs.Items) != 1 {
			t.Fatalf("the bindings of %s: %v, %v; want one", e.allowed, rbs, err)
		}
		reader := rbs.Items[0].RoleRef
		const n = 10
		var tries []revocationTry
		for range n {
			ns := c.UniqueNamespace(t, "revoked")
			rb, err := c.Clientset().RbacV1().RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"}, RoleRef: reader,
				Subjects: []rbacv1.Subject{cluster.ServiceAccountSubject(e.ns, e.caller)},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c.WaitForAccess(t, e.spec(ns), true)
			tries = append(tries, revocationTry{
				probe: func(ctx context.Context) (int, error) {
					return getCode(ctx, e.client, e.addr+"/metrics?namespace="+ns, e.token)
				},
				revoke: func(ctx context.Context) error {
					return c.Clientset().RbacV1().RoleBindings(ns).Delete(ctx, rb.Name, metav1.DeleteOptions{})
				},
				refused: http.StatusForbidden,
			})
		}
		runTries(t, "rbacproxy, a deleted RoleBinding's permission", tries)
	})

	t.Run("watches never deliver, TTL bounds", func(t *testing.T) {
		t.Parallel()
		revokerOutOfSync(t, c)
	})
}

// draproxyHTTP is an HTTP client of draproxy's socket; its idle
// connections are closed when the test ends.
func draproxyHTTP(t testing.TB, e *draEnv) *http.Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", e.socket)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: callTimeout}
}

// draproxyBindingsDeleted: a driver's permission removed ends through
// draproxy within 2 s. draproxy forwards as its node, so the API server
// never checks the driver's RBAC on what it forwards: only draproxy's own
// SubjectAccessReviews do, whose Allow is cached for a minute, and only
// its revoker's watch of RBAC flushes it. Ten driver identities on node A
// are each allowed to list node A's ResourceSlices (cluster-scoped) by a
// ClusterRoleBinding of the driver part's ClusterRole, and ten each to get
// a claim of a workload pod on node A by a RoleBinding of it in the
// claim's namespace; each binding is deleted while draproxy has the
// identity's Allow cached, and the identity's next request must be 403
// within 2 s (p99 of each ten).
func draproxyBindingsDeleted(t *testing.T, c *cluster.Cluster, e *draEnv, client *http.Client) {
	ctx := t.Context()
	rbac := c.Clientset().RbacV1()
	// The driver part's ClusterRole, as identity 1's ClusterRoleBinding
	// names it.
	crbs, err := rbac.ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var role *rbacv1.RoleRef
	for _, b := range crbs.Items {
		if slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == e.ns && s.Name == e.sa
		}) {
			role = &b.RoleRef
		}
	}
	if role == nil {
		t.Fatalf("no ClusterRoleBinding names the driver %s/%s", e.ns, e.sa)
	}
	claim := cluster.UniqueName("claim")
	e.claim(t, claim, e.consumer(t, cluster.UniqueName("job"), e.nodeA.Name, claim))
	slicesOfA := "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=" + url.QueryEscape("spec.nodeName="+e.nodeA.Name)
	claimPath := "/apis/resource.k8s.io/v1/namespaces/" + e.ns + "/resourceclaims/" + claim

	// A driver identity: a ServiceAccount of the drivers' namespace and a
	// token of it bound to a pod on node A, for draproxy's audience.
	identity := func() (string, string) {
		sa := cluster.UniqueName("driver")
		c.CreateServiceAccount(t, e.ns, sa)
		pod, err := c.Clientset().CoreV1().Pods(e.ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: sa},
			Spec: corev1.PodSpec{NodeName: e.nodeA.Name, ServiceAccountName: sa, AutomountServiceAccountToken: new(false),
				Containers: []corev1.Container{{Name: "plugin", Image: cluster.PauseImage}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sa, c.RequestToken(t, e.ns, sa, cluster.TokenOptions{BoundPod: pod, Audiences: []string{e.audience}})
	}
	const n = 10
	type bound struct {
		token  string
		spec   authorizationv1.SubjectAccessReviewSpec
		path   string
		delete func(context.Context) error
	}
	var clusterWide, inNamespace []bound
	for range n {
		sa, token := identity()
		subject := []rbacv1.Subject{cluster.ServiceAccountSubject(e.ns, sa)}
		crb, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa}, RoleRef: *role, Subjects: subject}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		clusterWide = append(clusterWide, bound{token: token, path: slicesOfA,
			spec: authorizationv1.SubjectAccessReviewSpec{User: serviceAccountUser(e.ns, sa), ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "list", Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}},
			delete: func(ctx context.Context) error {
				return rbac.ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{})
			}})

		sa, token = identity()
		subject = []rbacv1.Subject{cluster.ServiceAccountSubject(e.ns, sa)}
		rb, err := rbac.RoleBindings(e.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa}, RoleRef: *role, Subjects: subject}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		inNamespace = append(inNamespace, bound{token: token, path: claimPath,
			spec: authorizationv1.SubjectAccessReviewSpec{User: serviceAccountUser(e.ns, sa), ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: e.ns, Verb: "get", Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims", Name: claim}},
			delete: func(ctx context.Context) error {
				return rbac.RoleBindings(e.ns).Delete(ctx, rb.Name, metav1.DeleteOptions{})
			}})
	}
	tries := func(bs []bound) []revocationTry {
		var out []revocationTry
		for _, b := range bs {
			// The API server's RBAC has the binding: the first request is
			// allowed, and draproxy caches the Allow.
			c.WaitForAccess(t, b.spec, true)
			out = append(out, revocationTry{
				probe: func(ctx context.Context) (int, error) {
					return getCode(ctx, client, "http://localhost"+b.path, b.token)
				},
				revoke:  b.delete,
				refused: http.StatusForbidden,
			})
		}
		return out
	}
	runTries(t, "draproxy, a driver's deleted ClusterRoleBinding (list its node's ResourceSlices)", tries(clusterWide))
	runTries(t, "draproxy, a driver's deleted RoleBinding (get a claim of its node)", tries(inNamespace))
}

// blackHoleWatches forwards every request to the API server but watches,
// which it accepts and never answers: a revoker behind it never hears of a
// change.
func blackHoleWatches(t testing.TB, c *cluster.Cluster) *httptest.Server {
	t.Helper()
	cfg := c.AnonymousConfig()
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	up := &http.Transport{TLSClientConfig: tlsCfg}
	t.Cleanup(up.CloseIdleConnections)
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }, Transport: up}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if w := r.URL.Query().Get("watch"); w == "true" || w == "1" {
			<-r.Context().Done()
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// revokerOutOfSync runs metricsproxy (from its manifests, the token cache's
// TTL at 3 s) with every request to the API server through
// blackHoleWatches: its revoker never syncs, says so, and a deleted pod's
// token is still accepted 1 s after the deletion (nothing revoked it) and
// refused within the TTL plus the API server's own token cache (10 s).
func revokerOutOfSync(t *testing.T, c *cluster.Cluster) {
	const ttl = 3 * time.Second
	const apiServerTokenCache = 10 * time.Second
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, upstreamMetrics)
	}))
	t.Cleanup(upstream.Close)
	m := deploy(t, c, deployDir("metricsproxy"), deployOptions{})
	// The README's Deploy step: the serving certificate's Secret, its CA.
	ca := servingSecret(t, c, nil, m.Namespace(), "metricsproxy-tls", "metricsproxy-ca")
	node := c.CreateNode(t, cluster.UniqueName("node-m")).Name
	client := deploy(t, c, deployDir("metricsproxy", "client"), deployOptions{namespace: m.Namespace(), suffix: m.NameSuffix})
	s, bin, args := serverCommand(t, c, m, "DaemonSet", "metricsproxy", node, "--upstream="+upstream.URL, "--listen=127.0.0.1:0",
		"--metrics-listen=127.0.0.1:0", "--authentication-token-webhook-cache-ttl="+ttl.String())

	// The container's kubeconfig (its token), pointed at the black hole.
	hole := blackHoleWatches(t, c)
	kc, err := clientcmd.LoadFromFile(s.container.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = hole.URL
		cl.CertificateAuthority = ""
		cl.CertificateAuthorityData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hole.Certificate().Raw})
	}
	proxied := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, proxied); err != nil {
		t.Fatal(err)
	}
	args = cluster.SetFlags(args, "--authentication-kubeconfig="+proxied, "--authorization-kubeconfig="+proxied)
	s.example = startExample(t, filepath.Base(bin), args...)
	addr := metricsAddr(t, s)
	// The gauge is exported once the revoker has first set it, which may
	// come just after the metrics port answers (the metric absent: -1).
	v, err := exampleMetric(t.Context(), addr, "reviewauth_revocation_synced")
	for start := time.Now(); err == nil && v == -1 && time.Since(start) < revokerSyncTimeout; {
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(100 * time.Millisecond):
		}
		v, err = exampleMetric(t.Context(), addr, "reviewauth_revocation_synced")
	}
	if err != nil || v != 0 {
		t.Errorf("reviewauth_revocation_synced with watches that never deliver = %v, %v; want 0", v, err)
	}

	scraper := client.Name("metrics-scraper")
	c.WaitForAccess(t, nodeMetricsSpec(serviceAccountUser(m.Namespace(), scraper), nil, node), true)
	pod := c.CreatePodFromTemplate(t, client, "Job", "metricsproxy-smoke", cluster.PodOptions{NodeName: node})
	token := podProjectedToken(t, c, pod, "/var/run/secrets/metricsproxy")
	tr := &http.Transport{TLSClientConfig: tlsConfig(ca.Pool())}
	t.Cleanup(tr.CloseIdleConnections)
	web := &http.Client{Transport: tr, Timeout: callTimeout}
	probe := func(ctx context.Context) (int, error) { return getCode(ctx, web, s.addr+"/metrics", token) }
	if code, err := probe(t.Context()); err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics = %d, %v; want 200", code, err)
	}
	if err := deletePod(c, pod.Namespace, pod.Name)(t.Context()); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	deleted := time.Now()
	select {
	case <-t.Context().Done():
		t.Fatal(t.Context().Err())
	case <-time.After(time.Second):
	}
	if code, err := probe(t.Context()); err != nil || code != http.StatusOK {
		t.Errorf("GET /metrics 1 s after the pod's deletion, the revoker out of sync = %d, %v; want 200 (cached: nothing revoked it)", code, err)
	}
	_, err = revocationTry{probe: probe, revoke: func(context.Context) error { return nil }, refused: http.StatusUnauthorized}.run(t.Context(), ttl+apiServerTokenCache+2*time.Second)
	if err != nil {
		t.Fatalf("a deleted pod's token, the revoker out of sync: %v", err)
	}
	t.Logf("observed: the revoker out of sync (watches never deliver): a deleted pod's token refused %v after the deletion (TTL %v + the API server's token cache %v)",
		time.Since(deleted).Round(100*time.Millisecond), ttl, apiServerTokenCache)
	if v, err := exampleMetric(t.Context(), addr, "reviewauth_revocation_synced"); err != nil || v != 0 {
		t.Errorf("reviewauth_revocation_synced at the end = %v, %v; want 0", v, err)
	}
}
