package suite_test

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

const (
	snapshotGroup    = "snapshot.storage.k8s.io"
	snapshotResource = "volumesnapshots"
	// defaultSuccessTTL is how long the examples cache an identity by
	// default: authn.DefaultSuccessTTL.
	defaultSuccessTTL = time.Minute
	// shortSuccessTTL is the identity cache TTL the CSI flow asks for, when
	// the example has successTTLFlag, to bound revocation tests.
	shortSuccessTTL = 15 * time.Second
	successTTLFlag  = "--authentication-token-webhook-cache-ttl"
	// apiServerTokenCacheTTL is how long kube-apiserver itself caches a
	// successful token authentication (TokenReviews included).
	apiServerTokenCacheTTL = 10 * time.Second
	// callTimeout bounds one call to an example. A call that needs a review
	// during an outage takes the review's retry budget (authn.DefaultTimeout).
	callTimeout = 20 * time.Second
)

// snapshotReader is the rule of the Role the backup application needs.
var snapshotReader = rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{snapshotGroup}, Resources: []string{snapshotResource}}

// sidecar is a running snapshotmetadata example and a client for it.
type sidecar struct {
	*example
	c        *cluster.Cluster
	driver   string
	audience string
	caPEM    []byte
	roots    *x509.CertPool
	client   api.SnapshotMetadataClient
}

// startSidecar runs the snapshotmetadata example against the cluster as it
// is deployed upstream, and connects the upstream generated client to it:
// the snapshot CRDs are installed; the example's driver (a unique name) has
// a SnapshotMetadataService object, from which the example reads its
// audience and in which its address and CA are published once it serves;
// it runs as a ServiceAccount bound to system:auth-delegator, upstream's
// sidecar ClusterRole, and watch on snapshots. Extra flags are args.
func startSidecar(t testing.TB, c *cluster.Cluster, args ...string) *sidecar {
	t.Helper()
	installSnapshotAPIs(t, c)
	driver := cluster.UniqueName("snapshotmetadata") + ".csi.example.com"
	audience := cluster.UniqueName("snapshotmetadata") + ".example.com"
	createSnapshotMetadataService(t, c, driver, audience)
	kubeconfig := reviewerKubeconfig(t, c, "snapshotmetadata", upstreamSidecarRole, sidecarWatchRole)
	caFile := filepath.Join(t.TempDir(), "sidecar-ca.pem")
	e := startExample(t, snapshotMetadataBin, append([]string{"--listen=127.0.0.1:0", "--kubeconfig=" + kubeconfig,
		"--driver=" + driver, "--self-signed-ca-file=" + caFile}, args...)...)
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatalf("reading the sidecar's --self-signed-ca-file: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("--self-signed-ca-file %s holds no certificate", caFile)
	}
	publishSnapshotMetadataService(t, c, driver, e.addr, caPEM)
	s := &sidecar{example: e, c: c, driver: driver, audience: audience, caPEM: caPEM, roots: roots}
	s.client = s.newClient(t)
	return s
}

// createSnapshots creates ready VolumeSnapshots of the sidecar's driver in
// ns, with their contents (see createSnapshot).
func (s *sidecar) createSnapshots(t testing.TB, ns string, names ...string) {
	t.Helper()
	for _, name := range names {
		createSnapshot(t, s.c, s.driver, ns, name, snapshotOptions{})
	}
}

// newClient returns a client on a connection of its own, closed when the
// test ends.
func (s *sidecar) newClient(t testing.TB) api.SnapshotMetadataClient {
	t.Helper()
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig(s.roots))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return api.NewSnapshotMetadataClient(conn)
}

// recvAll drains a server stream.
func recvAll[T any](stream grpc.ServerStreamingClient[T], err error) ([]*T, error) {
	if err != nil {
		return nil, err
	}
	var out []*T
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
}

// allocated calls GetMetadataAllocated with client and drains the stream.
func allocated(ctx context.Context, client api.SnapshotMetadataClient, token, ns, snapshot string) ([]*api.GetMetadataAllocatedResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return recvAll(client.GetMetadataAllocated(ctx, &api.GetMetadataAllocatedRequest{SecurityToken: token, Namespace: ns, SnapshotName: snapshot}))
}

// delta calls GetMetadataDelta with client from the handle of
// VolumeSnapshot ns/base to ns/target, and drains the stream.
func delta(ctx context.Context, client api.SnapshotMetadataClient, token, ns, base, target string) ([]*api.GetMetadataDeltaResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return recvAll(client.GetMetadataDelta(ctx, &api.GetMetadataDeltaRequest{
		SecurityToken: token, Namespace: ns, BaseSnapshotId: snapshotHandle(ns, base), TargetSnapshotName: target, MaxResults: 4,
	}))
}

// snapshotSpec is the SubjectAccessReview the sidecar makes for user
// reading snapshot in ns.
func snapshotSpec(user, ns, snapshot string) authorizationv1.SubjectAccessReviewSpec {
	return authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{
		Verb: "get", Group: snapshotGroup, Resource: snapshotResource, Namespace: ns, Name: snapshot,
	}}
}

// serviceAccountUser is the user name of the ServiceAccount ns/name.
func serviceAccountUser(ns, name string) string { return "system:serviceaccount:" + ns + ":" + name }

// wantCode fails the test unless err has code want, and checks that no
// token leaked into the status message.
func wantCode(t testing.TB, call string, err error, want codes.Code, tokens ...string) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s = %v; want code %v", call, err, want)
	}
	if err == nil {
		return
	}
	for _, tok := range tokens {
		if tok != "" && strings.Contains(err.Error(), tok) {
			t.Errorf("%s = %v; the status message contains a token", call, err)
		}
	}
}

