package authtest_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/grpcauth"
)

// ExampleTransportCredentials tests a gRPC service as it runs in
// production, in memory: grpcauth's interceptors backed by the fake API
// server, and clients that send their tokens with
// grpcauth.PerRPCCredentials (which refuses insecure transports) over a
// bufconn listener with TLS.
func ExampleTransportCredentials() {
	api := authtest.NewServer()
	defer api.Close()
	backup := &user.DefaultInfo{Name: "system:serviceaccount:default:backup"}
	stranger := &user.DefaultInfo{Name: "system:serviceaccount:default:stranger"}
	api.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{backup.Name},
		Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"services"}, Names: []string{"health"}}))

	an, err := authn.NewForConfig(api.Config(), authn.Options{Audiences: []string{"snap.example"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	az, err := authz.NewForConfig(api.Config(), authz.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	ic, err := grpcauth.New(grpcauth.Options{Authenticator: an, Authorizer: az, Rules: map[string]grpcauth.Rule{
		"/grpc.health.v1.Health/Check": {
			Attributes:              grpcauth.Resource{Verb: "get", Resource: "services", Namespace: "default", Name: "health"}.Attributes,
			AttributesIgnoreMessage: true,
		},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}

	serverCreds, clientCreds, err := authtest.TransportCredentials()
	if err != nil {
		fmt.Println(err)
		return
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.Creds(serverCreds), grpc.UnaryInterceptor(ic.UnaryServerInterceptor()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	check := func(name string, opts ...grpc.DialOption) {
		opts = append(opts, grpc.WithTransportCredentials(clientCreds),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
		conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer conn.Close()
		resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			fmt.Printf("%s: %v\n", name, status.Code(err))
			return
		}
		fmt.Printf("%s: %v\n", name, resp.GetStatus())
	}
	token := func(u user.Info) grpc.DialOption {
		tok := api.MintToken(u, []string{"snap.example"}, time.Now().Add(time.Hour))
		return grpc.WithPerRPCCredentials(grpcauth.PerRPCCredentials(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: tok})))
	}
	check("backup", token(backup))
	check("stranger", token(stranger))
	check("no token")
	fmt.Println("TokenReviews:", api.Count(authtest.TokenReviews), "SubjectAccessReviews:", api.Count(authtest.SubjectAccessReviews))
	// Output:
	// backup: SERVING
	// stranger: PermissionDenied
	// no token: Unauthenticated
	// TokenReviews: 2 SubjectAccessReviews: 2
}
