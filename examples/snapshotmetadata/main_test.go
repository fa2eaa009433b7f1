package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/iterator"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"

	smsv1alpha1 "github.com/kubernetes-csi/external-snapshot-metadata/client/apis/snapshotmetadataservice/v1alpha1"
	smsfake "github.com/kubernetes-csi/external-snapshot-metadata/client/clientset/versioned/fake"
	snapshotclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"

	"github.com/reviewauth/reviewauth/authtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the clients the sidecar built
		// close asynchronously once the fake API server is gone.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		// The upstream pkg/iterator (v0.2.0) creates a grpc.ClientConn per
		// iteration and never closes it; its idle serializers stay.
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	)
}

const (
	testAudience = "snapshotmetadata.example.com"
	testNS       = "apps"
)

var backupUser = &user.DefaultInfo{
	Name:   "system:serviceaccount:apps:backup",
	UID:    "3f1c1b7e-0000-4000-8000-000000000001",
	Groups: []string{"system:serviceaccounts", "system:serviceaccounts:apps", "system:authenticated"},
}

// sidecar is a running snapshotmetadata server and a client for it.
type sidecar struct {
	api    *authtest.Server
	addr   string
	caPEM  []byte
	client api.SnapshotMetadataClient
}

// startSidecar starts the fake API server and, in process, the sidecar
// with its command line, and connects the upstream generated client to it.
func startSidecar(t *testing.T) *sidecar {
	t.Helper()
	s := authtest.Start(t)
	// The backup service account may read snap-1 and snap-2 in apps, not
	// snap-3.
	s.SetPolicy(authtest.Rules(authtest.Rule{
		Users: []string{backupUser.Name}, Verbs: []string{"get"}, APIGroups: []string{snapshotGroup},
		Resources: []string{snapshotResource}, Namespaces: []string{testNS}, Names: []string{"snap-1", "snap-2"},
	}))
	s.AddServiceAccount(testNS, "backup")
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := s.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{
			"--listen=127.0.0.1:0", "--kubeconfig=" + kubeconfig, "--audience=" + testAudience,
			"--self-signed-ca-file=" + caFile,
		}, FakeBackend{}, func(a net.Addr) { ready <- a })
	}()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("run() = %v before serving", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run() = %v after cancel; want nil", err)
		}
	})

	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &sidecar{api: s, addr: addr.String(), caPEM: caPEM, client: api.NewSnapshotMetadataClient(conn)}
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

