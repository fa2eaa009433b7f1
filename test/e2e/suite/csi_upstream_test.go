package suite_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// backupApp is a backup application as external-snapshot-metadata deploys
// it: a ServiceAccount, with a kubeconfig holding its own API-server token,
// which runs the upstream snapshot-metadata-lister command (pkg/iterator,
// unchanged). The iterator asks the TokenRequest API for a fresh token with
// the sidecar's audience on every run. It runs as a subprocess: in process,
// each run would leak the gRPC connection the iterator never closes.
type backupApp struct {
	ns, name   string
	user       string
	kubeconfig string
	lister     string
}

// newBackupApp applies examples/snapshotmetadata/deploy/client in ns:
// the backup application's ServiceAccount, bound cluster-wide to the
// client's ClusterRole, with the Role to request its own tokens; and
// writes its kubeconfig.
func newBackupApp(t testing.TB, c *cluster.Cluster, ns string) *backupApp {
	t.Helper()
	m := deploy(t, c, deployDir("snapshotmetadata", "client"), deployOptions{namespace: ns})
	return backupAppFor(t, c, ns, m.Name("backup-app"))
}

// newRestrictedApp creates the ServiceAccount ns/name, binds it to
// clusterRoles cluster-wide and roles in ns (a test's own narrowing), and
// writes its kubeconfig.
func newRestrictedApp(t testing.TB, c *cluster.Cluster, ns, name string, clusterRoles, roles []string) *backupApp {
	t.Helper()
	c.CreateServiceAccount(t, ns, name)
	sub := cluster.ServiceAccountSubject(ns, name)
	for _, r := range clusterRoles {
		c.BindClusterRole(t, "", r, sub)
	}
	for _, r := range roles {
		c.BindRole(t, ns, r, sub)
	}
	return backupAppFor(t, c, ns, name)
}

// backupAppFor writes the kubeconfig of the ServiceAccount ns/name.
func backupAppFor(t testing.TB, c *cluster.Cluster, ns, name string) *backupApp {
	t.Helper()
	token := c.RequestToken(t, ns, name, cluster.TokenOptions{ExpirationSeconds: 7200})
	return &backupApp{ns: ns, name: name, user: serviceAccountUser(ns, name), kubeconfig: tokenKubeconfig(t, c, token), lister: buildLister(t)}
}