// TestCSISnapshotMetadata runs the CSI changed-block-tracking flow: a backup
// application's TokenRequest token for the sidecar's audience, reviewed and
// authorized by the real API server through the snapshotmetadata example.
func TestCSISnapshotMetadata(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	successTTL, args := defaultSuccessTTL, []string(nil)
	if exampleHasFlag(t, snapshotMetadataBin, successTTLFlag) {
		successTTL, args = shortSuccessTTL, []string{successTTLFlag + "=" + shortSuccessTTL.String()}
	}
	t.Logf("snapshotmetadata success TTL: %v", successTTL)
	s := startSidecar(t, c, args...)
	ns := c.UniqueNamespace(t, "apps")
	c.CreateServiceAccount(t, ns, "backup")
	user := serviceAccountUser(ns, "backup")
	s.createSnapshots(t, ns, "snap-0", "snap-1", "snap-2")
	c.CreateRole(t, ns, "snapshot-reader", snapshotReader)

	good := c.RequestToken(t, ns, "backup", cluster.TokenOptions{Audiences: []string{s.audience}})
	otherAudience := c.RequestToken(t, ns, "backup", cluster.TokenOptions{Audiences: []string{"other.example.com"}})
	apiServerAudience := c.RequestToken(t, ns, "backup", cluster.TokenOptions{})
	tokens := []string{good, otherAudience, apiServerAudience}

	// Before the Role is bound: the same ServiceAccount is denied.
	_, err := allocated(t.Context(), s.client, good, ns, "snap-0")
	wantCode(t, "GetMetadataAllocated(snap-0) without the Role", err, codes.PermissionDenied, tokens...)

	c.BindRole(t, ns, "snapshot-reader", cluster.ServiceAccountSubject(ns, "backup"))
	c.WaitForAccess(t, snapshotSpec(user, ns, "snap-1"), true)

	t.Run("allocated streams", func(t *testing.T) {
		got, err := allocated(t.Context(), s.client, good, ns, "snap-1")
		if err != nil {
			t.Fatalf("GetMetadataAllocated(snap-1) = %v; want a stream", err)
		}
		blocks := 0
		for _, r := range got {
			blocks += len(r.GetBlockMetadata())
		}
		t.Logf("observed: GetMetadataAllocated(snap-1) streamed %d responses, %d blocks", len(got), blocks)
		if len(got) == 0 || blocks == 0 {
			t.Errorf("GetMetadataAllocated(snap-1) = %d responses with %d blocks; want some", len(got), blocks)
		}
	})
	t.Run("delta streams", func(t *testing.T) {
		got, err := delta(t.Context(), s.client, good, ns, "snap-1", "snap-2")
		if err != nil {
			t.Fatalf("GetMetadataDelta(snap-1, snap-2) = %v; want a stream", err)
		}
		if len(got) < 2 {
			t.Errorf("GetMetadataDelta(snap-1, snap-2, max 4) = %d responses; want several pages", len(got))
		}
	})
	rejected := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{name: "other namespace", want: codes.PermissionDenied, call: func() error {
			_, err := allocated(t.Context(), s.client, good, "default", "snap-1")
			return err
		}},
		{name: "token for another audience", want: codes.Unauthenticated, call: func() error {
			_, err := allocated(t.Context(), s.client, otherAudience, ns, "snap-1")
			return err
		}},
		{name: "token for the API server's audience", want: codes.Unauthenticated, call: func() error {
			_, err := allocated(t.Context(), s.client, apiServerAudience, ns, "snap-1")
			return err
		}},
	}
	for _, tc := range rejected {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			t.Logf("observed: %s: %v", tc.name, err)
			wantCode(t, tc.name, err, tc.want, tokens...)
		})
	}

	t.Run("token of a deleted pod", func(t *testing.T) {
		pod := c.CreatePod(t, ns, "backup-0", cluster.PodOptions{ServiceAccount: "backup"})
		bound := c.RequestToken(t, ns, "backup", cluster.TokenOptions{Audiences: []string{s.audience}, BoundPod: pod})
		reviewed := time.Now()
		if _, err := allocated(t.Context(), s.client, bound, ns, "snap-1"); err != nil {
			t.Fatalf("GetMetadataAllocated(pod-bound token) = %v; want a stream", err)
		}
		c.DeletePod(t, ns, pod.Name)
		deleted := time.Now()

		// The sidecar keeps the identity for its success TTL from the
		// review; the API server may then answer from its own cache.
		deadline := reviewed.Add(successTTL + apiServerTokenCacheTTL + 5*time.Second)
		var (
			err          error
			lastAccepted time.Time
		)
		for {
			_, err = allocated(t.Context(), s.client, bound, ns, "snap-1")
			if err != nil {
				break
			}
			lastAccepted = time.Now()
			if time.Now().After(deadline) {
				t.Fatalf("GetMetadataAllocated(token of a pod deleted %v ago) = accepted; want refused within the success TTL (%v) + the API server's cache (%v)",
					time.Since(deleted).Round(time.Second), successTTL, apiServerTokenCacheTTL)
			}
			select {
			case <-t.Context().Done():
				t.Fatal(t.Context().Err())
			case <-time.After(500 * time.Millisecond):
			}
		}
		refused := time.Now()
		t.Logf("observed: token of a deleted pod: still accepted %v after deletion (cached), refused %v after deletion, %v after its first review (success TTL %v): %v",
			lastAccepted.Sub(deleted).Round(100*time.Millisecond), refused.Sub(deleted).Round(100*time.Millisecond),
			refused.Sub(reviewed).Round(100*time.Millisecond), successTTL, err)
		wantCode(t, "GetMetadataAllocated(token of a deleted pod)", err, codes.Unauthenticated, bound)
	})
}
