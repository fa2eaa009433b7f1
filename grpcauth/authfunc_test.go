package grpcauth_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr/funcr"
	mwauth "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/grpcauth"
)

// go-grpc-middleware's auth interceptors take the AuthFunc as it is.
var (
	_ mwauth.AuthFunc = (*grpcauth.Interceptor)(nil).AuthFunc()
	_                 = mwauth.UnaryServerInterceptor((&grpcauth.Interceptor{}).AuthFunc())
)

// thingA authorizes get things/a in namespace ns without reading the
// request: what an AuthFunc can check.
func thingA(_ context.Context, _ any, u user.Info) ([]authorizer.Attributes, error) {
	return []authorizer.Attributes{authorizer.AttributesRecord{User: u, Verb: "get", APIGroup: "example.com",
		Resource: "things", Namespace: "ns", Name: "a", ResourceRequest: true}}, nil
}

// authFuncOptions: Get and List are checkable from the metadata; Chat
// reads the message for its attributes, Upload for its token; Nop has no
// rule; health is skipped.
func authFuncOptions() grpcauth.Options {
	opts := testOptions(nil)
	opts.Rules = map[string]grpcauth.Rule{
		methodGet:    {Attributes: thingA, AttributesIgnoreMessage: true},
		methodList:   {Attributes: thingA, AttributesIgnoreMessage: true},
		methodChat:   {Attributes: getThing},
		methodUpload: {Token: grpcauth.FromField("security_token"), Attributes: thingA, AttributesIgnoreMessage: true},
	}
	return opts
}

// serveWith serves the test service and health with the given
// interceptors over bufconn, counting the calls that reach a handler.
func serveWith(t *testing.T, unary grpc.UnaryServerInterceptor, stream grpc.StreamServerInterceptor) (*grpc.ClientConn, *atomic.Int32) {
	t.Helper()
	var reached atomic.Int32
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		reached.Add(1)
		return h(ctx, req)
	}
	countStream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		reached.Add(1)
		return h(srv, ss)
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(unary, count), grpc.ChainStreamInterceptor(stream, countStream))
	srv.RegisterService(&svcDesc, nil)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
	})
	return conn, &reached
}

// call makes one call of method (unary or streaming) and returns its
// status code and what the handler answered.
func call(ctx context.Context, conn *grpc.ClientConn, method string) (codes.Code, string) {
	if method == "/grpc.health.v1.Health/Check" {
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return status.Code(err), ""
	}
	if method == methodGet || method == methodNop {
		resp := new(wrapperspb.StringValue)
		err := conn.Invoke(ctx, method, newRequest("", "ns", "a"), resp)
		return status.Code(err), resp.GetValue()
	}
	desc := &grpc.StreamDesc{ServerStreams: method != methodUpload, ClientStreams: method != methodList}
	cs, err := conn.NewStream(ctx, desc, method)
	if err != nil {
		return status.Code(err), ""
	}
	_ = cs.SendMsg(newRequest(aliceToken, "ns", "a"))
	_ = cs.CloseSend()
	var got []string
	for {
		m := new(wrapperspb.StringValue)
		err := cs.RecvMsg(m)
		if err == io.EOF {
			return codes.OK, strings.Join(got, ",")
		}
		if err != nil {
			return status.Code(err), strings.Join(got, ",")
		}
		got = append(got, m.GetValue())
	}
}

// TestAuthFunc runs the AuthFunc behind go-grpc-middleware's own auth
// interceptors, and compares every outcome with the Interceptor's own
// interceptors (the oracle) on the methods an AuthFunc can check. The
// methods it cannot check fail closed with Unavailable, and no refused
// call reaches a handler.
func TestAuthFunc(t *testing.T) {
	t.Parallel()
	ic := mustNew(t, authFuncOptions())
	viaAuthFunc, reached := serveWith(t, mwauth.UnaryServerInterceptor(ic.AuthFunc()), mwauth.StreamServerInterceptor(ic.AuthFunc()))
	viaInterceptor, _ := serveWith(t, ic.UnaryServerInterceptor(), ic.StreamServerInterceptor())

	tests := []struct {
		name, method, token string
		want                codes.Code
		reply               string // the handler's answer through the AuthFunc
	}{
		{"allowed", methodGet, aliceToken, codes.OK, "alice md="},
		{"allowed stream", methodList, aliceToken, codes.OK, "alice,alice,alice"},
		{"denied", methodGet, bobToken, codes.PermissionDenied, ""},
		{"no token", methodGet, "", codes.Unauthenticated, ""},
		{"rejected token", methodGet, "nobody-knows-this-token", codes.Unauthenticated, ""},
		{"token echoed by the authenticator", methodGet, echoToken, codes.Unauthenticated, ""},
		{"outage", methodGet, outageToken, codes.Unavailable, ""},
		{"method without a rule", methodNop, aliceToken, codes.PermissionDenied, ""},
		{"skipped", "/grpc.health.v1.Health/Check", "", codes.OK, ""},
		{"attributes read the message", methodChat, aliceToken, codes.Unavailable, ""},
		{"token in the message", methodUpload, aliceToken, codes.Unavailable, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := withBearer(t.Context(), tt.token)
			before := reached.Load()
			code, reply := call(ctx, viaAuthFunc, tt.method)
			if code != tt.want || reply != tt.reply {
				t.Errorf("%s through auth.AuthFunc = %v %q; want %v %q", tt.method, code, reply, tt.want, tt.reply)
			}
			if refused := code != codes.OK; refused && reached.Load() != before {
				t.Errorf("a refused call reached the handler")
			}
			if tt.method == methodChat || tt.method == methodUpload {
				return // the oracle receives the message and can check them
			}
			if oracle, _ := call(ctx, viaInterceptor, tt.method); oracle != code {
				t.Errorf("%s: AuthFunc = %v, UnaryServerInterceptor/StreamServerInterceptor = %v; want the same", tt.method, code, oracle)
			}
		})
	}
}