// list runs the upstream lister as app in its namespace with args (-s
// SNAPSHOT, -p PREVIOUS, -P PREVIOUS_ID, ...) and returns the records it
// printed; err is the command's, with its standard error.
func (a *backupApp) list(ctx context.Context, args ...string) ([]iterator.IteratorMetadata, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.lister, append([]string{"-kubeconfig", a.kubeconfig, "-n", a.ns, "-o", "json", "-max-results", "4"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("snapshot-metadata-lister %q: %w: %s", args, err, strings.TrimSpace(stderr.String()))
	}
	var records []iterator.IteratorMetadata
	if err := json.Unmarshal(out, &records); err != nil {
		return nil, fmt.Errorf("snapshot-metadata-lister %q printed %q: %w", args, out, err)
	}
	return records, nil
}

// TestCSIUpstreamIteratorCost drives the sidecar with the upstream iterator
// (the snapshot-metadata-lister command), which mints a fresh token for
// every run, and with a client that reuses one token, and counts the TokenReviews and SubjectAccessReviews each
// costs with the API server's apiserver_request_total. A fresh token always
// costs its TokenReview; the SubjectAccessReviews are one per (user,
// snapshot) per TTL, whatever the token, because the token's credential-id
// extra is not in the cache key. The last rows run the sidecar with
// credential-id kept in the key (the behaviour before), for comparison. It
// counts every review the API server answers, so it must not run in
// parallel with other tests.
func TestCSIUpstreamIteratorCost(t *testing.T) {
	c := cluster.Get(t)
	const calls = 100
	rows := []struct {
		name        string
		args        []string
		freshTokens bool
		delta       bool
		// the bounds: TokenReviews and SubjectAccessReviews for calls calls
		wantTR, wantSAR int
		exactSAR        bool
	}{
		{name: "upstream iterator (token per call), allocated", freshTokens: true, wantTR: calls, wantSAR: 1},
		{name: "upstream iterator (token per call), delta", freshTokens: true, delta: true, wantTR: calls, wantSAR: 2},
		{name: "token-reusing client, allocated", wantTR: 1, wantSAR: 1},
		{name: "token-reusing client, delta", delta: true, wantTR: 1, wantSAR: 2},
		{name: "upstream iterator, credential-id in the SAR cache key, allocated", args: []string{"--authorization-cache-ignored-extras="},
			freshTokens: true, wantTR: calls, wantSAR: calls, exactSAR: true},
		{name: "upstream iterator, credential-id in the SAR cache key, delta", args: []string{"--authorization-cache-ignored-extras="},
			freshTokens: true, delta: true, wantTR: calls, wantSAR: 2 * calls, exactSAR: true},
	}
	var table []string
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			s := startSidecar(t, c, row.args...)
			ns := c.UniqueNamespace(t, "cost")
			s.createSnapshots(t, ns, "snap-1", "snap-2")
			app := newBackupApp(t, c, ns)
			for _, snap := range []string{"snap-1", "snap-2"} {
				c.WaitForAccess(t, snapshotSpec(app.user, ns, snap), true)
			}
			token := c.RequestToken(t, ns, app.name, cluster.TokenOptions{Audiences: []string{s.audience}})
			call := func(ctx context.Context) error {
				switch {
				case row.freshTokens && row.delta:
					_, err := app.list(ctx, "-s", "snap-2", "-P", snapshotHandle(ns, "snap-1"))
					return err
				case row.freshTokens:
					_, err := app.list(ctx, "-s", "snap-1")
					return err
				case row.delta:
					_, err := delta(ctx, s.client, token, ns, "snap-1", "snap-2")
					return err
				default:
					_, err := allocated(ctx, s.client, token, ns, "snap-1")
					return err
				}
			}

			ctx, cancel := ctxFor(t, 3*time.Minute)
			defer cancel()
			tr0, sar0, err := reviewCounts(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			for i := range calls {
				if err := call(ctx); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			elapsed := time.Since(start)
			tr, sar := settledReviewCounts(t, ctx, c, tr0, sar0, float64(row.wantTR), 1)
			line := fmt.Sprintf("%s: %d calls in %v: %v TokenReviews, %v SubjectAccessReviews", row.name, calls, elapsed.Round(time.Millisecond), tr, sar)
			t.Logf("observed: %s", line)
			table = append(table, line)
			if tr != float64(row.wantTR) {
				t.Errorf("TokenReviews for %d calls = %v; want %d", calls, tr, row.wantTR)
			}
			if sar > float64(row.wantSAR) || (row.exactSAR && sar != float64(row.wantSAR)) || sar < 1 {
				t.Errorf("SubjectAccessReviews for %d calls = %v; want %s%d", calls, sar, map[bool]string{true: "", false: "at least 1 and at most "}[row.exactSAR], row.wantSAR)
			}
		})
	}
	t.Logf("observed: cost table (N=%d):\n%s", calls, strings.Join(table, "\n"))
}

// settledReviewCounts waits until the API server has counted at least minTR
// TokenReviews and minSAR SubjectAccessReviews since tr0 and sar0 (it counts
// a request a moment after answering it), then a little longer for
// stragglers, and returns the counts.
func settledReviewCounts(t *testing.T, ctx context.Context, c *cluster.Cluster, tr0, sar0, minTR, minSAR float64) (tr, sar float64) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		tr1, sar1, err := reviewCounts(ctx, c)
		tr, sar = tr1-tr0, sar1-sar0
		return tr >= minTR && sar >= minSAR, err
	})
	if err != nil {
		t.Fatalf("the API server counted %v TokenReviews and %v SubjectAccessReviews; want at least %v and %v (%v)", tr, sar, minTR, minSAR, err)
	}
	time.Sleep(500 * time.Millisecond) // stragglers: bounded, and only to catch excess.
	tr1, sar1, err := reviewCounts(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return tr1 - tr0, sar1 - sar0
}

