package suite_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// permissionCase is a server whose ServiceAccounts' RBAC
// TestManifestPermissions checks against what they did.
type permissionCase struct {
	name string
	// accounts are the ServiceAccounts checked: the directory under
	// examples/ whose kustomization writes each, and its name there.
	accounts []permissionAccount
	// flows run the server's flows from its manifests (as shipped, where
	// the flow allows it) and return the pods of the servers: an
	// account's requests with a token bound to another pod (another
	// test's server of the same ServiceAccount) are not this run's.
	flows func(t *testing.T, c *cluster.Cluster) (pods []string)
}

// permissionAccount is a ServiceAccount of the manifests.
type permissionAccount struct {
	dir  string // under examples/: "rbacproxy/deploy/client"
	name string // as written
}

// permissionCases are every server of examples/*/deploy, each with the
// flows of its own tests.
var permissionCases = []permissionCase{
	{
		name:     "rbacproxy",
		accounts: []permissionAccount{{"rbacproxy/deploy", "app"}, {"rbacproxy/deploy/client", "metrics-reader"}},
		flows: func(t *testing.T, c *cluster.Cluster) []string {
			e := startRBACProxyWith(t, c, deployOptions{shipped: true}, "--metrics-listen=127.0.0.1:0")
			waitRevokerSynced(t, metricsAddr(t, e.server))
			// The caller of the client's RoleBinding (its own namespace),
			// and of a namespace the flow binds.
			for _, ns := range []string{e.ns, e.allowed} {
				ctx, cancel := ctxFor(t, callTimeout)
				code, _ := e.get(t, ctx, "/metrics?namespace="+ns, e.token, nil)
				cancel()
				if code != http.StatusOK {
					t.Errorf("GET ?namespace=%s = %d; want 200", ns, code)
				}
			}
			return []string{e.pod.Name}
		},
	},
	{
		name:     "metricsproxy",
		accounts: []permissionAccount{{"metricsproxy/deploy", "metricsproxy"}, {"metricsproxy/deploy/client", "metrics-scraper"}},
		flows: func(t *testing.T, c *cluster.Cluster) []string {
			p := startProxyWith(t, c, deployOptions{shipped: true})
			waitRevokerSynced(t, metricsAddr(t, p.server))
			if code, body := p.get(t.Context(), t, p.client(t), "/metrics", p.token); code != http.StatusOK {
				t.Errorf("GET /metrics = %d %q; want 200", code, body)
			}
			return []string{p.pod.Name}
		},
	},
	{
		name:     "snapshotmetadata",
		accounts: []permissionAccount{{"snapshotmetadata/deploy", "csi-snapshot-metadata"}, {"snapshotmetadata/deploy/client", "backup-app"}},
		flows: func(t *testing.T, c *cluster.Cluster) []string {
			s := startSidecarWith(t, c, deployOptions{shipped: true})
			waitRevokerSynced(t, metricsAddr(t, s.server))
			m := deploy(t, c, deployDir("snapshotmetadata", "client"), deployOptions{shipped: true})
			app := backupAppFor(t, c, m.Namespace(), m.Name("backup-app"))
			snap, foreign := cluster.UniqueName("snap"), cluster.UniqueName("other-driver")
			createSnapshot(t, c, s.driver, app.ns, snap, snapshotOptions{})
			createSnapshot(t, c, s.driver, app.ns, foreign, snapshotOptions{driver: "other.csi.example.com"})
			c.WaitForAccess(t, snapshotSpec(app.user, app.ns, snap), true)
			// The upstream lister, as the backup application.
			if records, err := app.list(t.Context(), "-s", snap); err != nil || len(records) == 0 {
				t.Errorf("snapshot-metadata-lister -s %s = %d records, %v; want some", snap, len(records), err)
			}
			// A refusal the sidecar confirms with live reads (its cache
			// may lag): another driver's snapshot.
			tok := c.RequestToken(t, app.ns, app.name, cluster.TokenOptions{Audiences: []string{s.audience}})
			_, err := allocated(t.Context(), s.client, tok, app.ns, foreign)
			wantCode(t, "GetMetadataAllocated(another driver's snapshot)", err, codes.InvalidArgument, tok)
			return []string{s.pod.Name}
		},
	},
	{
		name: "draproxy",
		// draproxy, and a driver's kubelet plugin: its requests through
		// draproxy are draproxy's, as node A, and draproxy's
		// SubjectAccessReviews about it exercise its rules; the second
		// mode's are its own.
		accounts: []permissionAccount{{"draproxy/deploy", "draproxy"}, {"draproxy/deploy/driver", "kubelet-plugin"}},
		// The draproxy deploy flow (deployDRAProxy, setupDRA: the
		// manifests unedited, admission-policy-check.yaml with
		// --require-admission-policy, two drivers' parts, draproxy for
		// node A), then what a driver on node A does through draproxy,
		// which forwards and reads it as node A: the ResourceSlice
		// controller's calls (its Node; its slices: create, list, watch,
		// get, update, patch, delete, deletecollection), a claim of a
		// workload pod on node A (draproxy reads the pod as the node), a
		// list as the second identity; and, in the second mode, with the
		// driver's own pod-bound token, a claim's status.devices (patch,
		// then update).
		flows: func(t *testing.T, c *cluster.Cluster) []string {
			e := setupDRA(t, c)
			waitRevokerSynced(t, metricsAddr(t, e.proxy))
			ctx := t.Context()
			nodeA := e.nodeA.Name
			drvA := e.client(t, e.token(t, e.podA))
			if _, err := drvA.CoreV1().Nodes().Get(ctx, nodeA, metav1.GetOptions{}); err != nil {
				t.Errorf("Get(node A) = %v", err)
			}
			rs := drvA.ResourceV1().ResourceSlices()
			onA := metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeA + ",spec.driver=" + e.driver}
			s, err := rs.Create(ctx, e.slice("", nodeA, "dev"), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("Create(node A) = %v", err)
			}
			if _, err := rs.List(ctx, onA); err != nil {
				t.Errorf("List(node A) = %v", err)
			}
			w, err := rs.Watch(ctx, onA)
			if err != nil {
				t.Fatalf("Watch(node A) = %v", err)
			}
			select {
			case ev := <-w.ResultChan():
				if o, ok := ev.Object.(*resourcev1.ResourceSlice); !ok || o.Name != s.Name {
					t.Errorf("Watch(node A): first event %s %T; want the slice created", ev.Type, ev.Object)
				}
			case <-time.After(callTimeout):
				t.Errorf("Watch(node A): no event within %v", callTimeout)
			}
			w.Stop()
			if s, err = rs.Get(ctx, s.Name, metav1.GetOptions{}); err != nil {
				t.Fatalf("Get(own slice) = %v", err)
			}
			s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: "dev-2"})
			if _, err := rs.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
				t.Errorf("Update(own slice) = %v", err)
			}
			if _, err := rs.Patch(ctx, s.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"patched":"yes"}}}`), metav1.PatchOptions{}); err != nil {
				t.Errorf("Patch(own slice) = %v", err)
			}
			if err := rs.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
				t.Errorf("Delete(own slice) = %v", err)
			}
			if _, err := rs.Create(ctx, e.slice("", nodeA, "dev"), metav1.CreateOptions{}); err != nil {
				t.Errorf("Create(node A) = %v", err)
			}
			if err := rs.DeleteCollection(ctx, metav1.DeleteOptions{}, onA); err != nil {
				t.Errorf("DeleteCollection(node A's of the driver) = %v", err)
			}
			claim := e.claim(t, "claim-a", e.consumer(t, "job-a", nodeA, "claim-a"))
			if _, err := drvA.ResourceV1().ResourceClaims(e.ns).Get(ctx, claim.Name, metav1.GetOptions{}); err != nil {
				t.Errorf("Get(claim of a pod on A) = %v", err)
			}
			// The second driver identity of node A.
			if _, err := e.client(t, e.token(t, e.pod2A)).ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeA}); err != nil {
				t.Errorf("List(node A) as the second identity = %v", err)
			}
			// The second mode: the driver's own token, bound to its pod
			// on node A, writes the device status of a claim allocated
			// there (draproxy forwards none: a node may not), adding an
			// entry and then removing it.
			own := e.direct(t, c.RequestToken(t, e.ns, e.sa, cluster.TokenOptions{BoundPod: e.podA})).ResourceV1().ResourceClaims(e.ns)
			status := []byte(`{"status":{"devices":[{"driver":"` + e.driver + `","pool":"pool","device":"gpu-0"}]}}`)
			written, err := own.Patch(ctx, claim.Name, types.MergePatchType, status, metav1.PatchOptions{}, "status")
			if err != nil {
				t.Fatalf("the driver's own token: Patch(status.devices of a claim on A) = %v", err)
			}
			written.Status.Devices = nil
			if _, err := own.UpdateStatus(ctx, written, metav1.UpdateOptions{}); err != nil {
				t.Errorf("the driver's own token: UpdateStatus(no status.devices) = %v", err)
			}
			return []string{e.proxy.pod.Name, e.podA.Name}
		},
	},
}

// TestManifestPermissions runs each server's flows from its deploy/ (as
// shipped: its namespace and names, the README's Deploy steps; draproxy
// as its deploy flow applies it) with the API server's audit log on for
// their ServiceAccounts, and checks per ServiceAccount
// (cluster.CheckPermissions): every request the server made was allowed
// by a rule of its manifests (or the API server's defaults for every
// ServiceAccount); every rule of its manifests was exercised, by its own
// requests or by the SubjectAccessReviews a server sent about it (its
// callers' rules), unless a comment beside the rule names the test that
// exercises it; and no rule is broader than what was done (a wildcard,
// cluster scope where one namespace was used, no resourceNames where one
// object was read) unless a comment beside it says why it cannot be
// narrowed. Rules are matched as the API server's RBAC authorizer
// matches them.
func TestManifestPermissions(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	tests, err := suiteTests()
	if err != nil {
		t.Fatal(err)
	}
	// The servers' informers and revokers list, then watch, as client-go
	// does against an API server that cannot stream the initial list (its
	// WatchListClient off): the manifests grant list for those; with it on
	// (client-go's default) they only watch. Each flow waits for its
	// server's revoker to be in sync: every watched resource listed and
	// watched.
	setExampleEnv(t, "KUBE_FEATURE_WatchListClient=false")
	for _, pc := range permissionCases {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			var pods []string
			if !t.Run("flows", func(t *testing.T) { pods = pc.flows(t, c) }) {
				t.Fatal("the flows failed: the permissions are not checked")
			}
			// The servers have stopped (the flows' cleanups): their
			// watches are over, and audited.
			ms := appliedBy(t.Name() + "/flows")
			if pc.name == "draproxy" {
				// Applied once per run, unedited: draproxy's deploy/ and
				// the RBAC of --require-admission-policy.
				check, err := manifestFile(deployDir("draproxy", "admission-policy-check.yaml"))
				if err != nil {
					t.Fatal(err)
				}
				ms = append(ms, deployDRAProxy(t, c), check)
			}
			checkPermissions(t, c, pc, ms, pods, tests)
		})
	}
}

// checkPermissions checks the accounts of pc, applied as ms, against the
// audit log of the servers' pods.
func checkPermissions(t *testing.T, c *cluster.Cluster, pc permissionCase, ms []*cluster.Manifests, pods []string, tests map[string]bool) {
	t.Helper()
	type account struct {
		user, ns, name string
		grants         []cluster.Grant
	}
	var accounts []account
	for _, a := range pc.accounts {
		dir := filepath.Join(examplesDir(), filepath.FromSlash(a.dir))
		// The first the flows applied: a flow that applies a part twice
		// (draproxy's driver/, two identities) runs every flow as the
		// first.
		var found *account
		for _, m := range ms {
			if m.Dir != dir || found != nil {
				continue
			}
			if sa := m.Object("ServiceAccount", a.name); sa != nil {
				found = &account{user: serviceAccountUser(sa.GetNamespace(), sa.GetName()), ns: sa.GetNamespace(), name: sa.GetName()}
			}
		}
		if found == nil {
			t.Fatalf("the flows applied no ServiceAccount %s of examples/%s", a.name, a.dir)
		}
		found.grants = c.Grants(t, found.ns, found.name, ms...)
		accounts = append(accounts, *found)
	}
	ours := func(ev *auditv1.Event) bool {
		pod := ev.User.Extra["authentication.kubernetes.io/pod-name"]
		return len(pod) == 0 || slices.Contains(pods, pod[0])
	}
	users := map[string]bool{}
	for _, a := range accounts {
		users[a.user] = true
	}
	// The API server writes an event as a request completes: read until
	// two reads agree, boundedly.
	var events []auditv1.Event
	last := -1
	_ = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var err error
		events, err = c.AuditEvents(func(ev *auditv1.Event) bool { return users[ev.User.Username] && ours(ev) })
		if err != nil {
			return false, err
		}
		done := len(events) == last
		last = len(events)
		return done, nil
	})
	// An account that made requests from the flows' pods is a server, and
	// its requests are those: a token of its ServiceAccount bound to no pod
	// is another test's (draproxy's is applied once per run, and
	// TestDRAProxyStolenToken uses one). A caller's tokens are bound to
	// no pod.
	servers := map[string]bool{}
	for _, ev := range events {
		if len(ev.User.Extra["authentication.kubernetes.io/pod-name"]) > 0 {
			servers[ev.User.Username] = true
		}
	}
	n := len(events)
	events = slices.DeleteFunc(events, func(ev auditv1.Event) bool {
		return servers[ev.User.Username] && len(ev.User.Extra["authentication.kubernetes.io/pod-name"]) == 0
	})
	if n > len(events) {
		t.Logf("observed: %d requests of the servers' ServiceAccounts with tokens bound to no pod: other tests', not checked", n-len(events))
	}

	for _, a := range accounts {
		u := cluster.Use{Grants: a.grants, Defaults: c.DefaultGrants(t, cluster.ServiceAccountGroups(a.ns)...), TestExists: func(name string) bool { return tests[name] }}
		for i := range events {
			ev := &events[i]
			if ev.User.Username == a.user {
				checks, maybe := cluster.AuditedChecks(ev)
				u.Checks = append(u.Checks, checks...)
				u.Maybe = append(u.Maybe, maybe...)
			}
			if user, attrs, ok := cluster.ReviewedAttributes(ev); ok && user == a.user {
				u.Reviewed = append(u.Reviewed, attrs)
			}
		}
		t.Logf("observed: %s: %d rules granted by the manifests, %d requests, %d reviews about it:\n%s", a.user, len(u.Grants), len(u.Checks), len(u.Reviewed), describeUse(u))
		if len(u.Checks)+len(u.Reviewed) == 0 {
			t.Errorf("%s: the audit log holds nothing of it: the flows did not exercise it", a.user)
		}
		for _, f := range cluster.CheckPermissions(u) {
			t.Errorf("%s: %s", a.user, f)
		}
	}
}

// describeUse lists the distinct requests and reviews of u.
func describeUse(u cluster.Use) string {
	var lines []string
	add := func(prefix string, as []authorizer.AttributesRecord) {
		for _, a := range as {
			lines = append(lines, prefix+cluster.DescribeAttributes(a))
		}
	}
	add("  request ", u.Checks)
	add("  maybe ", u.Maybe)
	add("  review ", u.Reviewed)
	slices.Sort(lines)
	return strings.Join(slices.Compact(lines), "\n")
}

var (
	suiteTestsOnce sync.Once
	suiteTestNames map[string]bool
	suiteTestsErr  error
)

// suiteTests are the names of the tests of the e2e module (its *_test.go
// files), which a comment beside a rule may name as the one that
// exercises it.
func suiteTests() (map[string]bool, error) {
	suiteTestsOnce.Do(func() {
		suiteTestNames = map[string]bool{}
		re := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(t \*testing\.T\)`)
		root := filepath.Join(examplesDir(), "..", "test", "e2e")
		files, err := filepath.Glob(filepath.Join(root, "*", "*_test.go"))
		if err != nil || len(files) == 0 {
			suiteTestsErr = fmt.Errorf("no test files under %s: %v", root, err)
			return
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				suiteTestsErr = err
				return
			}
			for _, m := range re.FindAllSubmatch(b, -1) {
				suiteTestNames[string(m[1])] = true
			}
		}
	})
	return suiteTestNames, suiteTestsErr
}

// auditedGroups are the groups of the ServiceAccounts TestManifestPermissions
// checks, as their manifests are shipped (system:serviceaccounts:NS):
// TestMain starts the API server auditing their requests. A directory
// that does not render is left out (TestKustomizationsStandAlone says why).
func auditedGroups() []string {
	var groups []string
	for _, pc := range permissionCases {
		for _, a := range pc.accounts {
			m, err := cluster.Render(filepath.Join(examplesDir(), filepath.FromSlash(a.dir)), cluster.RenderOptions{})
			if err != nil {
				continue
			}
			if sa := m.Object("ServiceAccount", a.name); sa != nil {
				groups = append(groups, "system:serviceaccounts:"+sa.GetNamespace())
			}
		}
	}
	slices.Sort(groups)
	return slices.Compact(groups)
}
