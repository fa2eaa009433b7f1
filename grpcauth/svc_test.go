package grpcauth_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/grpcauth"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The test services are described at run time, so that the tests need no
// generated code:
//
//	message Request { string security_token = 1; string namespace = 2; string name = 3; }
//	service Svc {
//	  rpc Nop(Request) returns (google.protobuf.StringValue);
//	  rpc Get(Request) returns (google.protobuf.StringValue);
//	  rpc List(Request) returns (stream google.protobuf.StringValue);
//	  rpc Chat(stream Request) returns (stream google.protobuf.StringValue);
//	  rpc Upload(stream Request) returns (google.protobuf.StringValue);
//	}
//	service Probe { // handlers that act before their first RecvMsg
//	  rpc LeakServer(Request) returns (stream google.protobuf.StringValue);
//	  rpc LeakClient(stream Request) returns (google.protobuf.StringValue);
//	  rpc LeakBidi(stream Request) returns (stream google.protobuf.StringValue);
//	}
//
// The file is registered in protoregistry.GlobalFiles and its Request in
// GlobalTypes, as generated code registers itself, so that the stream
// interceptor can find the methods' input type. The same services are
// also served under the package grpcauth.unregistered, which the registry
// does not know: there the interceptor must hold what the handler sends.
const (
	methodGet    = "/grpcauth.test.Svc/Get"
	methodList   = "/grpcauth.test.Svc/List"
	methodChat   = "/grpcauth.test.Svc/Chat"
	methodUpload = "/grpcauth.test.Svc/Upload"
	methodNop    = "/grpcauth.test.Svc/Nop"

	registeredPkg   = "grpcauth.test"
	unregisteredPkg = "grpcauth.unregistered"
)

var testFile = func() protoreflect.FileDescriptor {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	method := func(name string, clientStreams, serverStreams bool) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{
			Name: proto.String(name), InputType: proto.String(".grpcauth.test.Request"),
			OutputType:      proto.String(".google.protobuf.StringValue"),
			ClientStreaming: proto.Bool(clientStreams), ServerStreaming: proto.Bool(serverStreams),
		}
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("grpcauth_test.proto"),
		Package:    proto.String(registeredPkg),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"google/protobuf/wrappers.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Request"),
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("security_token"), Number: proto.Int32(1), Type: str, Label: opt, JsonName: proto.String("securityToken")},
				{Name: proto.String("namespace"), Number: proto.Int32(2), Type: str, Label: opt, JsonName: proto.String("namespace")},
				{Name: proto.String("name"), Number: proto.Int32(3), Type: str, Label: opt, JsonName: proto.String("name")},
			},
		}},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Svc"),
			Method: []*descriptorpb.MethodDescriptorProto{
				method("Nop", false, false), method("Get", false, false), method("List", false, true),
				method("Chat", true, true), method("Upload", true, false),
			},
		}, {
			Name: proto.String("Probe"),
			Method: []*descriptorpb.MethodDescriptorProto{
				method("LeakServer", false, true), method("LeakClient", true, false), method("LeakBidi", true, true),
			},
		}},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	if err := protoregistry.GlobalFiles.RegisterFile(fd); err != nil {
		panic(err)
	}
	if err := protoregistry.GlobalTypes.RegisterMessage(dynamicpb.NewMessageType(fd.Messages().ByName("Request"))); err != nil {
		panic(err)
	}
	return fd
}()

var requestDesc = testFile.Messages().ByName("Request")

// newRequest returns a Request message with the given fields.
func newRequest(token, namespace, name string) *dynamicpb.Message {
	m := dynamicpb.NewMessage(requestDesc)
	set := func(field, v string) {
		if v != "" {
			m.Set(requestDesc.Fields().ByName(protoreflect.Name(field)), protoreflect.ValueOfString(v))
		}
	}
	set("security_token", token)
	set("namespace", namespace)
	set("name", name)
	return m
}

// whoami answers with the name of the authenticated user, or "<none>".
func whoami(ctx context.Context) string {
	u, ok := request.UserFrom(ctx)
	if !ok {
		return "<none>"
	}
	return u.GetName()
}

// svcDesc is the Svc service, registered in the protobuf registry.
var svcDesc = newSvcDesc(registeredPkg)

