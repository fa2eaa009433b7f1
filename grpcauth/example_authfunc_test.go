package grpcauth_test

import (
	"context"
	"fmt"
	"net"

	mw "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/grpcauth"
)

// A server that already chains go-grpc-middleware's interceptors takes
// the check as an auth.AuthFunc, and keeps its skip list in a selector:
// health checks bypass the auth interceptor, every other method goes
// through it. The rule reads nothing from the request message (token in
// the metadata, AttributesIgnoreMessage), which is all an AuthFunc can
// check. In a real program the authenticator is an *authn.Authenticator
// and the authorizer an *authz.Authorizer.
func ExampleInterceptor_AuthFunc() {
	tokens := authenticator.TokenFunc(func(_ context.Context, token string) (*authenticator.Response, bool, error) {
		if token == "operator-token" {
			return &authenticator.Response{User: &user.DefaultInfo{Name: "system:serviceaccount:ops:operator"}}, true, nil
		}
		return nil, false, &reviewauth.RejectedError{Reason: "invalid bearer token"}
	})
	rbac := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetUser().GetName() == "system:serviceaccount:ops:operator" && a.GetResource() == "healthchecks" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	ic, err := grpcauth.New(grpcauth.Options{Authenticator: tokens, Authorizer: rbac, Rules: map[string]grpcauth.Rule{
		"/grpc.health.v1.Health/List": {
			Attributes:              grpcauth.Resource{Verb: "list", APIGroup: "example.com", Resource: "healthchecks"}.Attributes,
			AttributesIgnoreMessage: true,
		},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Check is for probes: the selector skips it. List is protected.
	needsAuth := selector.MatchFunc(func(_ context.Context, c mw.CallMeta) bool {
		return c.FullMethod() != "/grpc.health.v1.Health/Check"
	})
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(selector.UnaryServerInterceptor(auth.UnaryServerInterceptor(ic.AuthFunc()), needsAuth)),
		grpc.ChainStreamInterceptor(selector.StreamServerInterceptor(auth.StreamServerInterceptor(ic.AuthFunc()), needsAuth)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		// Over TLS, send the token with grpcauth.PerRPCCredentials; a test
		// over bufconn can use authtest.TransportCredentials.
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	for _, token := range []string{"", "operator-token", "stolen-token"} {
		ctx := context.Background()
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		}
		_, checkErr := client.Check(ctx, &healthpb.HealthCheckRequest{})
		_, listErr := client.List(ctx, &healthpb.HealthListRequest{})
		fmt.Printf("token %-16q Check: %v, List: %v\n", token, status.Code(checkErr), status.Code(listErr))
	}
	// Output:
	// token ""               Check: OK, List: Unauthenticated
	// token "operator-token" Check: OK, List: OK
	// token "stolen-token"   Check: OK, List: Unauthenticated
}
