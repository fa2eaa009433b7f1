package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/grpcauth"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections to the fake API server close
		// asynchronously once it is gone.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

const testAudience = "snapshotmetadata.example.com"

// fakeSidecar serves two pages of blocks to whoever the interceptors let
// through, and records who that was.
type fakeSidecar struct {
	api.UnimplementedSnapshotMetadataServer
	mu    sync.Mutex
	users []string
}

func (f *fakeSidecar) record(ctx context.Context) {
	u, _ := request.UserFrom(ctx)
	f.mu.Lock()
	f.users = append(f.users, u.GetName())
	f.mu.Unlock()
}

func (f *fakeSidecar) GetMetadataAllocated(_ *api.GetMetadataAllocatedRequest, s grpc.ServerStreamingServer[api.GetMetadataAllocatedResponse]) error {
	f.record(s.Context())
	for _, off := range []int64{0, 8192} {
		if err := s.Send(&api.GetMetadataAllocatedResponse{BlockMetadata: []*api.BlockMetadata{{ByteOffset: off, SizeBytes: 4096}}}); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeSidecar) GetMetadataDelta(_ *api.GetMetadataDeltaRequest, s grpc.ServerStreamingServer[api.GetMetadataDeltaResponse]) error {
	f.record(s.Context())
	return s.Send(&api.GetMetadataDeltaResponse{BlockMetadata: []*api.BlockMetadata{{ByteOffset: 4096, SizeBytes: 4096}}})
}

// selfSigned returns a TLS certificate for 127.0.0.1 and its PEM.
func selfSigned(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// setup starts the fake API server and a SnapshotMetadata server that
// authenticates security_token with testAudience and lets the apps/backup
// service account get any volumesnapshot in apps. It returns the common
// flags for run.
func setup(t *testing.T) (*authtest.Server, *fakeSidecar, []string) {
	t.Helper()
	s := authtest.Start(t)
	s.AddServiceAccount("apps", "backup")
	s.SetPolicy(authtest.Rules(authtest.Rule{
		Users: []string{"system:serviceaccount:apps:backup"}, Verbs: []string{"get"},
		APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots"}, Namespaces: []string{"apps"},
	}))
	an, err := authn.NewForConfig(s.Config(), authn.Options{Audiences: []string{testAudience}})
	if err != nil {
		t.Fatal(err)
	}
	az, err := authz.NewForConfig(s.Config(), authz.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snap := func(field string) grpcauth.Rule {
		return grpcauth.Rule{Token: grpcauth.FromField("security_token"), Attributes: grpcauth.Resource{
			Verb: "get", APIGroup: "snapshot.storage.k8s.io", Resource: "volumesnapshots", NamespaceField: "namespace", NameField: field,
		}.Attributes}
	}
	opts := grpcauth.Options{Authenticator: an, Authorizer: az, Rules: map[string]grpcauth.Rule{
		api.SnapshotMetadata_GetMetadataAllocated_FullMethodName: snap("snapshot_name"),
		api.SnapshotMetadata_GetMetadataDelta_FullMethodName:     snap("target_snapshot_name"),
	}}
	cert, caPEM := selfSigned(t)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})),
		grpc.StreamInterceptor(mustInterceptor(t, opts).StreamServerInterceptor()))
	fake := &fakeSidecar{}
	api.RegisterSnapshotMetadataServer(srv, fake)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	dir := t.TempDir()
	kubeconfig, caFile := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "ca.pem")
	if err := s.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return s, fake, []string{
		"--kubeconfig=" + kubeconfig, "--address=" + lis.Addr().String(), "--ca-file=" + caFile,
		"--service-account-namespace=apps", "--service-account=backup", "--namespace=apps", "--snapshot=snap-1",
	}
}

func TestRun(t *testing.T) {
	s, fake, common := setup(t)
	tests := []struct {
		name     string
		args     []string
		fault    bool
		want     string
		wantCode codes.Code
		wantErr  string
	}{
		{name: "allocated", args: []string{"--audience=" + testAudience}, want: "0 4096\n8192 4096\n"},
		{name: "delta", args: []string{"--audience=" + testAudience, "--base-snapshot-id=snap-id-0"}, want: "4096 4096\n"},
		{name: "wrong audience", args: []string{"--audience=someone-else"}, wantCode: codes.Unauthenticated},
		{name: "TokenRequest fails", args: []string{"--audience=" + testAudience}, fault: true, wantErr: "getting a token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.fault {
				s.InjectFault(authtest.TokenRequests, authtest.Fault{Status: 403})
				defer s.ClearFaults()
			}
			fake.mu.Lock()
			fake.users = nil
			fake.mu.Unlock()
			var out strings.Builder
			err := run(t.Context(), append(tt.args, common...), &out)
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("run() = %v; want an error containing %q", err, tt.wantErr)
				}
				if len(fake.users) != 0 {
					t.Errorf("the service got %d calls; want none without a token", len(fake.users))
				}
			case tt.wantCode != codes.OK:
				if status.Code(err) != tt.wantCode {
					t.Fatalf("run() = %v; want code %v", err, tt.wantCode)
				}
			default:
				if err != nil {
					t.Fatalf("run() = %v", err)
				}
				if out.String() != tt.want {
					t.Errorf("run() printed %q; want %q", out.String(), tt.want)
				}
				if len(fake.users) != 1 || fake.users[0] != "system:serviceaccount:apps:backup" {
					t.Errorf("the service saw users %q; want the backup service account once", fake.users)
				}
			}
		})
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{args: nil, want: "--address is required"},
		{args: []string{"--address=a", "--audience=b", "--service-account=c", "--namespace=d"}, want: "--snapshot is required"},
		{args: []string{"--address=a", "--audience=b", "--service-account=c", "--namespace=d", "--snapshot=e", "x"}, want: "unexpected arguments"},
	} {
		if _, err := parseFlags(tt.args, io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseFlags(%q) = %v; want an error containing %q", tt.args, err, tt.want)
		}
	}
}

// mustInterceptor is grpcauth.New, failing t on an error.
func mustInterceptor(t *testing.T, opts grpcauth.Options) *grpcauth.Interceptor {
	t.Helper()
	ic, err := grpcauth.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return ic
}
