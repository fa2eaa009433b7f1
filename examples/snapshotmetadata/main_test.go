package main

import (
	"bytes"
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
	"sync"
	"testing"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/iterator"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapshotfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	smsv1alpha1 "github.com/kubernetes-csi/external-snapshot-metadata/client/apis/snapshotmetadataservice/v1alpha1"
	smsclient "github.com/kubernetes-csi/external-snapshot-metadata/client/clientset/versioned"
	smsfake "github.com/kubernetes-csi/external-snapshot-metadata/client/clientset/versioned/fake"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/examples/internal/clitest"
	"github.com/reviewauth/reviewauth/internal/reliability"
)

func TestMain(m *testing.M) {
	// The fake clientsets of external-snapshotter v8.4.0 were generated
	// before client-go's WatchListClient (on by default in v0.37) and do
	// not say they lack its semantics, so informers over them would wait
	// for a bookmark that never comes. A real API server supports it.
	if err := os.Setenv("KUBE_FEATURE_WatchListClient", "false"); err != nil {
		panic(err)
	}
	reliability.MaybeAttack()               // TestFloods' attackers run as processes of this binary
	clitest.MaybeRunMain(fakeSnapshotsMain) // TestFloods runs the sidecar as a process
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the clients the sidecar built
		// close asynchronously once the fake API server is gone.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		// The upstream pkg/iterator (v0.2.0) creates a grpc.ClientConn per
		// iteration and never closes it; its idle serializers stay.
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		// component-base's logging starts klog's flush daemon.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

const (
	testAudience = "snapshotmetadata.example.com"
	testDriver   = "fake.csi.example.com"
	testNS       = "apps"
	otherNS      = "other"
)

var backupUser = &user.DefaultInfo{
	Name:   "system:serviceaccount:apps:backup",
	UID:    "3f1c1b7e-0000-4000-8000-000000000001",
	Groups: []string{"system:serviceaccounts", "system:serviceaccounts:apps", "system:authenticated"},
}

// handleOf is the CSI snapshot handle of the test VolumeSnapshot ns/name.
func handleOf(ns, name string) string { return "handle-" + ns + "-" + name }

// snapOpts varies a test snapshot.
type snapOpts struct {
	notReady       bool   // the VolumeSnapshot is not ready to use
	driver         string // of the content; empty: testDriver
	noSnapshot     bool   // only the content is left (deletionPolicy Retain)
	boundTo        string // the VolumeSnapshotContent the snapshot claims; empty: its own
	contentRefNS   string // the namespace the content's volumeSnapshotRef names; empty: the snapshot's
	contentRefName string // the name it names; empty: the snapshot's
}

// snapshotObjects returns the VolumeSnapshot ns/name and its bound
// VolumeSnapshotContent, as the snapshot controller leaves them once the
// snapshot is taken.
func snapshotObjects(ns, name string, o snapOpts) []runtime.Object {
	driver := o.driver
	if driver == "" {
		driver = testDriver
	}
	uid := types.UID("uid-" + ns + "-" + name)
	contentName := "snapcontent-" + string(uid)
	handle := handleOf(ns, name)
	refNS, refName := ns, name
	if o.contentRefNS != "" {
		refNS = o.contentRefNS
	}
	if o.contentRefName != "" {
		refName = o.contentRefName
	}
	vsc := &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: contentName},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{Kind: "VolumeSnapshot", Namespace: refNS, Name: refName, UID: uid},
			DeletionPolicy:    snapshotv1.VolumeSnapshotContentRetain,
			Driver:            driver,
			Source:            snapshotv1.VolumeSnapshotContentSource{VolumeHandle: new("vol-" + ns)},
		},
		Status: &snapshotv1.VolumeSnapshotContentStatus{SnapshotHandle: &handle, ReadyToUse: new(true)},
	}
	if o.noSnapshot {
		return []runtime.Object{vsc}
	}
	bound := contentName
	if o.boundTo != "" {
		bound = o.boundTo
	}
	vs := &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid},
		Spec:       snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: new("pvc")}},
		Status:     &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: &bound, ReadyToUse: new(!o.notReady)},
	}
	return []runtime.Object{vs, vsc}
}

