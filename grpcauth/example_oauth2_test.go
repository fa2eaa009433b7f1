package grpcauth_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/oauth"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/test/bufconn"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/grpcauth"
)

// A FileTokenSource is an oauth2.TokenSource: client-go takes it through
// rest.Config.WrapTransport with its own transport.TokenSourceWrapTransport.
// (grpcauth.RoundTripper is the alternative that keeps the token to the
// API server's host and passes each request's context.)
func ExampleFileTokenSource_clientGo() {
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"gitVersion":"v1.37.2 (asked with %s)"}`, r.Header.Get("Authorization"))
	}))
	defer api.Close()
	dir, _ := os.MkdirTemp("", "token")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "token")
	_ = os.WriteFile(path, []byte("projected-token\n"), 0o600)

	src, err := grpcauth.NewFileTokenSource(path, grpcauth.FileOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg := &rest.Config{
		Host:            api.URL,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, // the test server's certificate
		WrapTransport:   transport.TokenSourceWrapTransport(src),
		// or: func(rt http.RoundTripper) http.RoundTripper { return grpcauth.RoundTripper(src, rt) },
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(v.GitVersion)
	// Output:
	// v1.37.2 (asked with Bearer projected-token)
}

// A TokenRequestSource is an oauth2.TokenSource: grpc's own
// credentials/oauth.TokenSource takes it as it is. Like
// grpcauth.PerRPCCredentials, it requires transport security, which
// authtest.TransportCredentials gives a test over bufconn.
// grpcauth.PerRPCCredentials adds the binding to one server and the
// call's context.
func ExampleTokenRequestSource_grpcOAuth() {
	api := authtest.NewServer() // the API server: TokenRequest, TokenReview, SubjectAccessReview
	defer api.Close()
	api.AddServiceAccount("default", "backup")
	api.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{"system:serviceaccount:default:backup"},
		Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"services"}}))

	// The server: health checks need a token for its audience.
	an, _ := authn.NewForConfig(api.Config(), authn.Options{Audiences: []string{"health.example"}})
	az, _ := authz.NewForConfig(api.Config(), authz.Options{})
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
	healthpb.RegisterHealthServer(srv, &whoHealth{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	// The client: tokens for the server's audience from the TokenRequest API.
	src, err := grpcauth.NewTokenRequestSourceForConfig(api.Config(), grpcauth.TokenRequestOptions{
		Namespace: "default", ServiceAccount: "backup", Audiences: []string{"health.example"}, Lifetime: time.Hour,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(clientCreds),
		grpc.WithPerRPCCredentials(oauth.TokenSource{TokenSource: src}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	for range 3 {
		resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "whoami"})
		fmt.Println(resp.GetStatus(), err)
	}
	fmt.Println("TokenRequests:", api.Count(authtest.TokenRequests), "TokenReviews:", api.Count(authtest.TokenReviews))
	// Output:
	// SERVING <nil>
	// SERVING <nil>
	// SERVING <nil>
	// TokenRequests: 1 TokenReviews: 1
}

// whoHealth is a health server that answers SERVING to the backup service
// account only.
type whoHealth struct {
	healthpb.UnimplementedHealthServer
}

func (*whoHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if u, ok := request.UserFrom(ctx); ok && u.GetName() == "system:serviceaccount:default:backup" {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
}
