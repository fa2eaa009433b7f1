package suite_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"io"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	authorizationv1 "k8s.io/api/authorization/v1"

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

// sidecar is the snapshotmetadata sidecar from
// examples/snapshotmetadata/deploy (its Deployment's container, with the
// manifests' ServiceAccount and RBAC, and its SnapshotMetadataService
// object, whose audience it reads), serving with a certificate from a
// Secret as users create it, and a client for it.
type sidecar struct {
	*server
	c        *cluster.Cluster
	driver   string
	audience string
	caPEM    []byte
	roots    *x509.CertPool
	client   api.SnapshotMetadataClient
}

// startSidecar runs the sidecar as its manifests deploy it, after the
// steps they name: the snapshot CRDs installed, the Secret
// csi-snapshot-metadata-tls created (a serving certificate for 127.0.0.1
// from a fresh CA), and values.yaml filled with the address the sidecar
// will listen on and that CA. Each sidecar has a namespace and a driver
// (the object's name, with the suffix) of its own. Extra flags are args.
func startSidecar(t testing.TB, c *cluster.Cluster, args ...string) *sidecar {
	t.Helper()
	return startSidecarWith(t, c, deployOptions{}, args...)
}

// startSidecarWith is startSidecar with the manifests deployed with o.
func startSidecarWith(t testing.TB, c *cluster.Cluster, o deployOptions, args ...string) *sidecar {
	t.Helper()
	addr := loopback(freePort(t))
	m, ca := applySidecar(t, c, addr, o)
	sms := m.Object("SnapshotMetadataService", "hostpath.csi.k8s.io")
	audience, _, _ := unstructured.NestedString(sms.Object, "spec", "audience")
	srv := startServer(t, c, m, "Deployment", "csi-snapshot-metadata", "",
		append([]string{"--listen=" + addr, "--metrics-listen=127.0.0.1:0"}, args...)...)
	if got := srv.arg(t, "driver"); got != sms.GetName() {
		t.Fatalf("the sidecar's --driver=%q; want its SnapshotMetadataService object's name %q", got, sms.GetName())
	}
	metrics := strings.TrimSuffix(strings.TrimPrefix(srv.lineAfter(t, "metrics on "), "http://"), "/metrics")
	srv.checkProbes(t, map[int32]string{9090: metrics})
	s := &sidecar{server: srv, c: c, driver: sms.GetName(), audience: audience, caPEM: ca.CertPEM, roots: ca.Pool()}
	s.client = s.newClient(t)
	return s
}

// applySidecar applies examples/snapshotmetadata/deploy with o after the
// steps it names: the snapshot CRDs installed, values.yaml filled with
// addr and the CA, and the Secret csi-snapshot-metadata-tls created with
// a serving certificate for 127.0.0.1 from that CA, which it returns.
func applySidecar(t testing.TB, c *cluster.Cluster, addr string, o deployOptions) (*cluster.Manifests, *cluster.CA) {
	t.Helper()
	installSnapshotAPIs(t, c)
	ca, err := cluster.NewCA(cluster.UniqueName("snapshot-metadata-ca"))
	if err != nil {
		t.Fatal(err)
	}
	o.values = map[string]map[string]any{"values.yaml": {"spec.address": addr, "spec.caCert": base64.StdEncoding.EncodeToString(ca.CertPEM)}}
	m := deploy(t, c, deployDir("snapshotmetadata"), o)
	servingSecret(t, c, ca, m.Namespace(), "csi-snapshot-metadata-tls", "")
	return m, ca
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

	good := c.RequestToken(t, ns, "backup", cluster.TokenOptions{Audiences: []string{s.audience}})
	otherAudience := c.RequestToken(t, ns, "backup", cluster.TokenOptions{Audiences: []string{"other.example.com"}})
	apiServerAudience := c.RequestToken(t, ns, "backup", cluster.TokenOptions{})
	tokens := []string{good, otherAudience, apiServerAudience}

	// Before the client's ClusterRole is bound: the same ServiceAccount is denied.
	_, err := allocated(t.Context(), s.client, good, ns, "snap-0")
	wantCode(t, "GetMetadataAllocated(snap-0) without the client's role", err, codes.PermissionDenied, tokens...)

	c.BindClusterRole(t, ns, snapshotClientRole(t, c), cluster.ServiceAccountSubject(ns, "backup"))
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