// testSnapshots are the snapshots of the unit tests. The backup service
// account may get every VolumeSnapshot in apps but snap-3 (see
// startSidecar).
func testSnapshots() []runtime.Object {
	var objs []runtime.Object
	for _, name := range []string{"snap-1", "snap-2", "snap-3"} {
		objs = append(objs, snapshotObjects(testNS, name, snapOpts{})...)
	}
	objs = append(objs, snapshotObjects(testNS, "not-ready", snapOpts{notReady: true})...)
	objs = append(objs, snapshotObjects(testNS, "other-driver", snapOpts{driver: "other.csi.example.com"})...)
	// A VolumeSnapshot that claims another namespace's content.
	objs = append(objs, snapshotObjects(testNS, "stolen", snapOpts{boundTo: "snapcontent-uid-" + otherNS + "-snap-x"})...)
	objs = append(objs, snapshotObjects(otherNS, "snap-x", snapOpts{})...)
	// The base snapshot was deleted; its content was retained.
	objs = append(objs, snapshotObjects(testNS, "retained", snapOpts{noSnapshot: true})...)
	return objs
}

// allowedSnapshots are the VolumeSnapshot names in apps the backup service
// account may get.
var allowedSnapshots = []string{"snap-1", "snap-2", "not-ready", "other-driver", "stolen", "retained", "missing"}

// sidecar is a running snapshotmetadata server and a client for it.
type sidecar struct {
	api      *authtest.Server
	snaps    *snapshotfake.Clientset
	services *smsfake.Clientset
	addr     string
	caPEM    []byte
	client   api.SnapshotMetadataClient
	logs     *syncBuffer
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startSidecar starts the fake API server and, in process, the sidecar
// with its command line (plus args), reading the snapshots and its
// SnapshotMetadataService from fake clientsets, and connects the upstream
// generated client to it. The sidecar logs to sidecar.logs.
func startSidecar(t *testing.T, args ...string) *sidecar {
	t.Helper()
	s := authtest.Start(t)
	s.SetPolicy(authtest.Rules(authtest.Rule{
		Users: []string{backupUser.Name}, Verbs: []string{"get"}, APIGroups: []string{snapshotGroup},
		Resources: []string{snapshotResource}, Namespaces: []string{testNS}, Names: allowedSnapshots,
	}))
	s.AddServiceAccount(testNS, "backup")
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := s.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	snaps := snapshotfake.NewSimpleClientset(testSnapshots()...)
	services := smsfake.NewSimpleClientset(&smsv1alpha1.SnapshotMetadataService{
		ObjectMeta: metav1.ObjectMeta{Name: testDriver},
		Spec:       smsv1alpha1.SnapshotMetadataServiceSpec{Audience: testAudience, Address: "pending", CACert: []byte("pending")},
	})
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(logs)))))
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{
			"--listen=127.0.0.1:0", "--kubeconfig=" + kubeconfig, "--driver=" + testDriver, "--self-signed-ca-file=" + caFile,
		}, args...), deps{backend: FakeBackend{}, snapshots: snaps, services: services}, func(a net.Addr) { ready <- a })
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
	// The address and CA the clients find, as the driver's deployment
	// would publish them.
	sms, err := services.CbtV1alpha1().SnapshotMetadataServices().Get(t.Context(), testDriver, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sms.Spec.Address, sms.Spec.CACert = addr.String(), caPEM
	if _, err := services.CbtV1alpha1().SnapshotMetadataServices().Update(t.Context(), sms, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: poolOf(caPEM)})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &sidecar{api: s, snaps: snaps, services: services, addr: addr.String(), caPEM: caPEM, client: api.NewSnapshotMetadataClient(conn), logs: logs}
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

func (sc *sidecar) allocated(ctx context.Context, token, ns, name string) ([]*api.GetMetadataAllocatedResponse, error) {
	return recvAll(sc.client.GetMetadataAllocated(ctx, &api.GetMetadataAllocatedRequest{SecurityToken: token, Namespace: ns, SnapshotName: name}))
}

func (sc *sidecar) delta(ctx context.Context, token, base, target string) ([]*api.GetMetadataDeltaResponse, error) {
	return recvAll(sc.client.GetMetadataDelta(ctx, &api.GetMetadataDeltaRequest{SecurityToken: token, Namespace: testNS, BaseSnapshotId: base, TargetSnapshotName: target, MaxResults: 4}))
}