// newSvcDesc returns the Svc service of package pkg.
func newSvcDesc(pkg string) grpc.ServiceDesc {
	service := pkg + ".Svc"
	return grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			// Nop answers with an empty message, for benchmarks.
			MethodName: "Nop",
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				req := dynamicpb.NewMessage(requestDesc)
				if err := dec(req); err != nil {
					return nil, err
				}
				h := func(context.Context, any) (any, error) { return &wrapperspb.StringValue{}, nil }
				if ic == nil {
					return h(ctx, req)
				}
				return ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/" + service + "/Nop"}, h)
			},
		}, {
			MethodName: "Get",
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				req := dynamicpb.NewMessage(requestDesc)
				if err := dec(req); err != nil {
					return nil, err
				}
				h := func(ctx context.Context, _ any) (any, error) {
					// Report whether the authorization metadata reached the handler.
					md, _ := metadata.FromIncomingContext(ctx)
					return wrapperspb.String(whoami(ctx) + " md=" + strings.Join(md.Get("authorization"), ",")), nil
				}
				if ic == nil {
					return h(ctx, req)
				}
				return ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/" + service + "/Get"}, h)
			},
		}},
		Streams: []grpc.StreamDesc{
			{
				StreamName:    "List",
				ServerStreams: true,
				Handler: func(_ any, ss grpc.ServerStream) error {
					req := dynamicpb.NewMessage(requestDesc)
					if err := ss.RecvMsg(req); err != nil {
						return err
					}
					for i := 0; i < 3; i++ {
						if err := ss.SendMsg(wrapperspb.String(whoami(ss.Context()))); err != nil {
							return err
						}
					}
					return nil
				},
			},
			{
				StreamName:    "Chat",
				ServerStreams: true,
				ClientStreams: true,
				Handler: func(_ any, ss grpc.ServerStream) error {
					for {
						req := dynamicpb.NewMessage(requestDesc)
						err := ss.RecvMsg(req)
						if errors.Is(err, io.EOF) {
							return nil
						}
						if err != nil {
							return err
						}
						name, _ := grpcauth.StringField(req, "name")
						if err := ss.SendMsg(wrapperspb.String(whoami(ss.Context()) + ":" + name)); err != nil {
							return err
						}
					}
				},
			},
			{
				StreamName:    "Upload",
				ClientStreams: true,
				Handler: func(_ any, ss grpc.ServerStream) error {
					n := 0
					for {
						req := dynamicpb.NewMessage(requestDesc)
						err := ss.RecvMsg(req)
						if errors.Is(err, io.EOF) {
							break
						}
						if err != nil {
							return err
						}
						n++
					}
					return ss.SendMsg(wrapperspb.String(whoami(ss.Context()) + " sent " + string(rune('0'+n))))
				},
			},
		},
	}
}

// serve starts a server with the interceptors built from opts, the test
// service (registered and unregistered) and the health service on a bufconn listener, and returns a client
// connection to it.
func serve(t testing.TB, opts grpcauth.Options) *grpc.ClientConn {
	return serveBench(t, &opts)
}

// serveBench is serve, with no interceptor at all when opts is nil.
func serveBench(t testing.TB, opts *grpcauth.Options) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	var sopts []grpc.ServerOption
	if opts != nil {
		ic := mustNew(t, *opts)
		sopts = append(sopts,
			grpc.ChainUnaryInterceptor(ic.UnaryServerInterceptor()),
			grpc.ChainStreamInterceptor(ic.StreamServerInterceptor()))
	}
	srv := grpc.NewServer(sopts...)
	srv.RegisterService(&svcDesc, nil)
	unregistered := newSvcDesc(unregisteredPkg)
	srv.RegisterService(&unregistered, nil)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient() = %v", err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
	})
	return conn
}

// Tokens known to the fake authenticator.
const (
	aliceToken  = "alice-secret-token-0123456789"
	bobToken    = "bob-secret-token-0123456789"
	outageToken = "outage-secret-token-0123456789"
	echoToken   = "echo-secret-token-0123456789"
)

// fakeAuthn accepts aliceToken and bobToken, fails with an outage for
// outageToken, answers with an error that echoes the token for echoToken
// (a misbehaving component the interceptor must redact), and rejects the
// rest.
var fakeAuthn = authenticator.TokenFunc(func(_ context.Context, token string) (*authenticator.Response, bool, error) {
	switch token {
	case aliceToken:
		return &authenticator.Response{User: &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}}}, true, nil
	case bobToken:
		return &authenticator.Response{User: &user.DefaultInfo{Name: "bob"}}, true, nil
	case outageToken:
		return nil, false, &reviewauth.ReviewError{Review: "TokenReview", Code: 503, Attempts: 1}
	case echoToken:
		return nil, false, errors.New("cannot parse token " + token)
	}
	return nil, false, &reviewauth.RejectedError{Reason: "invalid bearer token"}
})

// fakeAuthz allows alice on every object but "forbidden", fails on "boom",
// and denies everyone else.
var fakeAuthz = authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	switch {
	case a.GetName() == "boom":
		return authorizer.DecisionNoOpinion, "", errors.New("webhook exploded")
	case a.GetUser().GetName() == "alice" && a.GetName() != "forbidden":
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionDeny, "no RBAC rule", nil
})

// getThing is the attribute builder the tests use: get things/<name> in
// <namespace>, both required.
var getThing = grpcauth.Resource{Verb: "get", APIGroup: "example.com", Resource: "things", NamespaceField: "namespace", NameField: "name"}.Attributes

func testOptions(token grpcauth.TokenExtractor) grpcauth.Options {
	rule := grpcauth.Rule{Token: token, Attributes: getThing}
	rules := map[string]grpcauth.Rule{}
	for _, pkg := range []string{registeredPkg, unregisteredPkg} {
		for _, m := range []string{"/Svc/Get", "/Svc/List", "/Svc/Chat", "/Svc/Upload", "/Probe/LeakServer", "/Probe/LeakClient", "/Probe/LeakBidi"} {
			rules["/"+pkg+"."+m[1:]] = rule
		}
	}
	return grpcauth.Options{
		Authenticator: fakeAuthn,
		Authorizer:    fakeAuthz,
		Rules:         rules,
		Skip:          grpcauth.HealthAndReflection,
	}
}

// mustNew is grpcauth.New, failing t on an error.
func mustNew(t testing.TB, opts grpcauth.Options) *grpcauth.Interceptor {
	t.Helper()
	ic, err := grpcauth.New(opts)
	if err != nil {
		t.Fatalf("grpcauth.New() = %v", err)
	}
	return ic
}

func withBearer(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}
