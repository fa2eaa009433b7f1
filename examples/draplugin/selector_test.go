package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/grpcauth"
)

// TestSelectorComposition puts the grpcauth interceptors behind
// go-grpc-middleware's selector, which keeps the skip list out of the auth
// interceptor: the selector bypasses health, and grpcauth (with no Skip of
// its own) guards everything else, inside a grpc.ChainUnaryInterceptor.
func TestSelectorComposition(t *testing.T) {
	s := authtest.Start(t)
	s.SetPolicy(authtest.Rules(authtest.Rule{
		Users: []string{"system:serviceaccount:dra:driver"}, Verbs: []string{"get"},
		APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Namespaces: []string{"gpu-jobs"},
	}))
	an, err := authn.NewForConfig(s.Config(), authn.Options{Audiences: []string{testAudience}})
	if err != nil {
		t.Fatal(err)
	}
	sar, err := authz.NewForConfig(s.Config(), authz.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := grpcauth.Options{
		Authenticator: an,
		Authorizer:    authz.All(authz.NodeLocal(authz.NodeLocalOptions{NodeName: "node-a"}), sar),
		Rules:         rules(),
	}
	needsAuth := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
		return !strings.HasPrefix(c.FullMethod(), "/grpc.health.v1.Health/")
	})
	var order []string
	trace := func(name string) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			_, authed := request.UserFrom(ctx)
			order = append(order, name+map[bool]string{true: "(user)", false: "(no user)"}[authed])
			return h(ctx, req)
		}
	}
	ic, err := grpcauth.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(
			trace("before"),
			selector.UnaryServerInterceptor(ic.UnaryServerInterceptor(), needsAuth),
			trace("after"),
		),
		grpc.ChainStreamInterceptor(selector.StreamServerInterceptor(ic.StreamServerInterceptor(), needsAuth)),
	)
	srv.RegisterService(serviceDesc(prepareOn("node-a")), nil)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("Health.Check() without a token = %v; want nil (the selector skips it)", err)
	}
	if err := conn.Invoke(t.Context(), methodPrepare, NewPrepareRequest("gpu-jobs", "c"), NewPrepareResponse()); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Prepare() without a token = %v; want code Unauthenticated", err)
	}
	tok := s.MintToken(driverOn("node-a"), []string{testAudience}, time.Now().Add(time.Hour))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)
	order = nil
	if err := conn.Invoke(ctx, methodPrepare, NewPrepareRequest("gpu-jobs", "c"), NewPrepareResponse()); err != nil {
		t.Errorf("Prepare() with a token = %v; want nil", err)
	}
	if got := strings.Join(order, ","); got != "before(no user),after(user)" {
		t.Errorf("interceptor chain saw %q; want the identity only after grpcauth", got)
	}
}