func wantAllocated(t *testing.T, handle string, maxResults int32) []*api.GetMetadataAllocatedResponse {
	t.Helper()
	var out []*api.GetMetadataAllocatedResponse
	if err := (FakeBackend{}).Allocated(t.Context(), handle, 0, maxResults, func(r *api.GetMetadataAllocatedResponse) error {
		out = append(out, r)
		return nil
	}); err != nil || len(out) == 0 {
		t.Fatalf("FakeBackend.Allocated(%q) = %d responses, %v; want some", handle, len(out), err)
	}
	return out
}

func wantDelta(t *testing.T, base, target string, maxResults int32) []*api.GetMetadataDeltaResponse {
	t.Helper()
	var out []*api.GetMetadataDeltaResponse
	if err := (FakeBackend{}).Delta(t.Context(), base, target, 0, maxResults, func(r *api.GetMetadataDeltaResponse) error {
		out = append(out, r)
		return nil
	}); err != nil || len(out) < 2 {
		t.Fatalf("FakeBackend.Delta(%q, %q) = %d responses, %v; want several", base, target, len(out), err)
	}
	return out
}

// TestEndToEnd drives the sidecar with the upstream generated client: what
// is served, and every refusal, with its code and message.
func TestEndToEnd(t *testing.T) {
	sc := startSidecar(t)
	good := sc.api.MintToken(backupUser, []string{testAudience}, time.Now().Add(time.Hour))
	apiServerToken := sc.api.MintToken(backupUser, nil, time.Now().Add(time.Hour))
	ctx := t.Context()

	served := []struct {
		name string
		call func() (any, error)
		want any
	}{
		{name: "allocated", want: wantAllocated(t, handleOf(testNS, "snap-1"), 0),
			call: func() (any, error) { return sc.allocated(ctx, good, testNS, "snap-1") }},
		{name: "delta", want: wantDelta(t, handleOf(testNS, "snap-1"), handleOf(testNS, "snap-2"), 4),
			call: func() (any, error) { return sc.delta(ctx, good, handleOf(testNS, "snap-1"), "snap-2") }},
		// The documented pattern: the base VolumeSnapshot and its content
		// are gone, the backup application kept the handle. It is passed
		// to the driver, as upstream does.
		{name: "delta from a deleted base's handle", want: wantDelta(t, "handle-deleted", handleOf(testNS, "snap-2"), 4),
			call: func() (any, error) { return sc.delta(ctx, good, "handle-deleted", "snap-2") }},
		// The base VolumeSnapshot is gone, its content retained: the caller
		// must be allowed to get the VolumeSnapshot it was bound to.
		{name: "delta from a retained content's handle", want: wantDelta(t, handleOf(testNS, "retained"), handleOf(testNS, "snap-2"), 4),
			call: func() (any, error) { return sc.delta(ctx, good, handleOf(testNS, "retained"), "snap-2") }},
	}
	for _, s := range served {
		t.Run(s.name, func(t *testing.T) {
			got, err := s.call()
			if err != nil {
				t.Fatalf("call = %v; want a stream", err)
			}
			if !equalAny(got, s.want) {
				t.Errorf("call = %v; want the backend's %v", got, s.want)
			}
		})
	}

	failures := []struct {
		name     string
		call     func() error
		want     codes.Code
		wantMsgs []string
	}{
		{name: "no token", want: codes.Unauthenticated,
			call: func() error { _, err := sc.allocated(ctx, "", testNS, "snap-1"); return err }},
		{name: "API server audience", want: codes.Unauthenticated,
			call: func() error { _, err := sc.allocated(ctx, apiServerToken, testNS, "snap-1"); return err }},
		{name: "unknown token", want: codes.Unauthenticated,
			call: func() error { _, err := sc.allocated(ctx, "forged-token-0123456789", testNS, "snap-1"); return err }},
		{name: "snapshot not allowed", want: codes.PermissionDenied, wantMsgs: []string{`"snap-3"`, `namespace "apps"`, "the snapshot"},
			call: func() error { _, err := sc.allocated(ctx, good, testNS, "snap-3"); return err }},
		{name: "namespace not allowed", want: codes.PermissionDenied, wantMsgs: []string{`"snap-1"`, `namespace "other"`},
			call: func() error { _, err := sc.allocated(ctx, good, otherNS, "snap-1"); return err }},
		{name: "missing snapshot_name", want: codes.InvalidArgument,
			call: func() error { _, err := sc.allocated(ctx, good, testNS, ""); return err }},
		{name: "missing namespace", want: codes.InvalidArgument,
			call: func() error { _, err := sc.allocated(ctx, good, "", "snap-1"); return err }},
		{name: "negative offset", want: codes.InvalidArgument, call: func() error {
			_, err := recvAll(sc.client.GetMetadataAllocated(ctx, &api.GetMetadataAllocatedRequest{SecurityToken: good, Namespace: testNS, SnapshotName: "snap-1", StartingOffset: -1}))
			return err
		}},
		{name: "not ready", want: codes.Unavailable, wantMsgs: []string{"the VolumeSnapshot is not yet ready, name: not-ready"},
			call: func() error { _, err := sc.allocated(ctx, good, testNS, "not-ready"); return err }},
		{name: "missing", want: codes.Unavailable, wantMsgs: []string{"failed to get VolumeSnapshot 'apps/missing'", "not found"},
			call: func() error { _, err := sc.allocated(ctx, good, testNS, "missing"); return err }},
		{name: "another driver's", want: codes.InvalidArgument, wantMsgs: []string{"VolumeSnapshot 'other-driver' does not belong to the CSI driver 'fake.csi.example.com'"},
			call: func() error { _, err := sc.allocated(ctx, good, testNS, "other-driver"); return err }},
		{name: "bound to another namespace's content", want: codes.Unavailable, wantMsgs: []string{"is not bound to VolumeSnapshot 'apps/stolen'"},
			call: func() error { _, err := sc.allocated(ctx, good, testNS, "stolen"); return err }},
		{name: "delta target not allowed", want: codes.PermissionDenied, wantMsgs: []string{`"snap-3"`, "the target snapshot"},
			call: func() error { _, err := sc.delta(ctx, good, handleOf(testNS, "snap-1"), "snap-3"); return err }},
		{name: "delta target not ready", want: codes.Unavailable, wantMsgs: []string{"the VolumeSnapshot is not yet ready"},
			call: func() error { _, err := sc.delta(ctx, good, handleOf(testNS, "snap-1"), "not-ready"); return err }},
		{name: "delta target missing", want: codes.Unavailable, wantMsgs: []string{"failed to get VolumeSnapshot"},
			call: func() error { _, err := sc.delta(ctx, good, handleOf(testNS, "snap-1"), "missing"); return err }},
		{name: "delta base not allowed", want: codes.PermissionDenied,
			wantMsgs: []string{`"snap-3"`, "the base snapshot", fmt.Sprintf("base_snapshot_id %q", handleOf(testNS, "snap-3"))},
			call:     func() error { _, err := sc.delta(ctx, good, handleOf(testNS, "snap-3"), "snap-2"); return err }},
		{name: "delta base in another namespace", want: codes.PermissionDenied,
			wantMsgs: []string{fmt.Sprintf("base_snapshot_id %q", handleOf(otherNS, "snap-x")), `not a VolumeSnapshot in namespace "apps"`},
			call:     func() error { _, err := sc.delta(ctx, good, handleOf(otherNS, "snap-x"), "snap-2"); return err }},
		{name: "delta base missing", want: codes.InvalidArgument,
			call: func() error { _, err := sc.delta(ctx, good, "", "snap-2"); return err }},
	}
	for _, f := range failures {
		t.Run(f.name, func(t *testing.T) {
			err := f.call()
			if status.Code(err) != f.want {
				t.Fatalf("call = %v; want code %v", err, f.want)
			}
			for _, m := range f.wantMsgs {
				if !strings.Contains(status.Convert(err).Message(), m) {
					t.Errorf("call = %v; want a message containing %q", err, m)
				}
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
		for range 3 {
			if _, err := sc.allocated(ctx, good, testNS, "snap-1"); err != nil {
				t.Fatal(err)
			}
		}
		if n := sc.api.Count(authtest.TokenReviews) - before; n != 0 {
			t.Errorf("TokenReviews for 3 more calls with a known token = %d; want 0", n)
		}
	})
}

// TestRefusalsAreLogged: a PermissionDenied and an Unauthenticated call each
// leave one line at the default verbosity, saying who (when known), which
// namespace and snapshot, and why, and never the token.
func TestRefusalsAreLogged(t *testing.T) {
	sc := startSidecar(t)
	good := sc.api.MintToken(backupUser, []string{testAudience}, time.Now().Add(time.Hour))
	other := sc.api.MintToken(backupUser, []string{"other.example.com"}, time.Now().Add(time.Hour))
	ctx := t.Context()
	tests := []struct {
		name      string
		call      func() error
		wantLines []string
	}{
		{name: "denied target", call: func() error { _, err := sc.allocated(ctx, good, testNS, "snap-3"); return err },
			wantLines: []string{`"Refused a call: permission denied"`, `user="system:serviceaccount:apps:backup"`, `namespace="apps"`, `role="snapshot"`, `snapshot="snap-3"`}},
		{name: "denied base", call: func() error { _, err := sc.delta(ctx, good, handleOf(testNS, "snap-3"), "snap-2"); return err },
			wantLines: []string{`"Refused a call: permission denied"`, `role="base snapshot"`, `snapshot="snap-3 (base_snapshot_id handle-apps-snap-3)"`}},
		{name: "base in another namespace", call: func() error { _, err := sc.delta(ctx, good, handleOf(otherNS, "snap-x"), "snap-2"); return err },
			wantLines: []string{`"Refused a call: permission denied"`, `role="base snapshot"`, `snapshot="(base_snapshot_id handle-other-snap-x)"`}},
		{name: "unauthenticated", call: func() error { _, err := sc.delta(ctx, other, "handle-x", "snap-2"); return err },
			wantLines: []string{`"Refused a call: unauthenticated"`, `method="/snapshotmetadata.SnapshotMetadata/GetMetadataDelta"`, `namespace="apps"`, `target_snapshot_name="snap-2"`, `base_snapshot_id="handle-x"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(sc.logs.String())
			if err := tt.call(); err == nil {
				t.Fatal("call = nil; want a refusal")
			}
			logged := sc.logs.String()[before:]
			var line string
			for _, l := range strings.Split(logged, "\n") {
				if strings.Contains(l, "Refused a call") {
					line = l
				}
			}
			for _, w := range tt.wantLines {
				if !strings.Contains(line, w) {
					t.Errorf("refusal line = %q; want it to contain %s", line, w)
				}
			}
		})
	}
	for _, tok := range []string{good, other} {
		if strings.Contains(sc.logs.String(), tok) {
			t.Errorf("the sidecar's log contains a token:\n%s", sc.logs.String())
		}
	}
}

// TestSnapshotsCacheAndLive: a target the cache refuses is checked again
// live (the cache lags the API server), and one the cache accepts is served
// from it, also when the API server cannot be asked.
func TestSnapshotsCacheAndLive(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	tests := []struct {
		name       string
		cached     []runtime.Object // what the informers hold
		live       []runtime.Object // what the API server holds
		liveDown   bool
		wantHandle string
		wantCode   codes.Code
		wantGets   int
	}{
		{name: "ready in the cache", cached: snapshotObjects(testNS, "snap-1", snapOpts{}), liveDown: true, wantHandle: handleOf(testNS, "snap-1")},
		{name: "just created", live: snapshotObjects(testNS, "snap-1", snapOpts{}), wantHandle: handleOf(testNS, "snap-1"), wantGets: 2},
		{name: "just became ready", cached: snapshotObjects(testNS, "snap-1", snapOpts{notReady: true}),
			live: snapshotObjects(testNS, "snap-1", snapOpts{}), wantHandle: handleOf(testNS, "snap-1"), wantGets: 2},
		{name: "not ready either way", cached: snapshotObjects(testNS, "snap-1", snapOpts{notReady: true}),
			live: snapshotObjects(testNS, "snap-1", snapOpts{notReady: true}), wantCode: codes.Unavailable, wantGets: 1},
		{name: "missing, API server down", liveDown: true, wantCode: codes.Unavailable, wantGets: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			client := snapshotfake.NewSimpleClientset(tt.live...)
			gets := 0
			client.PrependReactor("get", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
				gets++
				if tt.liveDown {
					return true, nil, errors.New("dial tcp 10.0.0.1:443: connect: connection refused")
				}
				return false, nil, nil
			})
			s := snapshotsFrom(t, client, tt.cached...)
			handle, err := s.Target(ctx, testNS, "snap-1")
			if handle != tt.wantHandle || status.Code(err) != tt.wantCode {
				t.Errorf("Target() = %q, %v; want %q, code %v", handle, err, tt.wantHandle, tt.wantCode)
			}
			if gets != tt.wantGets {
				t.Errorf("live GETs = %d; want %d", gets, tt.wantGets)
			}
			if err != nil && strings.Contains(err.Error(), "10.0.0.1") {
				t.Errorf("Target() = %v; the message names the API server", err)
			}
		})
	}
}

// snapshotsFrom returns Snapshots that read cached from its caches and
// client live, without informers.
func snapshotsFrom(t *testing.T, client *snapshotfake.Clientset, cached ...runtime.Object) *Snapshots {
	t.Helper()
	vsIdx := cacheIndexer(t, cached, "VolumeSnapshot")
	vscIdx := cacheIndexer(t, cached, "VolumeSnapshotContent")
	return &Snapshots{driver: testDriver, client: client, vs: newVSLister(vsIdx), vsc: newVSCLister(vscIdx), byHandle: vscIdx}
}

// TestBase is the decision table of a delta's base_snapshot_id.
func TestBase(t *testing.T) {
	t.Parallel()
	objs := testSnapshots()
	// The same handle, bound in two namespaces (a snapshot imported into
	// another namespace with a pre-provisioned content).
	shared := snapshotObjects(otherNS, "shared", snapOpts{})
	shared[1].(*snapshotv1.VolumeSnapshotContent).Status.SnapshotHandle = new(handleOf(testNS, "snap-1"))
	objs = append(objs, shared...)
	s := snapshotsFrom(t, snapshotfake.NewSimpleClientset(), objs...)
	tests := []struct {
		handle    string
		wantNames []string
		wantErr   error
	}{
		{handle: handleOf(testNS, "snap-1"), wantNames: []string{"snap-1"}},
		{handle: handleOf(testNS, "retained"), wantNames: []string{"retained"}},
		{handle: "handle-deleted"},
		{handle: handleOf(otherNS, "snap-x"), wantErr: ErrBaseInAnotherNamespace},
		// Another driver's handle is not this driver's snapshot.
		{handle: handleOf(testNS, "other-driver")},
	}
	for _, tt := range tests {
		ref, err := s.Base(tt.handle, testNS)
		if !errors.Is(err, tt.wantErr) || !slicesEqual(ref.Names, tt.wantNames) {
			t.Errorf("Base(%q, %q) = %v, %v; want %v, %v", tt.handle, testNS, ref.Names, err, tt.wantNames, tt.wantErr)
		}
	}
}

func slicesEqual(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || strings.Join(a, "\x00") == strings.Join(b, "\x00"))
}

// TestAudience: the audience comes from the SnapshotMetadataService object;
// --audience is needed only without one, and must agree with it.
func TestAudience(t *testing.T) {
	t.Parallel()
	cr := func(aud string) runtime.Object {
		return &smsv1alpha1.SnapshotMetadataService{ObjectMeta: metav1.ObjectMeta{Name: testDriver}, Spec: smsv1alpha1.SnapshotMetadataServiceSpec{Audience: aud}}
	}
	forbidden := func(c *smsfake.Clientset) {
		c.PrependReactor("get", "snapshotmetadataservices", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "cbt.storage.k8s.io", Resource: "snapshotmetadataservices"}, testDriver, errors.New("no"))
		})
	}
	tests := []struct {
		name     string
		objs     []runtime.Object
		react    func(*smsfake.Clientset)
		explicit []string
		want     string
		wantErr  string
	}{
		{name: "from the object", objs: []runtime.Object{cr("a.example")}, want: "a.example"},
		{name: "flag agrees", objs: []runtime.Object{cr("a.example")}, explicit: []string{"a.example"}, want: "a.example"},
		{name: "flag disagrees", objs: []runtime.Object{cr("a.example")}, explicit: []string{"b.example"}, wantErr: `--audience "b.example" disagrees with spec.audience "a.example"`},
		{name: "one flag of two disagrees", objs: []runtime.Object{cr("a.example")}, explicit: []string{"a.example", "b.example"}, wantErr: "disagrees"},
		{name: "object without audience", objs: []runtime.Object{cr("")}, wantErr: "no spec.audience"},
		{name: "no object, flag", explicit: []string{"b.example"}, want: "b.example"},
		{name: "no object, no flag", wantErr: "--audience must name exactly one audience"},
		{name: "no object, two flags", explicit: []string{"a.example", "b.example"}, wantErr: "exactly one"},
		{name: "object unreadable", react: forbidden, explicit: []string{"a.example"}, wantErr: "forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := smsfake.NewSimpleClientset(tt.objs...)
			if tt.react != nil {
				tt.react(c)
			}
			got, err := resolveAudience(t.Context(), c, testDriver, tt.explicit)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("resolveAudience(%q) = %q, %v; want an error containing %q", tt.explicit, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("resolveAudience(%q) = %q, %v; want %q", tt.explicit, got, err, tt.want)
			}
		})
	}

	t.Run("run refuses to start", func(t *testing.T) {
		t.Parallel()
		err := run(t.Context(), []string{"--driver=" + testDriver, "--audience=b.example", "--kubeconfig=/nonexistent"},
			deps{backend: FakeBackend{}, snapshots: snapshotfake.NewSimpleClientset(), services: smsfake.NewSimpleClientset(cr("a.example"))}, nil)
		if err == nil || !strings.Contains(err.Error(), "disagrees") {
			t.Errorf("run(--audience=b.example) with spec.audience a.example = %v; want an error", err)
		}
	})
}

// TestRefusalLogLimit: the refusal log writes a burst of lines, then one
// per interval, and counts what it left out.
func TestRefusalLogLimit(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	clk := newFakeClock()
	l := newRefusalLog(textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(logs))), clk)
	lines := func() int { return strings.Count(logs.String(), "Refused a call") }
	for range refusalLogBurst + 3 {
		l.denied(backupUser, testNS, roleSnapshot, "snap-3", "")
	}
	if got := lines(); got != refusalLogBurst {
		t.Fatalf("lines after %d refusals at once = %d; want the burst, %d", refusalLogBurst+3, got, refusalLogBurst)
	}
	clk.Step(refusalLogInterval - time.Nanosecond)
	l.denied(backupUser, testNS, roleSnapshot, "snap-3", "")
	if got := lines(); got != refusalLogBurst {
		t.Fatalf("lines 1ns before the interval = %d; want %d\n%s", got, refusalLogBurst, logs.String())
	}
	clk.Step(time.Nanosecond)
	l.denied(backupUser, testNS, roleSnapshot, "snap-3", "")
	if got := lines(); got != refusalLogBurst+1 {
		t.Fatalf("lines at the interval = %d; want %d", got, refusalLogBurst+1)
	}
	if !strings.Contains(logs.String(), "suppressed=4") {
		t.Errorf("the line after a pause does not count the 4 left out:\n%s", logs.String())
	}
}

func poolOf(pemBytes []byte) *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(pemBytes)
	return p
}

func equalAny(got, want any) bool {
	switch w := want.(type) {
	case []*api.GetMetadataAllocatedResponse:
		return equalResponses(got.([]*api.GetMetadataAllocatedResponse), w)
	case []*api.GetMetadataDeltaResponse:
		return equalResponses(got.([]*api.GetMetadataDeltaResponse), w)
	}
	return false
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
		{name: "no driver", args: []string{"--audience=a"}, want: "--driver is required"},
		{name: "cert without key", args: []string{"--driver=d", "--tls-cert-file=c"}, want: "go together"},
		{name: "stray argument", args: []string{"--driver=d", "extra"}, want: "unexpected arguments"},
		{name: "unknown flag", args: []string{"--driver=d", "--nope"}, want: "unknown flag"},
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
	_ = b.Allocated(context.Background(), "handle-1", 0, 3, func(r *api.GetMetadataAllocatedResponse) error {
		var offs []string
		for _, m := range r.GetBlockMetadata() {
			offs = append(offs, fmt.Sprint(m.GetByteOffset()))
		}
		fmt.Println(r.GetBlockMetadataType(), r.GetVolumeCapacityBytes(), strings.Join(offs, ","))
		return nil
	})
	// Output:
	// FIXED_LENGTH 32768 4096,8192,12288
	// FIXED_LENGTH 32768 16384,20480,24576
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
// SnapshotMetadataService object, asks the TokenRequest API for a fresh
// token with the audience found there for every iteration, and streams the
// metadata over TLS with the CA found there. Each fresh token costs a
// TokenReview; the SubjectAccessReviews are one per snapshot.
func TestUpstreamIterator(t *testing.T) {
	sc := startSidecar(t)
	kube, err := kubernetes.NewForConfig(sc.api.Config())
	if err != nil {
		t.Fatal(err)
	}
	clients := iterator.Clients{KubeClient: kube, SnapshotClient: sc.snaps, SmsCRClient: smsclient.Interface(sc.services)}

	tests := []struct {
		name       string
		prevID     string
		prevName   string
		target     string
		wantBlocks func(t *testing.T) [][]*api.BlockMetadata
		wantErr    codes.Code
	}{
		{name: "allocated", target: "snap-1", wantBlocks: func(t *testing.T) [][]*api.BlockMetadata {
			var out [][]*api.BlockMetadata
			for _, r := range wantAllocated(t, handleOf(testNS, "snap-1"), 8) {
				out = append(out, r.GetBlockMetadata())
			}
			return out
		}},
		{name: "delta by handle", prevID: handleOf(testNS, "snap-1"), target: "snap-2", wantBlocks: deltaBlocks(testNS, "snap-1", "snap-2")},
		{name: "delta by name", prevName: "snap-1", target: "snap-2", wantBlocks: deltaBlocks(testNS, "snap-1", "snap-2")},
		{name: "not allowed", target: "snap-3", wantErr: codes.PermissionDenied},
		{name: "base not allowed", prevID: handleOf(testNS, "snap-3"), target: "snap-2", wantErr: codes.PermissionDenied},
		{name: "not ready", target: "not-ready", wantErr: codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &collector{}
			err := iterator.GetSnapshotMetadata(t.Context(), iterator.Args{
				Clients:          clients,
				Emitter:          c,
				Namespace:        testNS,
				SnapshotName:     tt.target,
				PrevSnapshotID:   tt.prevID,
				PrevSnapshotName: tt.prevName,
				MaxResults:       8,
				SANamespace:      testNS,
				SAName:           "backup",
			})
			if tt.wantErr != codes.OK {
				if status.Code(errors.Unwrap(err)) != tt.wantErr {
					t.Fatalf("GetSnapshotMetadata() = %v; want code %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("GetSnapshotMetadata() = %v", err)
			}
			want := tt.wantBlocks(t)
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
	if n := sc.api.Count(authtest.TokenReviews); n != len(tests) {
		t.Errorf("TokenReviews = %d; want %d, one per fresh token", n, len(tests))
	}
	// Distinct (user, snapshot) checks: snap-1, snap-2, snap-3, not-ready.
	if n := sc.api.Count(authtest.SubjectAccessReviews); n != 4 {
		t.Errorf("SubjectAccessReviews = %d; want 4, one per snapshot, whatever the token", n)
	}
}

func deltaBlocks(ns, base, target string) func(t *testing.T) [][]*api.BlockMetadata {
	return func(t *testing.T) [][]*api.BlockMetadata {
		var out [][]*api.BlockMetadata
		for _, r := range wantDelta(t, handleOf(ns, base), handleOf(ns, target), 8) {
			out = append(out, r.GetBlockMetadata())
		}
		return out
	}
}

// TestBinary builds the command and runs it as a subprocess against an API
// server that serves no snapshot API: it must refuse to start, saying what
// it could not read, rather than serve without its snapshot checks.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	s := authtest.Start(t)
	dir := t.TempDir()
	bin, kubeconfig := filepath.Join(dir, "snapshotmetadata"), filepath.Join(dir, "kubeconfig")
	// Static and -trimpath, as hack/image and the end-to-end suite build
	// it and hack/test.sh vets the module: one compile serves all four.
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build = %v\n%s", err, out)
	}
	if err := s.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--listen=127.0.0.1:0", "--kubeconfig="+kubeconfig, "--driver="+testDriver,
		"--audience="+testAudience, "--cache-sync-timeout=1s").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("snapshotmetadata without a snapshot API = %v; want exit status 1\n%s", err, out)
	}
	if !strings.Contains(string(out), "did not sync") || !strings.Contains(string(out), "volumesnapshots") {
		t.Errorf("snapshotmetadata without a snapshot API printed:\n%s\nwant the cache that did not sync and what it needs", out)
	}
	if strings.Contains(string(out), "listening on") {
		t.Errorf("snapshotmetadata without a snapshot API served:\n%s", out)
	}
}
