package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/local"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/examples/internal/clitest"
	"github.com/reviewauth/reviewauth/grpcauth"
)

func TestMain(m *testing.M) {
	clitest.MaybeRunMain(main)
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections to the fake API server close
		// asynchronously once it is gone.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

const testAudience = "draplugin.example.com"

// driverOn is the service account of a driver pod on node.
func driverOn(node string) *user.DefaultInfo {
	return &user.DefaultInfo{
		Name:   "system:serviceaccount:dra:driver",
		UID:    "6c9d0c3e-0000-4000-8000-000000000002",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:dra", "system:authenticated"},
		Extra: map[string][]string{
			"authentication.kubernetes.io/pod-name":  {"driver-" + node},
			"authentication.kubernetes.io/pod-uid":   {"pod-uid-" + node},
			"authentication.kubernetes.io/node-name": {node},
		},
	}
}

// startPlugin starts the fake API server and the plugin on listen, for
// node-a, and returns the API server and the plugin's address.
func startPlugin(t *testing.T, listen string, extra ...string) (*authtest.Server, net.Addr) {
	t.Helper()
	s := authtest.Start(t)
	// The driver may get ResourceClaims in namespace gpu-jobs only.
	s.SetPolicy(authtest.Rules(authtest.Rule{
		Users: []string{"system:serviceaccount:dra:driver"}, Verbs: []string{"get"},
		APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Namespaces: []string{"gpu-jobs"},
	}))
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := s.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"--listen=" + listen, "--kubeconfig=" + kubeconfig,
			"--audience=" + testAudience, "--node-name=node-a"}, extra...), func(a net.Addr) { ready <- a })
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
	return s, addr
}

// writeTokenFile writes token where a projected volume would put it.
func writeTokenFile(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "dra") // short: Unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "plugin.sock")
	s, _ := startPlugin(t, "unix://"+sock)
	exp := time.Now().Add(time.Hour)
	here := s.MintToken(driverOn("node-a"), []string{testAudience}, exp)
	there := s.MintToken(driverOn("node-b"), []string{testAudience}, exp)
	notBound := s.MintToken(&user.DefaultInfo{Name: "system:serviceaccount:dra:driver"}, []string{testAudience}, exp)
	apiAudience := s.MintToken(driverOn("node-a"), nil, exp)

	tests := []struct {
		name      string
		token     string
		namespace string
		claim     string
		want      codes.Code
	}{
		{name: "driver on this node", token: here, namespace: "gpu-jobs", claim: "claim-1", want: codes.OK},
		{name: "driver on another node", token: there, namespace: "gpu-jobs", claim: "claim-1", want: codes.PermissionDenied},
		{name: "token not bound to a node", token: notBound, namespace: "gpu-jobs", claim: "claim-1", want: codes.PermissionDenied},
		{name: "this node, SAR denies", token: here, namespace: "other", claim: "claim-1", want: codes.PermissionDenied},
		{name: "API server audience", token: apiAudience, namespace: "gpu-jobs", claim: "claim-1", want: codes.Unauthenticated},
		{name: "missing claim name", token: here, namespace: "gpu-jobs", want: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := grpcauth.NewFileTokenSource(writeTokenFile(t, tt.token), grpcauth.FileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(local.NewCredentials()),
				grpc.WithPerRPCCredentials(grpcauth.PerRPCCredentials(src)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			resp := NewPrepareResponse()
			err = conn.Invoke(t.Context(), methodPrepare, NewPrepareRequest(tt.namespace, tt.claim), resp)
			if status.Code(err) != tt.want {
				t.Fatalf("Prepare() = %v; want code %v", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), tt.token) {
				t.Errorf("Prepare() = %v; the message contains the token", err)
			}
			if tt.want == codes.OK {
				want := "node-a/gpu-0 for gpu-jobs/claim-1"
				if got := Devices(resp); len(got) != 1 || got[0] != want {
					t.Errorf("Prepare() devices = %q; want [%q]", got, want)
				}
			}
		})
	}
	if n := s.Count(authtest.SubjectAccessReviews); n != 2 {
		// Only "driver on this node" and "this node, SAR denies" get as far
		// as a SAR: node locality refuses the others first.
		t.Errorf("SubjectAccessReviews = %d; want 2", n)
	}

	t.Run("health needs no token", func(t *testing.T) {
		conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(local.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Health.Check() = %v, %v; want SERVING", resp, err)
		}
	})
}

func TestTCPWithTLS(t *testing.T) {
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	s, addr := startPlugin(t, "127.0.0.1:0", "--self-signed-ca-file="+caFile)
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tok := s.MintToken(driverOn("node-a"), []string{testAudience}, time.Now().Add(time.Hour))
	src := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: tok})
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})),
		grpc.WithPerRPCCredentials(grpcauth.PerRPCCredentials(src)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Invoke(t.Context(), methodPrepare, NewPrepareRequest("gpu-jobs", "claim-1"), NewPrepareResponse()); err != nil {
		t.Errorf("Prepare() over TLS = %v; want nil", err)
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{args: []string{"--audience=a"}, want: "--node-name is required"},
		{args: []string{"--node-name=n"}, want: "--audience is required"},
		{args: []string{"--node-name=n", "--audience=a", "--tls-private-key-file=k"}, want: "go together"},
	} {
		if _, err := parseFlags(tt.args, io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseFlags(%q) = %v; want an error containing %q", tt.args, err, tt.want)
		}
	}
	// The revoker watches the RBAC a claim's get rests on (ClusterRoles,
	// Roles: claims are namespaced), beside this node's pods and Node.
	c, err := parseFlags([]string{"--node-name=n", "--audience=a"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.review.Revocation; !slices.Equal(r.Watch, []string{"pods", "node", "clusterroles", "roles"}) || !r.AsNode || len(r.Namespaces) > 0 {
		t.Errorf("revocation defaults = %+v; want pods, node, clusterroles, roles, as the node, every namespace", r)
	}
}
