package grpcauth_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/grpcauth"
)

// A server whose Get method needs "get things/<name>" in the request's
// namespace. In production the authenticator is an *authn.Authenticator
// with the server's audience and the authorizer an *authz.Authorizer; here
// they are small functions.
func ExampleNew() {
	opts := grpcauth.Options{
		Authenticator: authenticator.TokenFunc(func(_ context.Context, token string) (*authenticator.Response, bool, error) {
			if token != "alice-token" {
				return nil, false, &reviewauth.RejectedError{Reason: "invalid bearer token"}
			}
			return &authenticator.Response{User: &user.DefaultInfo{Name: "alice"}}, true, nil
		}),
		Authorizer: authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			if a.GetUser().GetName() == "alice" && a.GetNamespace() == "team-a" {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionDeny, "alice may only read team-a", nil
		}),
		Rules: map[string]grpcauth.Rule{
			methodGet: {
				Token: grpcauth.FromMetadata(),
				Attributes: grpcauth.Resource{
					Verb: "get", APIGroup: "example.com", Resource: "things",
					NamespaceField: "namespace", NameField: "name",
				}.Attributes,
			},
		},
		Skip: grpcauth.HealthAndReflection,
	}

	ic, err := grpcauth.New(opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(ic.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(ic.StreamServerInterceptor()),
	)
	srv.RegisterService(&svcDesc, nil) // Get answers with the caller's name
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, _ := grpc.NewClient("passthrough:///example",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()

	call := func(token, namespace string) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
		resp := new(wrapperspb.StringValue)
		err := conn.Invoke(ctx, methodGet, newRequest("", namespace, "thing-1"), resp)
		fmt.Printf("%s in %s: %v %q\n", token, namespace, status.Code(err), resp.GetValue())
	}
	call("alice-token", "team-a")
	call("alice-token", "team-b")
	call("mallory-token", "team-a")
	// Output:
	// alice-token in team-a: OK "alice md="
	// alice-token in team-b: PermissionDenied ""
	// mallory-token in team-a: Unauthenticated ""
}

// FromField reads the token from a string field of the request message,
// as the Kubernetes SnapshotMetadata API's security_token.
func ExampleFromField() {
	extract := grpcauth.FromField("value")
	tok, ok := extract.Token(context.Background(), wrapperspb.String("a-token"))
	fmt.Println(tok, ok)
	_, ok = extract.Token(context.Background(), wrapperspb.Int64(7)) // not a string field
	fmt.Println(ok)
	// Output:
	// a-token true
	// false
}

// A client reading the projected token the kubelet mounts into its pod.
// The file is read once and then only checked for rotation now and then.
func ExampleNewFileTokenSource() {
	dir, _ := os.MkdirTemp("", "token")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "token")
	_ = os.WriteFile(path, []byte("projected-token\n"), 0o600)

	// For gRPC: grpc.WithPerRPCCredentials(grpcauth.PerRPCCredentials(src)).
	src, err := grpcauth.NewFileTokenSource(path, grpcauth.FileOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	tok, err := src.Token()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(tok.AccessToken, tok.Type(), tok.Expiry.IsZero())
	// Output:
	// projected-token Bearer true
}

// RoundTripper puts the token on HTTP requests.
func ExampleRoundTripper() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "got "+r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	src := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "t0k3n"})
	client := &http.Client{Transport: grpcauth.RoundTripper(src, nil)}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(string(b))
	// Output:
	// got Bearer t0k3n
}

// OnlyTo binds credentials to the servers they are meant for. Here the API
// redirects elsewhere: the redirected request goes out without the token.
// For gRPC: grpcauth.PerRPCCredentials(src, grpcauth.OnlyTo("snap.example:443")).
func ExampleOnlyTo() {
	src := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "t0k3n"})
	base := &hostsTransport{} // answers in memory, redirecting to ?next=
	client := &http.Client{Transport: grpcauth.RoundTripper(src, base, grpcauth.OnlyTo("api.example"))}
	resp, err := client.Get("https://api.example/start?next=https://elsewhere.example/")
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = resp.Body.Close()
	for _, s := range base.seen {
		host, auth, _ := strings.Cut(s, " ")
		fmt.Printf("%s Authorization=%q\n", host, auth)
	}
	// Output:
	// https://api.example Authorization="Bearer t0k3n"
	// https://elsewhere.example Authorization=""
}

// A server-streaming method whose token travels in the request, as in the
// SnapshotMetadata API. The method's request type is in the protobuf
// registry, so the interceptor receives the request itself and starts the
// handler only for a caller it allows: a refused caller gets the status and
// nothing else, not even the header the handler would have set.
func ExampleInterceptor_StreamServerInterceptor() {
	opts := grpcauth.Options{
		Authenticator: authenticator.TokenFunc(func(_ context.Context, token string) (*authenticator.Response, bool, error) {
			if token != "alice-token" {
				return nil, false, &reviewauth.RejectedError{Reason: "invalid bearer token"}
			}
			return &authenticator.Response{User: &user.DefaultInfo{Name: "alice"}}, true, nil
		}),
		Authorizer: authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
			return authorizer.DecisionAllow, "", nil
		}),
		Rules: map[string]grpcauth.Rule{
			methodList: {
				Token: grpcauth.FromField("security_token"),
				Attributes: grpcauth.Resource{
					Verb: "list", APIGroup: "example.com", Resource: "things", NamespaceField: "namespace",
				}.Attributes,
			},
		},
	}
	ic, err := grpcauth.New(opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(ic.StreamServerInterceptor()))
	var started atomic.Int32
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "grpcauth.test.Svc",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "List", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			started.Add(1)
			_ = ss.SetHeader(metadata.Pairs("x-items", "2"))
			if err := ss.RecvMsg(newRequest("", "", "")); err != nil {
				return err
			}
			u, _ := request.UserFrom(ss.Context())
			_ = ss.SendMsg(wrapperspb.String("thing-1 for " + u.GetName()))
			return ss.SendMsg(wrapperspb.String("thing-2 for " + u.GetName()))
		}}},
	}, nil)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, _ := grpc.NewClient("passthrough:///example",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()

	list := func(token string) {
		cs, _ := conn.NewStream(context.Background(), &grpc.StreamDesc{ServerStreams: true}, methodList)
		_ = cs.SendMsg(newRequest(token, "team-a", ""))
		_ = cs.CloseSend()
		var got []string
		var err error
		for {
			m := new(wrapperspb.StringValue)
			if err = cs.RecvMsg(m); err != nil {
				break
			}
			got = append(got, m.GetValue())
		}
		if errors.Is(err, io.EOF) {
			err = nil
		}
		header, _ := cs.Header()
		fmt.Printf("%s: %v %q x-items=%q\n", token, status.Code(err), got, header.Get("x-items"))
	}
	list("alice-token")
	list("mallory-token")
	fmt.Println("handler started", started.Load(), "time(s)")
	// Output:
	// alice-token: OK ["thing-1 for alice" "thing-2 for alice"] x-items=["2"]
	// mallory-token: Unauthenticated [] x-items=[]
	// handler started 1 time(s)
}
