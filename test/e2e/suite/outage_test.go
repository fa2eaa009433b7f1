package suite_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// TestOutage stops kube-apiserver while the snapshotmetadata and
// metricsproxy examples serve: calls that need a review fail with
// Unavailable or 503, never an allow, 401 or 403; cached allows keep
// working; after a restart everything works again, and metricsproxy's
// revoker is in sync again and still revokes. It stops the shared API
// server, so it must not run in parallel with other tests.
func TestOutage(t *testing.T) {
	c := cluster.Get(t)
	s := startSidecar(t, c)
	p := startProxy(t, c)

	ns := c.UniqueNamespace(t, "outage")
	s.createSnapshots(t, ns, "snap-1", "snap-2")
	c.CreateServiceAccount(t, ns, "backup")
	c.BindClusterRole(t, ns, snapshotClientRole(t, c), cluster.ServiceAccountSubject(ns, "backup"))
	backup, prometheus := serviceAccountUser(ns, "backup"), serviceAccountUser(p.ns, p.scraper)
	c.WaitForAccess(t, snapshotSpec(backup, ns, "snap-2"), true)
	c.WaitForAccess(t, nodeMetricsSpec(prometheus, nil, p.node), true)

	warm := c.RequestToken(t, ns, "backup", cluster.TokenOptions{Audiences: []string{s.audience}})
	fresh := c.RequestToken(t, ns, "backup", cluster.TokenOptions{Audiences: []string{s.audience}})
	warmProm := p.token
	freshProm := c.RequestToken(t, p.ns, p.scraper, cluster.TokenOptions{Audiences: []string{p.audience}})
	tokens := []string{warm, fresh, warmProm, freshProm}
	web := p.client(t)

	// Warm the caches: one identity and one decision each.
	if _, err := allocated(t.Context(), s.client, warm, ns, "snap-1"); err != nil {
		t.Fatalf("GetMetadataAllocated(warm, snap-1) before the outage = %v; want a stream", err)
	}
	if code, body := p.get(t.Context(), t, web, "/metrics", warmProm); code != http.StatusOK {
		t.Fatalf("GET /metrics (warm) before the outage = %d %q; want 200", code, body)
	}

	stopped := time.Now()
	c.Stop()
	t.Logf("observed: kube-apiserver stopped in %v", time.Since(stopped).Round(time.Millisecond))
	restarted := false
	restart := func() error {
		start := time.Now()
		restarted = true
		// Not t.Context(): it is canceled before cleanups run. Restart
		// bounds itself (cluster.Options.StartTimeout).
		if err := c.Restart(context.Background()); err != nil {
			return err
		}
		t.Logf("observed: kube-apiserver restarted in %v, %v after it stopped", time.Since(start).Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
		return nil
	}
	t.Cleanup(func() {
		// Other tests need the API server: bring it back even if this one
		// failed half-way.
		if !restarted {
			if err := restart(); err != nil {
				t.Errorf("Restart: %v", err)
			}
		}
	})

	grpcCalls := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{name: "warm token, cached snapshot", want: codes.OK, call: func() error {
			_, err := allocated(t.Context(), s.client, warm, ns, "snap-1")
			return err
		}},
		{name: "warm token, cached snapshot as delta base and target", want: codes.OK, call: func() error {
			_, err := delta(t.Context(), s.client, warm, ns, "snap-1", "snap-1")
			return err
		}},
		{name: "fresh token", want: codes.Unavailable, call: func() error {
			_, err := allocated(t.Context(), s.client, fresh, ns, "snap-1")
			return err
		}},
		{name: "warm token, fresh snapshot", want: codes.Unavailable, call: func() error {
			_, err := allocated(t.Context(), s.client, warm, ns, "snap-2")
			return err
		}},
	}
	for _, tc := range grpcCalls {
		start := time.Now()
		err := tc.call()
		t.Logf("observed: during the outage, %s: %v in %v", tc.name, err, time.Since(start).Round(time.Millisecond))
		wantCode(t, "during the outage, GetMetadata("+tc.name+")", err, tc.want, tokens...)
	}
	httpCalls := []struct {
		name, path, token string
		want              int
	}{
		{name: "warm token, cached path", path: "/metrics", token: warmProm, want: http.StatusOK},
		{name: "fresh token", path: "/metrics", token: freshProm, want: http.StatusServiceUnavailable},
		{name: "warm token, fresh path", path: "/logs/", token: warmProm, want: http.StatusServiceUnavailable},
	}
	for _, tc := range httpCalls {
		start := time.Now()
		code, body := p.get(t.Context(), t, web, tc.path, tc.token)
		t.Logf("observed: during the outage, GET %s (%s) = %d in %v", tc.path, tc.name, code, time.Since(start).Round(time.Millisecond))
		if code != tc.want {
			t.Errorf("during the outage, GET %s (%s) = %d %q; want %d", tc.path, tc.name, code, body, tc.want)
		}
	}

	if err := restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	// The API server's own view first: RBAC is served again.
	c.WaitForAccess(t, snapshotSpec(backup, ns, "snap-2"), true)
	if _, err := allocated(t.Context(), s.client, fresh, ns, "snap-1"); err != nil {
		t.Errorf("after the restart, GetMetadataAllocated(fresh token) = %v; want a stream", err)
	}
	if _, err := allocated(t.Context(), s.client, warm, ns, "snap-2"); err != nil {
		t.Errorf("after the restart, GetMetadataAllocated(warm token, snap-2) = %v; want a stream", err)
	}
	if code, body := p.get(t.Context(), t, web, "/metrics", freshProm); code != http.StatusOK {
		t.Errorf("after the restart, GET /metrics (fresh token) = %d %q; want 200", code, body)
	}
	if code, body := p.get(t.Context(), t, web, "/logs/", warmProm); code != http.StatusForbidden {
		t.Errorf("after the restart, GET /logs/ (warm token) = %d %q; want 403: the real decision", code, body)
	}

	// metricsproxy's revoker (TestRevocation) ran through the restart: it
	// listed again, is in sync, and still revokes a deleted pod's token
	// within revocationDeadline.
	addr := metricsAddr(t, p.server)
	t.Logf("observed: metricsproxy's revoker in sync again %v after the restart", waitRevokerSynced(t, addr).Round(100*time.Millisecond))
	if v, err := exampleMetric(t.Context(), addr, "reviewauth_revocation_resyncs_total", `reason="relist"`); err != nil || v < 1 {
		t.Errorf("metricsproxy's reviewauth_revocation_resyncs_total{reason=relist} after the restart = %v, %v; want at least 1", v, err)
	}
	pod := c.CreatePodFromTemplate(t, p.clientManifests, "Job", "metricsproxy-smoke", cluster.PodOptions{NodeName: p.node})
	token := podProjectedToken(t, c, pod, "/var/run/secrets/metricsproxy")
	runTries(t, "after the restart, metricsproxy, a deleted pod's token", []revocationTry{{
		probe:   func(ctx context.Context) (int, error) { return getCode(ctx, web, p.addr+"/metrics", token) },
		revoke:  deletePod(c, pod.Namespace, pod.Name),
		refused: http.StatusUnauthorized,
	}})
}
