package authtest_test

import (
	"context"
	"net"
	"testing"

	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/grpcauth"
)

// recordingHealth is a health server that records the authorization
// metadata and the security level of each call.
type recordingHealth struct {
	healthpb.UnimplementedHealthServer
	calls chan [2]string
}

func (h *recordingHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	level := "none"
	if p, ok := peer.FromContext(ctx); ok {
		if ai, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			level = ai.SecurityLevel.String()
		}
	}
	auth := ""
	if v := md.Get("authorization"); len(v) == 1 {
		auth = v[0]
	}
	h.calls <- [2]string{auth, level}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// TestTransportCredentials: the pair carries grpcauth.PerRPCCredentials
// over bufconn with TLS (privacy and integrity); a client trusts only its
// own pair's server, and only under the names the certificate holds.
func TestTransportCredentials(t *testing.T) {
	t.Parallel()
	serverCreds, clientCreds, err := authtest.TransportCredentials()
	if err != nil {
		t.Fatal(err)
	}
	_, otherClient, err := authtest.TransportCredentials()
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	h := &recordingHealth{calls: make(chan [2]string, 1)}
	srv := grpc.NewServer(grpc.Creds(serverCreds))
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	const token = "a-test-token"
	tests := []struct {
		name, target string
		creds        credentials.TransportCredentials
		want         codes.Code
	}{
		{"bufnet", "passthrough:///bufnet", clientCreds, codes.OK},
		{"localhost", "passthrough:///localhost", clientCreds, codes.OK},
		{"127.0.0.1", "passthrough:///127.0.0.1", clientCreds, codes.OK},
		{"a name the certificate does not hold", "passthrough:///other.example", clientCreds, codes.Unavailable},
		{"another pair's client", "passthrough:///bufnet", otherClient, codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token})
			conn, err := grpc.NewClient(tt.target, grpc.WithTransportCredentials(tt.creds),
				grpc.WithPerRPCCredentials(grpcauth.PerRPCCredentials(src)),
				grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, err = healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
			if status.Code(err) != tt.want {
				t.Fatalf("Check() = %v; want code %v", err, tt.want)
			}
			if tt.want != codes.OK {
				return
			}
			got := <-h.calls
			if got[0] != "Bearer "+token || got[1] != credentials.PrivacyAndIntegrity.String() {
				t.Errorf("server saw authorization %q at security level %s; want %q at %s",
					got[0], got[1], "Bearer "+token, credentials.PrivacyAndIntegrity)
			}
		})
	}
	select {
	case c := <-h.calls:
		t.Errorf("a refused handshake reached the handler: %q", c)
	default:
	}
}

// TestTransportCredentialsServeHealth is the smallest use: a standard
// health server over the pair, no call credentials.
func TestTransportCredentialsServeHealth(t *testing.T) {
	t.Parallel()
	serverCreds, clientCreds, err := authtest.TransportCredentials()
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer(grpc.Creds(serverCreds))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(clientCreds),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check() = %v, %v; want SERVING", resp, err)
	}
}