// TestCSIUpstreamContract runs the upstream lister, unchanged, through the
// snapshot cases of the upstream contract: a delta from a deleted base
// whose handle the application kept, from a retained content, from a base
// by name; a not-ready target, with upstream's code and message; a base
// bound in another namespace; RBAC with resourceNames (upstream authorizes
// the namespace only, so resourceNames deny it everything). The cases the
// lister cannot bring to the sidecar (it looks the target up first) send
// the same request with the upstream generated client and a fresh token: a
// missing target, another driver's target, a target the caller may not get.
// Refusals are logged by the sidecar.
func TestCSIUpstreamContract(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	s := startSidecar(t, c)
	ns := c.UniqueNamespace(t, "contract")
	other := c.UniqueNamespace(t, "contract-other")
	s.createSnapshots(t, ns, "snap-1", "snap-2")
	deletedContent := createSnapshot(t, c, s.driver, ns, "base-deleted", snapshotOptions{})
	retainedContent := createSnapshot(t, c, s.driver, ns, "base-retained", snapshotOptions{deletionPolicy: "Retain"})
	createSnapshot(t, c, s.driver, ns, "not-ready", snapshotOptions{notReady: true})
	createSnapshot(t, c, s.driver, ns, "other-driver", snapshotOptions{driver: "other.csi.example.com"})
	createSnapshot(t, c, s.driver, other, "foreign", snapshotOptions{})
	deleteSnapshot(t, c, ns, "base-deleted", deletedContent, false)
	deleteSnapshot(t, c, ns, "base-retained", retainedContent, true)

	app := newBackupApp(t, c, ns)
	c.WaitForAccess(t, snapshotSpec(app.user, ns, "snap-1"), true)

	// restricted may get the VolumeSnapshot snap-1 only, and what the
	// lister needs besides: contents, the SnapshotMetadataService, its own
	// tokens.
	reader := cluster.UniqueName("snapshot-metadata-reader")
	c.CreateClusterRole(t, reader,
		rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{"cbt.storage.k8s.io"}, Resources: []string{"snapshotmetadataservices"}},
		rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{snapshotGroup}, Resources: []string{"volumesnapshotcontents"}})
	c.CreateRole(t, ns, "restricted", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{snapshotGroup}, Resources: []string{snapshotResource}, ResourceNames: []string{"snap-1"}},
		rbacv1.PolicyRule{Verbs: []string{"create"}, APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{"restricted"}})
	restricted := newRestrictedApp(t, c, ns, "restricted", []string{reader}, []string{"restricted"})
	c.WaitForAccess(t, snapshotSpec(restricted.user, ns, "snap-1"), true)

	listed := []struct {
		name     string
		app      *backupApp
		args     []string
		wantMsgs []string // empty: success
	}{
		{name: "allocated", app: app, args: []string{"-s", "snap-1"}},
		{name: "delta by base name", app: app, args: []string{"-s", "snap-2", "-p", "snap-1"}},
		{name: "delta by base handle", app: app, args: []string{"-s", "snap-2", "-P", snapshotHandle(ns, "snap-1")}},
		{name: "delta from a deleted base's kept handle", app: app, args: []string{"-s", "snap-2", "-P", snapshotHandle(ns, "base-deleted")}},
		{name: "delta from a retained content's handle", app: app, args: []string{"-s", "snap-2", "-P", snapshotHandle(ns, "base-retained")}},
		{name: "not ready", app: app, args: []string{"-s", "not-ready"},
			wantMsgs: []string{"code = Unavailable", "the VolumeSnapshot is not yet ready, name: not-ready"}},
		{name: "base in another namespace", app: app, args: []string{"-s", "snap-2", "-P", snapshotHandle(other, "foreign")},
			wantMsgs: []string{"code = PermissionDenied", snapshotHandle(other, "foreign"), fmt.Sprintf("is not a VolumeSnapshot in namespace %q", ns)}},
		{name: "resourceNames: allowed snapshot", app: restricted, args: []string{"-s", "snap-1"}},
		{name: "resourceNames: other base", app: restricted, args: []string{"-s", "snap-1", "-P", snapshotHandle(ns, "snap-2")},
			wantMsgs: []string{"code = PermissionDenied", `"snap-2"`, "the base snapshot", snapshotHandle(ns, "snap-2")}},
	}
	for _, tt := range listed {
		t.Run(tt.name, func(t *testing.T) {
			records, err := tt.app.list(t.Context(), tt.args...)
			t.Logf("observed: snapshot-metadata-lister %q: %d records, %v", tt.args, len(records), err)
			if len(tt.wantMsgs) == 0 {
				if err != nil || len(records) == 0 {
					t.Fatalf("snapshot-metadata-lister %q = %d records, %v; want some", tt.args, len(records), err)
				}
				return
			}
			for _, m := range tt.wantMsgs {
				if err == nil || !strings.Contains(err.Error(), m) {
					t.Errorf("snapshot-metadata-lister %q = %v; want a failure containing %q", tt.args, err, m)
				}
			}
		})
	}

	called := []struct {
		name     string
		user     string
		target   string
		want     codes.Code
		wantMsgs []string
	}{
		{name: "missing", user: app.name, target: "missing", want: codes.Unavailable, wantMsgs: []string{"failed to get VolumeSnapshot", "not found"}},
		{name: "another driver's target", user: app.name, target: "other-driver", want: codes.InvalidArgument, wantMsgs: []string{"does not belong to the CSI driver"}},
		{name: "resourceNames: other snapshot", user: "restricted", target: "snap-2", want: codes.PermissionDenied, wantMsgs: []string{`"snap-2"`, "the snapshot"}},
	}
	for _, tt := range called {
		t.Run(tt.name, func(t *testing.T) {
			tok := c.RequestToken(t, ns, tt.user, cluster.TokenOptions{Audiences: []string{s.audience}})
			_, err := allocated(t.Context(), s.client, tok, ns, tt.target)
			t.Logf("observed: %s: %v", tt.name, err)
			wantCode(t, "GetMetadataAllocated("+tt.target+")", err, tt.want, tok)
			for _, m := range tt.wantMsgs {
				if !strings.Contains(status.Convert(err).Message(), m) {
					t.Errorf("GetMetadataAllocated(%s) = %v; want a message containing %q", tt.target, err, m)
				}
			}
		})
	}

	t.Run("unauthenticated", func(t *testing.T) {
		tok := c.RequestToken(t, ns, app.name, cluster.TokenOptions{Audiences: []string{"other.example.com"}})
		_, err := allocated(t.Context(), s.client, tok, ns, "snap-1")
		wantCode(t, "GetMetadataAllocated(token for another audience)", err, codes.Unauthenticated, tok)
	})

	// Operators see the refusals, at the default verbosity. A refusal is
	// logged once the call has ended, a moment after the caller has its
	// status: wait for the lines, boundedly.
	wantLines := [][]string{
		{`"Refused a call: permission denied"`, `user="` + restricted.user + `"`, `namespace="` + ns + `"`, `role="snapshot"`, `snapshot="snap-2"`},
		{`"Refused a call: permission denied"`, `user="` + restricted.user + `"`, `role="base snapshot"`},
		{`"Refused a call: permission denied"`, `user="` + app.user + `"`, `snapshot="(base_snapshot_id ` + snapshotHandle(other, "foreign") + `)"`},
		{`"Refused a call: unauthenticated"`, `namespace="` + ns + `"`, `snapshot_name="snap-1"`},
	}
	var logs string
	_ = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		logs = s.stderr.String()
		for _, want := range wantLines {
			if !containsLineWith(logs, want...) {
				return false, nil
			}
		}
		return true, nil
	})
	for _, want := range wantLines {
		if !containsLineWith(logs, want...) {
			t.Errorf("the sidecar logged no line with %q; its log:\n%s", want, tail(logs, 40))
		}
	}
}

