package suite_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// The load flow's shape: loadCallers ServiceAccounts, each with its own
// token and connection, making loadCallsPerCaller calls from
// loadStreamsPerCaller goroutines at once.
const (
	loadCallers          = 10
	loadStreamsPerCaller = 10
	loadCallsPerCaller   = 100
	// loadAttributeSets is the number of distinct authorization checks per
	// caller: GetMetadataAllocated(snap-1) needs "get snap-1";
	// GetMetadataDelta(snap-1 -> snap-2) needs "get snap-1" and "get snap-2".
	loadAttributeSets = 2
)

// reviewCounts reads how many TokenReviews and SubjectAccessReviews the API
// server has answered since it started.
func reviewCounts(ctx context.Context, c *cluster.Cluster) (tokenReviews, sars float64, err error) {
	tokenReviews, err = c.MetricValue(ctx, "apiserver_request_total", map[string]string{"resource": "tokenreviews", "verb": "POST"})
	if err != nil {
		return 0, 0, err
	}
	sars, err = c.MetricValue(ctx, "apiserver_request_total", map[string]string{"resource": "subjectaccessreviews", "verb": "POST"})
	return tokenReviews, sars, err
}

// TestLoadReviewCount sends a burst of 1,000 calls from 10 callers through
// the snapshotmetadata example and counts, with the API server's
// apiserver_request_total, the TokenReviews and SubjectAccessReviews it
// cost: bounded by callers x checks, not by calls. It must not run in
// parallel with other tests, whose reviews would be counted too.
func TestLoadReviewCount(t *testing.T) {
	c := cluster.Get(t)
	s := startSidecar(t, c)
	ns := c.UniqueNamespace(t, "load")
	s.createSnapshots(t, ns, "snap-1", "snap-2")
	subjects := make([]rbacv1.Subject, loadCallers)
	for i := range subjects {
		name := fmt.Sprintf("backup-%d", i)
		c.CreateServiceAccount(t, ns, name)
		subjects[i] = cluster.ServiceAccountSubject(ns, name)
	}
	c.BindClusterRole(t, ns, snapshotClientRole(t, c), subjects...)
	type caller struct {
		token  string
		client api.SnapshotMetadataClient
	}
	callers := make([]caller, loadCallers)
	for i, sub := range subjects {
		for _, snap := range []string{"snap-1", "snap-2"} {
			c.WaitForAccess(t, snapshotSpec(serviceAccountUser(ns, sub.Name), ns, snap), true)
		}
		callers[i] = caller{
			token:  c.RequestToken(t, ns, sub.Name, cluster.TokenOptions{Audiences: []string{s.audience}}),
			client: s.newClient(t),
		}
	}

	ctx, cancel := ctxFor(t, 2*time.Minute)
	defer cancel()
	tr0, sar0, err := reviewCounts(ctx, c)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []error
	)
	for _, cl := range callers {
		for g := range loadStreamsPerCaller {
			wg.Go(func() {
				for i := range loadCallsPerCaller / loadStreamsPerCaller {
					var err error
					if (g+i)%2 == 0 {
						_, err = allocated(ctx, cl.client, cl.token, ns, "snap-1")
					} else {
						_, err = delta(ctx, cl.client, cl.token, ns, "snap-1", "snap-2")
					}
					if err != nil {
						mu.Lock()
						failures = append(failures, err)
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	calls := loadCallers * loadCallsPerCaller
	if len(failures) > 0 {
		t.Fatalf("%d of %d calls failed; first: %v", len(failures), calls, failures[0])
	}

	// The API server counts a request when it finishes the response, a
	// moment after the client has it: wait for the least possible count,
	// then once more for stragglers.
	minTR, maxTR := float64(loadCallers), float64(loadCallers)
	minSAR, maxSAR := float64(loadCallers*loadAttributeSets), float64(loadCallers*loadAttributeSets)
	var tr, sar float64
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		tr1, sar1, err := reviewCounts(ctx, c)
		tr, sar = tr1-tr0, sar1-sar0
		return tr >= minTR && sar >= minSAR, err
	})
	if err != nil {
		t.Fatalf("after %d calls from %d callers, the API server counted %v TokenReviews and %v SubjectAccessReviews; want at least %v and %v (%v)",
			calls, loadCallers, tr, sar, minTR, minSAR, err)
	}
	time.Sleep(500 * time.Millisecond) // stragglers: bounded, and only to catch excess.
	tr1, sar1, err := reviewCounts(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	tr, sar = tr1-tr0, sar1-sar0
	t.Logf("observed: %d calls from %d callers in %v (%.0f calls/s): %v TokenReviews (bound %v), %v SubjectAccessReviews (bound %v)",
		calls, loadCallers, elapsed.Round(time.Millisecond), float64(calls)/elapsed.Seconds(), tr, maxTR, sar, maxSAR)
	if tr > maxTR {
		t.Errorf("TokenReviews for %d calls from %d callers = %v; want at most %v (one per caller)", calls, loadCallers, tr, maxTR)
	}
	if sar > maxSAR {
		t.Errorf("SubjectAccessReviews for %d calls from %d callers x %d checks = %v; want at most %v", calls, loadCallers, loadAttributeSets, sar, maxSAR)
	}
}
