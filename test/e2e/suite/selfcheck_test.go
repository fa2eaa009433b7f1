package suite_test

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// TestServiceWithoutAuthDelegator (issue #11 item 8): a service running as
// a ServiceAccount that is not bound to system:auth-delegator, against a
// real kube-apiserver v1.37.2:
//   - the library's self-checks say so, naming the ServiceAccount and the
//     ClusterRole (and pass for a bound one, and refuse an invalid token);
//   - at run time every review is "could not check" (503), a 403 that
//     matches ErrRefused, never a 401;
//   - an example fails fast at start with that message instead of serving
//     503s.
func TestServiceWithoutAuthDelegator(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	ns := c.UniqueNamespace(t, "no-delegator")
	c.CreateServiceAccount(t, ns, "sidecar")
	user := "system:serviceaccount:" + ns + ":sidecar"
	unbound := c.TokenConfig(c.RequestToken(t, ns, "sidecar", cluster.TokenOptions{ExpirationSeconds: 3600}))
	ctx, cancel := ctxFor(t, time.Minute)
	defer cancel()

	for name, check := range map[string]func(context.Context) error{
		"authn": func(ctx context.Context) error { return authn.SelfCheck(ctx, unbound) },
		"authz": func(ctx context.Context) error { return authz.SelfCheck(ctx, unbound) },
	} {
		err := check(ctx)
		t.Logf("observed: %s.SelfCheck(unbound) = %v", name, err)
		if !errors.Is(err, reviewauth.ErrRefused) || errors.Is(err, reviewauth.ErrUnavailable) ||
			!strings.Contains(err.Error(), `user "`+user+`" may not create`) || !strings.Contains(err.Error(), "system:auth-delegator") {
			t.Errorf("%s.SelfCheck(unbound ServiceAccount) = %v; want ErrRefused naming %s and system:auth-delegator", name, err, user)
		}
	}
	bad := c.TokenConfig("not-a-valid-token")
	if err := authn.SelfCheck(ctx, bad); !errors.Is(err, reviewauth.ErrRefused) || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("authn.SelfCheck(invalid token) = %v; want ErrRefused with HTTP 401", err)
	}
	bound := c.TokenConfig(c.RequestToken(t, ns, "sidecar", cluster.TokenOptions{ExpirationSeconds: 3600}))
	c.BindClusterRole(t, "", "system:auth-delegator", cluster.ServiceAccountSubject(ns, "sidecar"))
	for _, res := range []string{"tokenreviews", "subjectaccessreviews"} {
		group := map[string]string{"tokenreviews": "authentication.k8s.io", "subjectaccessreviews": "authorization.k8s.io"}[res]
		c.WaitForAccess(t, authorizationv1.SubjectAccessReviewSpec{User: user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Group: group, Resource: res}}, true)
	}
	if err := errors.Join(authn.SelfCheck(ctx, bound), authz.SelfCheck(ctx, bound)); err != nil {
		t.Errorf("SelfCheck(bound ServiceAccount) = %v; want nil", err)
	}

	// Run time, with another unbound ServiceAccount.
	c.CreateServiceAccount(t, ns, "other")
	other := c.TokenConfig(c.RequestToken(t, ns, "other", cluster.TokenOptions{ExpirationSeconds: 3600}))
	an, err := authn.NewForConfig(other, authn.Options{Audiences: []string{"svc.example"}})
	if err != nil {
		t.Fatal(err)
	}
	caller := c.RequestToken(t, ns, "sidecar", cluster.TokenOptions{Audiences: []string{"svc.example"}})
	_, ok, err := an.AuthenticateToken(ctx, caller)
	var re *reviewauth.ReviewError
	t.Logf("observed: AuthenticateToken by an unbound service = %v", err)
	if ok || !errors.As(err, &re) || re.Code != http.StatusForbidden || !errors.Is(err, reviewauth.ErrRefused) || errors.Is(err, reviewauth.ErrUnauthenticated) {
		t.Errorf("AuthenticateToken by an unbound service = (%v, %v); want a 403 ReviewError matching ErrRefused (503), not 401", ok, err)
	}

	// An example started as the unbound ServiceAccount exits at once.
	kubeconfig := tokenKubeconfig(t, c, c.RequestToken(t, ns, "other", cluster.TokenOptions{ExpirationSeconds: 3600}))
	certFile, keyFile, _ := servingCert(t)
	bin := filepath.Join(buildExamples(t), metricsProxyBin) // before the clock starts
	runCtx, cancelRun := ctxFor(t, exampleStartTimeout)
	defer cancelRun()
	start := time.Now()
	cmd := exec.CommandContext(runCtx, bin,
		"--upstream=http://127.0.0.1:1", "--listen=127.0.0.1:0", "--kubeconfig="+kubeconfig, "--audience=svc.example",
		"--node-name=n1", "--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile)
	out, err := cmd.CombinedOutput()
	elapsed := time.Since(start)
	t.Logf("observed: metricsproxy as an unbound ServiceAccount exited after %v: %v\n%s", elapsed.Round(time.Millisecond), err, tail(string(out), 5))
	var exit *exec.ExitError
	if !errors.As(err, &exit) || runCtx.Err() != nil {
		t.Fatalf("metricsproxy as an unbound ServiceAccount = %v; want it to exit non-zero at once", err)
	}
	otherUser := "system:serviceaccount:" + ns + ":other"
	for _, want := range []string{
		`user "` + otherUser + `" may not create tokenreviews.authentication.k8s.io`,
		`user "` + otherUser + `" may not create subjectaccessreviews.authorization.k8s.io`,
		"system:auth-delegator",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("metricsproxy output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "listening on") {
		t.Errorf("metricsproxy started listening without the permissions it needs")
	}
}