func TestEndToEnd(t *testing.T) {
	sc := startSidecar(t)
	good := sc.api.MintToken(backupUser, []string{testAudience}, time.Now().Add(time.Hour))
	apiServerToken := sc.api.MintToken(backupUser, nil, time.Now().Add(time.Hour))
	ctx := t.Context()

	var wantAllocated []*api.GetMetadataAllocatedResponse
	_ = FakeBackend{}.Allocated(ctx, testNS, "snap-1", 0, 0, func(r *api.GetMetadataAllocatedResponse) error {
		wantAllocated = append(wantAllocated, r)
		return nil
	})
	var wantDelta []*api.GetMetadataDeltaResponse
	_ = FakeBackend{}.Delta(ctx, testNS, "snap-id-snap-1", "snap-2", 0, 4, func(r *api.GetMetadataDeltaResponse) error {
		wantDelta = append(wantDelta, r)
		return nil
	})
	if len(wantAllocated) == 0 || len(wantDelta) < 2 {
		t.Fatalf("the fake backend made %d allocated and %d delta pages; want some", len(wantAllocated), len(wantDelta))
	}

	allocated := func(token, ns, name string) ([]*api.GetMetadataAllocatedResponse, error) {
		return recvAll(sc.client.GetMetadataAllocated(ctx, &api.GetMetadataAllocatedRequest{SecurityToken: token, Namespace: ns, SnapshotName: name}))
	}
	delta := func(token, base, target string) ([]*api.GetMetadataDeltaResponse, error) {
		return recvAll(sc.client.GetMetadataDelta(ctx, &api.GetMetadataDeltaRequest{SecurityToken: token, Namespace: testNS, BaseSnapshotId: base, TargetSnapshotName: target, MaxResults: 4}))
	}

	t.Run("allocated", func(t *testing.T) {
		got, err := allocated(good, testNS, "snap-1")
		if err != nil {
			t.Fatalf("GetMetadataAllocated(snap-1) = %v", err)
		}
		if !equalResponses(got, wantAllocated) {
			t.Errorf("GetMetadataAllocated(snap-1) = %d responses; want the backend's %d", len(got), len(wantAllocated))
		}
	})
	t.Run("delta", func(t *testing.T) {
		got, err := delta(good, "snap-id-snap-1", "snap-2")
		if err != nil {
			t.Fatalf("GetMetadataDelta(snap-1, snap-2) = %v", err)
		}
		if !equalResponses(got, wantDelta) {
			t.Errorf("GetMetadataDelta(snap-1, snap-2) = %d responses; want the backend's %d", len(got), len(wantDelta))
		}
	})

	failures := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"no token", func() error { _, err := allocated("", testNS, "snap-1"); return err }, codes.Unauthenticated},
		{"API server audience", func() error { _, err := allocated(apiServerToken, testNS, "snap-1"); return err }, codes.Unauthenticated},
		{"unknown token", func() error { _, err := allocated("forged-token-0123456789", testNS, "snap-1"); return err }, codes.Unauthenticated},
		{"snapshot not allowed", func() error { _, err := allocated(good, testNS, "snap-3"); return err }, codes.PermissionDenied},
		{"namespace not allowed", func() error { _, err := allocated(good, "other", "snap-1"); return err }, codes.PermissionDenied},
		{"missing snapshot_name", func() error { _, err := allocated(good, testNS, ""); return err }, codes.InvalidArgument},
		{"missing namespace", func() error { _, err := allocated(good, "", "snap-1"); return err }, codes.InvalidArgument},
		{"delta target not allowed", func() error { _, err := delta(good, "snap-id-snap-1", "snap-3"); return err }, codes.PermissionDenied},
		{"delta base not allowed", func() error { _, err := delta(good, "snap-id-snap-3", "snap-2"); return err }, codes.PermissionDenied},
		{"delta base unknown", func() error { _, err := delta(good, "bogus", "snap-2"); return err }, codes.InvalidArgument},
		{"delta base missing", func() error { _, err := delta(good, "", "snap-2"); return err }, codes.InvalidArgument},
	}
	for _, f := range failures {
		t.Run(f.name, func(t *testing.T) {
			err := f.call()
			if status.Code(err) != f.want {
				t.Fatalf("call = %v; want code %v", err, f.want)
			}
			if strings.Contains(err.Error(), good) || strings.Contains(err.Error(), apiServerToken) {
				t.Errorf("call = %v; the status message contains a token", err)
			}
		})
	}

	t.Run("health needs no token", func(t *testing.T) {
		conn, err := grpc.NewClient(sc.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: poolOf(sc.caPEM)})))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Health.Check() = %v, %v; want SERVING", resp, err)
		}
	})

	t.Run("reviews are cached", func(t *testing.T) {
		before := sc.api.Count(authtest.TokenReviews)
		for i := 0; i < 3; i++ {
			if _, err := allocated(good, testNS, "snap-1"); err != nil {
				t.Fatal(err)
			}
		}
		if n := sc.api.Count(authtest.TokenReviews) - before; n != 0 {
			t.Errorf("TokenReviews for 3 more calls with a known token = %d; want 0", n)
		}
	})
}

func poolOf(pemBytes []byte) *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(pemBytes)
	return p
}

func equalResponses[T proto.Message](got, want []T) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			return false
		}
	}
	return true
}

func TestFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "no audience", args: []string{"--kubeconfig=x"}, want: "--audience is required"},
		{name: "cert without key", args: []string{"--audience=a", "--tls-cert-file=c"}, want: "go together"},
		{name: "stray argument", args: []string{"--audience=a", "extra"}, want: "unexpected arguments"},
		{name: "unknown flag", args: []string{"--audience=a", "--nope"}, want: "unknown flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseFlags(tt.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("parseFlags(%q) = %v; want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

// ExampleFakeBackend shows the deterministic metadata the fake backend
// serves.
func ExampleFakeBackend() {
	b := FakeBackend{Blocks: 8, BlockSize: 4096}
	_ = b.Allocated(context.Background(), "apps", "snap-1", 0, 3, func(r *api.GetMetadataAllocatedResponse) error {
		var offs []string
		for _, m := range r.GetBlockMetadata() {
			offs = append(offs, fmt.Sprint(m.GetByteOffset()))
		}
		fmt.Println(r.GetBlockMetadataType(), r.GetVolumeCapacityBytes(), strings.Join(offs, ","))
		return nil
	})
	name, err := b.SnapshotName(context.Background(), "apps", "snap-id-snap-1")
	fmt.Println(name, err)
	// Output:
	// FIXED_LENGTH 32768 0,4096,8192
	// FIXED_LENGTH 32768 20480,24576,28672
	// snap-1 <nil>
}

// collector is an iterator.IteratorEmitter that keeps what it is given.
type collector struct {
	records []iterator.IteratorMetadata
	done    int
}

func (c *collector) SnapshotMetadataIteratorRecord(_ int, m iterator.IteratorMetadata) error {
	c.records = append(c.records, m)
	return nil
}

func (c *collector) SnapshotMetadataIteratorDone(n int) error {
	c.done = n
	return nil
}

// TestUpstreamIterator runs the upstream module's own client,
// pkg/iterator, against the sidecar unchanged: it reads the
// SnapshotMetadataService object, asks the TokenRequest API for a token
// with the audience found there, and streams the metadata over TLS with the
// CA found there.
func TestUpstreamIterator(t *testing.T) {
	sc := startSidecar(t)
	cfg := sc.api.Config()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshotclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const driver = "fake.csi.example.com"
	sms := smsfake.NewSimpleClientset(&smsv1alpha1.SnapshotMetadataService{
		ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec:       smsv1alpha1.SnapshotMetadataServiceSpec{Audience: testAudience, Address: sc.addr, CACert: sc.caPEM},
	})
	clients := iterator.Clients{KubeClient: kube, SnapshotClient: snaps, SmsCRClient: sms}

	tests := []struct {
		name    string
		prevID  string
		target  string
		wantErr codes.Code
	}{
		{name: "allocated", target: "snap-1"},
		{name: "delta", prevID: "snap-id-snap-1", target: "snap-2"},
		{name: "not allowed", target: "snap-3", wantErr: codes.PermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &collector{}
			err := iterator.GetSnapshotMetadata(t.Context(), iterator.Args{
				Clients:        clients,
				Emitter:        c,
				Namespace:      testNS,
				SnapshotName:   tt.target,
				PrevSnapshotID: tt.prevID,
				MaxResults:     8,
				CSIDriver:      driver,
				SANamespace:    testNS,
				SAName:         "backup",
			})
			if tt.wantErr != codes.OK {
				if status.Code(errors.Unwrap(err)) != tt.wantErr && !strings.Contains(fmt.Sprint(err), tt.wantErr.String()) {
					t.Fatalf("GetSnapshotMetadata() = %v; want code %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("GetSnapshotMetadata() = %v", err)
			}
			// The blocks the iterator saw are those of the backend.
			var want [][]*api.BlockMetadata
			if tt.prevID == "" {
				_ = FakeBackend{}.Allocated(t.Context(), testNS, tt.target, 0, 8, func(r *api.GetMetadataAllocatedResponse) error {
					want = append(want, r.GetBlockMetadata())
					return nil
				})
			} else {
				_ = FakeBackend{}.Delta(t.Context(), testNS, tt.prevID, tt.target, 0, 8, func(r *api.GetMetadataDeltaResponse) error {
					want = append(want, r.GetBlockMetadata())
					return nil
				})
			}
			if len(c.records) != len(want) || c.done != len(want) {
				t.Fatalf("iterator got %d records (done %d); want %d", len(c.records), c.done, len(want))
			}
			for i := range want {
				if !equalResponses(c.records[i].BlockMetadata, want[i]) {
					t.Errorf("record %d = %v; want %v", i, c.records[i].BlockMetadata, want[i])
				}
			}
		})
	}
	if n := sc.api.Count(authtest.TokenRequests); n != len(tests) {
		t.Errorf("TokenRequests = %d; want %d, one per iteration", n, len(tests))
	}
}

// TestBinary builds the command and runs it as a subprocess, as an
// end-to-end suite would: it reads the address from the "listening on"
// line, trusts the certificate written to --self-signed-ca-file, and stops
// the sidecar with SIGTERM.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	s := authtest.Start(t)
	s.SetPolicy(authtest.Rules(authtest.Rule{
		Users: []string{backupUser.Name}, Verbs: []string{"get"}, APIGroups: []string{snapshotGroup},
		Resources: []string{snapshotResource}, Namespaces: []string{testNS},
	}))
	dir := t.TempDir()
	bin, kubeconfig, caFile := filepath.Join(dir, "snapshotmetadata"), filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "ca.pem")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build = %v\n%s", err, out)
	}
	if err := s.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--listen=127.0.0.1:0", "--kubeconfig="+kubeconfig, "--audience="+testAudience, "--self-signed-ca-file="+caFile)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		t.Fatalf("first line = %q, %v; want \"listening on ADDRESS\"", line, err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: poolOf(caPEM)})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tok := s.MintToken(backupUser, []string{testAudience}, time.Now().Add(time.Hour))
	got, err := recvAll(api.NewSnapshotMetadataClient(conn).GetMetadataAllocated(t.Context(),
		&api.GetMetadataAllocatedRequest{SecurityToken: tok, Namespace: testNS, SnapshotName: "snap-1"}))
	if err != nil || len(got) == 0 {
		t.Fatalf("GetMetadataAllocated() = %d responses, %v; want some", len(got), err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("snapshotmetadata exited with %v after SIGTERM; want success", err)
	}
}