// containsLineWith reports whether a line of s contains every one of subs.
func containsLineWith(s string, subs ...string) bool {
	for _, line := range strings.Split(s, "\n") {
		all := true
		for _, sub := range subs {
			all = all && strings.Contains(line, sub)
		}
		if all {
			return true
		}
	}
	return false
}

var (
	listerOnce sync.Once
	listerBin  string
	listerErr  error
)

// buildLister builds the upstream snapshot-metadata-lister command, as
// released in external-snapshot-metadata v0.2.0, from the module cache.
func buildLister(t testing.TB) string {
	t.Helper()
	listerOnce.Do(func() {
		dir := buildExamples(t) // removed with the examples
		listerBin = filepath.Join(dir, "snapshot-metadata-lister")
		ctx, cancel := context.WithTimeout(context.Background(), exampleBuildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", listerBin, snapshotMetadataModule+"/examples/snapshot-metadata-lister")
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			listerErr = fmt.Errorf("go build of the upstream lister: %v\n%s", err, out)
		}
	})
	if listerErr != nil {
		t.Fatal(listerErr)
	}
	return listerBin
}

// TestCSIAudienceMismatch: an --audience that disagrees with the
// SnapshotMetadataService object stops the sidecar at start.
func TestCSIAudienceMismatch(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	m, _ := applySidecar(t, c, "127.0.0.1:1", deployOptions{})
	_, bin, args := serverCommand(t, c, m, "Deployment", "csi-snapshot-metadata", "", "--listen=127.0.0.1:0",
		"--metrics-listen=127.0.0.1:0", "--audience=from-the-flag.example.com")
	ctx, cancel := ctxFor(t, exampleStartTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	t.Logf("observed: snapshotmetadata --audience disagreeing with its SnapshotMetadataService: %v: %s", err, strings.TrimSpace(string(out)))
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(string(out), "disagrees") || strings.Contains(string(out), "listening on") {
		t.Errorf("snapshotmetadata with a disagreeing --audience = %v\n%s\nwant a failure to start naming the disagreement", err, out)
	}
}
