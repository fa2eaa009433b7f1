package suite_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// TestHarnessClientCert checks that a certificate from ClientCA
// authenticates as CN/O and that RBAC bindings take effect.
func TestHarnessClientCert(t *testing.T) {
	c := cluster.Get(t)
	cfg, err := c.UserConfig("prometheus", "monitoring")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ssr, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview as client cert: %v", err)
	}
	u := ssr.Status.UserInfo
	t.Logf("observed: client certificate user = %+v", u)
	if u.Username != "prometheus" || !slices.Contains(u.Groups, "monitoring") {
		t.Errorf("SelfSubjectReview(cert CN=prometheus O=monitoring) = %q %q; want prometheus in monitoring", u.Username, u.Groups)
	}

	spec := authorizationv1.SubjectAccessReviewSpec{
		User:               "prometheus",
		Groups:             []string{"monitoring"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "metrics", Name: "n1"},
	}
	if st, err := c.SubjectAccessReview(ctx, spec); err != nil || st.Allowed {
		t.Fatalf("SubjectAccessReview(get nodes/metrics) before binding = %+v, %v; want denied", st, err)
	}
	role := cluster.UniqueName("node-metrics")
	c.CreateClusterRole(t, role, rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes/metrics"}})
	c.BindClusterRole(t, "", role, cluster.GroupSubject("monitoring"))
	c.WaitForAccess(t, spec, true)
}

// TestHarnessMetricsAndNodeToken checks MetricValue counts TokenReviews and
// that node-bound tokens carry the node.
func TestHarnessMetricsAndNodeToken(t *testing.T) {
	c := cluster.Get(t)
	ns := c.UniqueNamespace(t, "harness")
	c.CreateServiceAccount(t, ns, "dra")
	node := c.CreateNode(t, cluster.UniqueName("node-b"))
	tok := c.RequestToken(t, ns, "dra", cluster.TokenOptions{Audiences: []string{"dra.example"}, BoundNode: node})

	labels := map[string]string{"resource": "tokenreviews", "verb": "POST"}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	before, err := c.MetricValue(ctx, "apiserver_request_total", labels)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	for range n {
		st := c.ReviewToken(t, tok, "dra.example")
		if !st.Authenticated {
			t.Fatalf("TokenReview(node-bound) = error %q; want authenticated", st.Error)
		}
		if got := st.User.Extra["authentication.kubernetes.io/node-name"]; !slices.Equal(got, authenticationv1.ExtraValue{node.Name}) {
			t.Errorf("TokenReview(node-bound).extra[node-name] = %q; want [%q]", got, node.Name)
		}
	}
	var after float64
	polls, start := 0, time.Now()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		polls++
		after, err = c.MetricValue(ctx, "apiserver_request_total", labels)
		return after-before >= n, err
	})
	t.Logf("observed: apiserver_request_total{resource=tokenreviews} reached +%d after %d MetricValue calls in %v", n, polls, time.Since(start).Round(time.Millisecond))
	if err != nil || after-before != n {
		t.Errorf("apiserver_request_total{resource=tokenreviews} moved by %v after %d reviews; want %d (%v)", after-before, n, n, err)
	}
}

// TestHarnessRestart stops the API server, checks requests fail, restarts
// it on the same URL and checks an earlier token still validates. It must
// not run in parallel with other tests.
func TestHarnessRestart(t *testing.T) {
	c := cluster.Get(t)
	ns := c.UniqueNamespace(t, "restart")
	c.CreateServiceAccount(t, ns, "app")
	tok := c.RequestToken(t, ns, "app", cluster.TokenOptions{Audiences: []string{"svc.example"}})
	urlBefore := c.URL()

	start := time.Now()
	c.Stop()
	t.Logf("observed: Stop took %v", time.Since(start).Round(time.Millisecond))
	if c.Running() {
		t.Fatal("Running() = true after Stop; want false")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	_, err := c.TokenReview(ctx, tok, "svc.example")
	cancel()
	if err == nil {
		t.Fatal("TokenReview during outage = nil error; want a connection error")
	}
	var uerr *url.Error
	t.Logf("observed: TokenReview during outage: %v", err)
	if !errors.As(err, &uerr) {
		t.Errorf("TokenReview during outage = %T; want a *url.Error in the chain", err)
	}

	start = time.Now()
	if err := c.Restart(t.Context()); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Logf("observed: Restart to ready took %v", time.Since(start).Round(time.Millisecond))
	if c.URL() != urlBefore {
		t.Errorf("URL() after Restart = %q; want %q", c.URL(), urlBefore)
	}
	if st := c.ReviewToken(t, tok, "svc.example"); !st.Authenticated {
		t.Errorf("TokenReview(token issued before restart) = error %q; want authenticated", st.Error)
	}

	start = time.Now()
	c.Kill()
	t.Logf("observed: Kill took %v", time.Since(start).Round(time.Millisecond))
	if err := c.Restart(t.Context()); err != nil {
		t.Fatalf("Restart after Kill: %v", err)
	}
	if st := c.ReviewToken(t, tok, "svc.example"); !st.Authenticated {
		t.Errorf("TokenReview(token issued before kill) = error %q; want authenticated", st.Error)
	}
}