// serverStream is the grpc.ServerTransportStream of a call to method, so
// that grpc.Method finds it in a context.
type serverStream struct{ method string }

func (s serverStream) Method() string             { return s.method }
func (serverStream) SetHeader(metadata.MD) error  { return nil }
func (serverStream) SendHeader(metadata.MD) error { return nil }
func (serverStream) SetTrailer(metadata.MD) error { return nil }

// TestAuthFuncDirect calls the AuthFunc outside a server: without a
// method, with a nil or zero Interceptor, and for a method whose rule
// needs the message, whose first refusal is logged as an error and later
// ones only at -v=2. A token echoed in an authenticator's error never
// reaches the status.
func TestAuthFuncDirect(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	logger := funcr.New(func(prefix, args string) { logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{Verbosity: 1})
	ctx := klog.NewContext(context.Background(), logger)
	at := func(method, token string) context.Context {
		ctx := grpc.NewContextWithServerTransportStream(ctx, serverStream{method})
		if token != "" {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+token))
		}
		return ctx
	}
	f := mustNew(t, authFuncOptions()).AuthFunc()
	tests := []struct {
		name string
		f    func(context.Context) (context.Context, error)
		ctx  context.Context
		want codes.Code
	}{
		{"no method", f, ctx, codes.Unavailable},
		{"nil Interceptor", (*grpcauth.Interceptor)(nil).AuthFunc(), at(methodGet, aliceToken), codes.Unavailable},
		{"zero Interceptor", (&grpcauth.Interceptor{}).AuthFunc(), at(methodGet, aliceToken), codes.Unavailable},
		{"needs the message, first", f, at(methodChat, aliceToken), codes.Unavailable},
		{"needs the message, again", f, at(methodChat, aliceToken), codes.Unavailable},
		{"echoed token", f, at(methodGet, echoToken), codes.Unauthenticated},
		{"allowed", f, at(methodGet, aliceToken), codes.OK},
	}
	for _, tt := range tests {
		got, err := tt.f(tt.ctx)
		if status.Code(err) != tt.want {
			t.Errorf("%s: AuthFunc() = %v; want code %v", tt.name, err, tt.want)
		}
		if err != nil && (got != nil || strings.Contains(err.Error(), echoToken)) {
			t.Errorf("%s: AuthFunc() = %v, %v; want no context, and no token in the error", tt.name, got, err)
		}
		if err == nil {
			if u, ok := request.UserFrom(got); !ok || u.GetName() != "alice" {
				t.Errorf("%s: AuthFunc() context user = %v; want alice", tt.name, u)
			}
			if md, _ := metadata.FromIncomingContext(got); len(md.Get("authorization")) != 0 {
				t.Errorf("%s: AuthFunc() context still has the authorization metadata", tt.name)
			}
		}
	}
	if n := strings.Count(logs.String(), `"level"=0`); n != 0 {
		t.Errorf("log lines at level 0 (Info): %d; want the refusal as an error\n%s", n, &logs)
	}
	if n := strings.Count(logs.String(), "AuthFunc refused a call"); n != 1 {
		t.Errorf("logged %d refusals at -v=1; want the first one only\n%s", n, &logs)
	}
	if !strings.Contains(logs.String(), `"method"="`+methodChat+`"`) || strings.Contains(logs.String(), aliceToken) {
		t.Errorf("the refusal log names no method, or holds a token:\n%s", &logs)
	}
}
