package grpcauth_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/grpcauth"
	"github.com/reviewauth/reviewauth/metrics"
)

// probe records, per call, whether a Probe handler started and whether the
// interceptor chain returned. A call names itself in the "case" metadata.
type probe struct {
	mu       sync.Mutex
	ran      map[string]int
	returned map[string]chan struct{}
}

func newProbe() *probe {
	return &probe{ran: map[string]int{}, returned: map[string]chan struct{}{}}
}

func caseOf(ctx context.Context) string {
	v := metadata.ValueFromIncomingContext(ctx, "case")
	if len(v) != 1 {
		return ""
	}
	return v[0]
}

func (p *probe) handlerRan(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ran[id]
}

// done returns a channel closed when the server has finished the call id.
func (p *probe) done(id string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.returned[id]
	if !ok {
		c = make(chan struct{})
		p.returned[id] = c
	}
	return c
}

// outer is a stream interceptor placed before grpcauth's: it notes when the
// call has ended on the server.
func (p *probe) outer(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	defer close(p.done(caseOf(ss.Context())))
	return handler(srv, ss)
}

// probeDesc returns the Probe service of package pkg. Each handler, before
// it receives anything, records a side effect, sets header and trailer
// metadata (on the stream and through the context), sends the header and
// sends a message; then it receives until EOF and, on a server stream,
// answers with the caller's name and the number of messages received.
func probeDesc(pkg string, p *probe) grpc.ServiceDesc {
	handler := func(serverStreams bool) grpc.StreamHandler {
		return func(_ any, ss grpc.ServerStream) error {
			ctx := ss.Context()
			p.mu.Lock()
			p.ran[caseOf(ctx)]++
			p.mu.Unlock()
			_ = ss.SetHeader(metadata.Pairs("early-header", "1"))
			_ = grpc.SetHeader(ctx, metadata.Pairs("early-ctx-header", "1"))
			ss.SetTrailer(metadata.Pairs("early-trailer", "1"))
			_ = grpc.SetTrailer(ctx, metadata.Pairs("early-ctx-trailer", "1"))
			_ = ss.SendHeader(metadata.Pairs("sent-header", "1"))
			_ = ss.SendMsg(wrapperspb.String("early"))
			n := 0
			for {
				err := ss.RecvMsg(dynamicpb.NewMessage(requestDesc))
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return err
				}
				n++
			}
			if serverStreams {
				return ss.SendMsg(wrapperspb.String(fmt.Sprintf("%s received %d", whoami(ss.Context()), n)))
			}
			return nil
		}
	}
	return grpc.ServiceDesc{
		ServiceName: pkg + ".Probe",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{
			{StreamName: "LeakServer", ServerStreams: true, Handler: handler(true)},
			{StreamName: "LeakClient", ClientStreams: true, Handler: handler(false)},
			{StreamName: "LeakBidi", ServerStreams: true, ClientStreams: true, Handler: handler(true)},
		},
	}
}

// serveProbe serves the Probe service, registered and unregistered, with
// the interceptors built from opts.
func serveProbe(t *testing.T, opts grpcauth.Options) (*grpc.ClientConn, *probe) {
	t.Helper()
	p := newProbe()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(p.outer, mustNew(t, opts).StreamServerInterceptor()))
	for _, pkg := range []string{registeredPkg, unregisteredPkg} {
		d := probeDesc(pkg, p)
		srv.RegisterService(&d, nil)
	}
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
	return conn, p
}

// probeMethods are the Probe methods, one per kind of stream.
var probeMethods = []struct {
	name string
	desc grpc.StreamDesc
}{
	{"LeakServer", grpc.StreamDesc{ServerStreams: true}},
	{"LeakClient", grpc.StreamDesc{ClientStreams: true}},
	{"LeakBidi", grpc.StreamDesc{ServerStreams: true, ClientStreams: true}},
}

// seen is what a caller received.
type seen struct {
	err             error
	header, trailer metadata.MD
	msgs            []string
}

// probeKeys are the metadata keys the Probe handlers set.
var probeKeys = []string{"early-header", "early-ctx-header", "sent-header", "early-trailer", "early-ctx-trailer"}

// leaked lists the handler's metadata found in md.
func leaked(md metadata.MD) []string {
	var out []string
	for _, k := range probeKeys {
		if len(md.Get(k)) > 0 {
			out = append(out, k)
		}
	}
	return out
}

// callProbe opens a stream, sends msgs, closes its side if closeSend, and
// reads until the end.
func callProbe(ctx context.Context, conn *grpc.ClientConn, method string, desc grpc.StreamDesc, msgs []proto.Message, closeSend bool) seen {
	cs, err := conn.NewStream(ctx, &desc, method)
	if err != nil {
		return seen{err: err}
	}
	for _, m := range msgs {
		if err := cs.SendMsg(m); err != nil {
			break
		}
	}
	if closeSend {
		_ = cs.CloseSend()
	}
	var s seen
	for {
		m := new(wrapperspb.StringValue)
		if err = cs.RecvMsg(m); err != nil {
			break
		}
		s.msgs = append(s.msgs, m.GetValue())
	}
	if !errors.Is(err, io.EOF) {
		s.err = err
	}
	s.header, _ = cs.Header()
	s.trailer = cs.Trailer()
	return s
}

// checkRefused fails t unless the caller got code want and nothing else.
func checkRefused(t *testing.T, s seen, want codes.Code) {
	t.Helper()
	if status.Code(s.err) != want {
		t.Errorf("call = %v; want code %v", s.err, want)
	}
	if l := leaked(s.header); l != nil {
		t.Errorf("refused caller received header metadata %q", l)
	}
	if l := leaked(s.trailer); l != nil {
		t.Errorf("refused caller received trailer metadata %q", l)
	}
	if len(s.msgs) != 0 {
		t.Errorf("refused caller received messages %q", s.msgs)
	}
}

// TestStreamNothingReachesARefusedCaller: a caller that is refused receives
// the status and nothing else, on every kind of stream: no header or
// trailer metadata and no message the handler set or sent before its first
// RecvMsg. When the method's request type is in the protobuf registry, the
// handler does not even start; otherwise it does only when the check needs
// the first message (its output is then held and dropped).
func TestStreamNothingReachesARefusedCaller(t *testing.T) {
	t.Parallel()
	callers := []struct {
		name   string
		token  string
		object string
		want   codes.Code
		authOK bool // the token is accepted: only authorization fails
	}{
		{name: "allowed", token: aliceToken, object: "a", want: codes.OK, authOK: true},
		{name: "no token", want: codes.Unauthenticated},
		{name: "invalid token", token: "not-a-known-token-0123456789", object: "a", want: codes.Unauthenticated},
		{name: "outage", token: outageToken, object: "a", want: codes.Unavailable},
		{name: "denied", token: bobToken, object: "a", want: codes.PermissionDenied, authOK: true},
		{name: "missing field", token: aliceToken, want: codes.InvalidArgument, authOK: true},
	}
	for _, place := range tokenPlaces {
		conn, p := serveProbe(t, testOptions(place.extract))
		for _, pkg := range []string{registeredPkg, unregisteredPkg} {
			for _, m := range probeMethods {
				for _, c := range callers {
					name := place.name + "/" + pkg + "/" + m.name + "/" + c.name
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						ctx, req := place.call(metadata.AppendToOutgoingContext(t.Context(), "case", name),
							callCase{token: c.token, namespace: "ns", object: c.object})
						s := callProbe(ctx, conn, "/"+pkg+".Probe/"+m.name, m.desc, []proto.Message{req.(proto.Message)}, true)
						<-p.done(name)
						ran := p.handlerRan(name)
						if c.want == codes.OK {
							if s.err != nil {
								t.Fatalf("call = %v; want OK", s.err)
							}
							want := "early,alice received 1"
							if !m.desc.ServerStreams {
								want = "early"
							}
							if got := strings.Join(s.msgs, ","); got != want {
								t.Errorf("messages = %q; want %q", got, want)
							}
							if l := append(leaked(s.header), leaked(s.trailer)...); len(l) != len(probeKeys) {
								t.Errorf("metadata received = %q; want all of %q", l, probeKeys)
							}
							if ran != 1 {
								t.Errorf("handler ran %d times; want 1", ran)
							}
							return
						}
						checkRefused(t, s, c.want)
						// Only an unregistered method whose check needs the
						// first message starts its handler early.
						wantRan := 0
						if pkg == unregisteredPkg && (place.name == "message" || c.authOK) {
							wantRan = 1
						}
						if ran != wantRan {
							t.Errorf("handler ran %d times; want %d", ran, wantRan)
						}
					})
				}
			}
		}
	}
}

// TestStreamWithoutMessages: a caller that closes its side without sending
// anything is refused: there is no message to check.
func TestStreamWithoutMessages(t *testing.T) {
	t.Parallel()
	for _, place := range tokenPlaces {
		conn, p := serveProbe(t, testOptions(place.extract))
		for _, pkg := range []string{registeredPkg, unregisteredPkg} {
			for _, m := range probeMethods[1:] { // the client-streaming ones
				name := place.name + "/" + pkg + "/" + m.name
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					ctx := metadata.AppendToOutgoingContext(withBearer(t.Context(), aliceToken), "case", name)
					s := callProbe(ctx, conn, "/"+pkg+".Probe/"+m.name, m.desc, nil, true)
					<-p.done(name)
					checkRefused(t, s, codes.Unauthenticated)
					if ran, want := p.handlerRan(name), map[string]int{registeredPkg: 0, unregisteredPkg: 1}[pkg]; ran != want {
						t.Errorf("handler ran %d times; want %d", ran, want)
					}
				})
			}
		}
	}
}

// TestStreamClientNeverSends: a caller that opens a stream and never sends
// is ended by its own deadline, and the server's side of the call returns
// (goleak in TestMain checks that nothing is left behind).
func TestStreamClientNeverSends(t *testing.T) {
	t.Parallel()
	for _, place := range tokenPlaces {
		conn, p := serveProbe(t, testOptions(place.extract))
		for _, pkg := range []string{registeredPkg, unregisteredPkg} {
			for _, m := range probeMethods[1:] {
				name := place.name + "/" + pkg + "/" + m.name
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(withBearer(t.Context(), aliceToken), "case", name), 100*time.Millisecond)
					defer cancel()
					s := callProbe(ctx, conn, "/"+pkg+".Probe/"+m.name, m.desc, nil, false)
					checkRefused(t, s, codes.DeadlineExceeded)
					<-p.done(name)
					if ran, want := p.handlerRan(name), map[string]int{registeredPkg: 0, unregisteredPkg: 1}[pkg]; ran != want {
						t.Errorf("handler ran %d times; want %d", ran, want)
					}
				})
			}
		}
	}
}

// TestStreamAttributesIgnoreMessage: with the token in the metadata and
// attributes that do not read the message, a stream is checked before its
// handler starts, and needs no message at all.
func TestStreamAttributesIgnoreMessage(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var reqs []any // what the attributes builder was given
	fixed := func(ctx context.Context, req any, u user.Info) ([]authorizer.Attributes, error) {
		mu.Lock()
		reqs = append(reqs, req)
		mu.Unlock()
		return grpcauth.Resource{Verb: "get", APIGroup: "example.com", Resource: "things", Namespace: "ns", Name: "a"}.Attributes(ctx, req, u)
	}
	opts := testOptions(nil)
	for m := range opts.Rules {
		opts.Rules[m] = grpcauth.Rule{Attributes: fixed, AttributesIgnoreMessage: true}
	}
	conn, p := serveProbe(t, opts)
	for _, pkg := range []string{registeredPkg, unregisteredPkg} {
		for _, m := range probeMethods[1:] {
			for _, c := range []struct {
				name  string
				token string
				want  codes.Code
			}{{"allowed", aliceToken, codes.OK}, {"no token", "", codes.Unauthenticated}, {"denied", bobToken, codes.PermissionDenied}} {
				name := pkg + "/" + m.name + "/" + c.name
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					ctx := metadata.AppendToOutgoingContext(withBearer(t.Context(), c.token), "case", name)
					// No message at all: the handler reads EOF at once.
					s := callProbe(ctx, conn, "/"+pkg+".Probe/"+m.name, m.desc, nil, true)
					<-p.done(name)
					ran := p.handlerRan(name)
					if c.want != codes.OK {
						checkRefused(t, s, c.want)
						if ran != 0 {
							t.Errorf("handler ran %d times; want 0", ran)
						}
						return
					}
					want := "early,alice received 0"
					if !m.desc.ServerStreams {
						want = "early"
					}
					if s.err != nil || strings.Join(s.msgs, ",") != want || ran != 1 {
						t.Errorf("call = %v, %q, handler ran %d times; want OK, %q, 1", s.err, s.msgs, ran, want)
					}
				})
			}
		}
	}
	t.Run("unary", func(t *testing.T) {
		conn := serve(t, opts)
		if err := conn.Invoke(withBearer(t.Context(), aliceToken), methodGet, newRequest("", "ns", "a"), new(wrapperspb.StringValue)); err != nil {
			t.Fatalf("Get() = %v", err)
		}
	})
	mu.Lock()
	defer mu.Unlock()
	for i, r := range reqs {
		if r != nil {
			t.Errorf("Attributes call %d got req %v; want nil", i+1, r)
		}
	}
}

// watchServer is a health server whose Watch records the request it got,
// and answers once.
type watchServer struct {
	healthpb.UnimplementedHealthServer
	mu   sync.Mutex
	seen []string
}

func (w *watchServer) Watch(req *healthpb.HealthCheckRequest, stream grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	w.mu.Lock()
	w.seen = append(w.seen, whoami(stream.Context())+":"+req.GetService())
	w.mu.Unlock()
	return stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// TestStreamGeneratedService: a generated service (grpc's health service,
// its types registered by its generated code) with the token in the
// request: a refused caller never reaches the handler, and an allowed one's
// handler receives the very request the interceptor checked.
func TestStreamGeneratedService(t *testing.T) {
	t.Parallel()
	ws := &watchServer{}
	opts := grpcauth.Options{
		Authenticator: fakeAuthn,
		Authorizer:    fakeAuthz,
		Rules: map[string]grpcauth.Rule{healthpb.Health_Watch_FullMethodName: {
			Token:      grpcauth.FromField("service"),
			Attributes: grpcauth.Resource{Verb: "get", Resource: "things", Namespace: "ns", Name: "a"}.Attributes,
		}},
	}
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer(grpc.StreamInterceptor(mustNew(t, opts).StreamServerInterceptor()))
	healthpb.RegisterHealthServer(srv, ws)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, c := range []struct {
		token string
		want  codes.Code
	}{{"not-a-known-token-0123456789", codes.Unauthenticated}, {bobToken, codes.PermissionDenied}, {aliceToken, codes.OK}} {
		stream, err := healthpb.NewHealthClient(conn).Watch(t.Context(), &healthpb.HealthCheckRequest{Service: c.token})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != c.want {
			t.Errorf("Watch(%.5s...) = %v; want code %v", c.token, err, c.want)
		}
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if got, want := strings.Join(ws.seen, ","), "alice:"+aliceToken; got != want {
		t.Errorf("Watch handler saw %q; want only %q", got, want)
	}
}

// TestStreamHandOver: the checked first message reaches the handler's
// first RecvMsg whatever it receives into: the same type (a merge), another
// proto type (through the wire format), or not a proto message (an error).
func TestStreamHandOver(t *testing.T) {
	t.Parallel()
	interceptor := mustNew(t, testOptions(grpcauth.FromField("security_token"))).StreamServerInterceptor()
	info := &grpc.StreamServerInfo{FullMethod: methodChat, IsClientStream: true, IsServerStream: true}
	field := func(name string) func(proto.Message) string {
		return func(m proto.Message) string { v, _ := grpcauth.StringField(m, name); return v }
	}
	tests := []struct {
		name  string
		into  func() any
		check map[string]string // field: value wanted in the handed-over message
		code  codes.Code
	}{
		{name: "same type", into: func() any { return newRequest("stale", "stale", "stale") },
			check: map[string]string{"security_token": aliceToken, "namespace": "ns", "name": "a"}},
		// StringValue's field 1 is a string, as Request's: it decodes.
		{name: "another proto type", into: func() any { return new(wrapperspb.StringValue) },
			check: map[string]string{"value": aliceToken}},
		{name: "not a proto message", into: func() any { return new(string) }, code: codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ss := &fakeStream{ctx: context.Background(), msgs: []string{aliceToken, bobToken}}
			err := interceptor(nil, ss, info, func(_ any, s grpc.ServerStream) error {
				m := tt.into()
				if err := s.RecvMsg(m); err != nil {
					return err
				}
				for f, want := range tt.check {
					if got := field(f)(m.(proto.Message)); got != want {
						t.Errorf("first RecvMsg() %s = %.10q; want %.10q", f, got, want)
					}
				}
				// The next message comes from the stream.
				next := newRequest("", "", "")
				if err := s.RecvMsg(next); err != nil {
					return err
				}
				if tok, _ := grpcauth.StringField(next, "security_token"); tok != bobToken {
					t.Errorf("second RecvMsg() token = %.5s...; want the second message", tok)
				}
				return nil
			})
			if status.Code(err) != tt.code {
				t.Fatalf("interceptor() = %v; want code %v", err, tt.code)
			}
		})
	}
}

// TestStreamOtherCodecIsHeld: a call whose content-subtype names another
// codec cannot be received into a proto message by the interceptor: its
// handler starts at once and what it sends is held.
func TestStreamOtherCodecIsHeld(t *testing.T) {
	t.Parallel()
	interceptor := mustNew(t, testOptions(grpcauth.FromField("security_token"))).StreamServerInterceptor()
	info := &grpc.StreamServerInfo{FullMethod: methodChat, IsClientStream: true, IsServerStream: true}
	for _, tt := range []struct {
		contentType string
		held        bool
	}{
		{"application/grpc", false},
		{"application/grpc+proto", false},
		{"application/grpc;proto", false},
		{"application/grpc+json", true},
		{"application/grpc+protox", true},
	} {
		t.Run(tt.contentType, func(t *testing.T) {
			t.Parallel()
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("content-type", tt.contentType))
			ss := &fakeStream{ctx: ctx, msgs: []string{aliceToken}}
			var before string
			err := interceptor(nil, ss, info, func(_ any, s grpc.ServerStream) error {
				_ = s.SendMsg("early")
				before = strings.Join(ss.ops, ",")
				return s.RecvMsg(newRequest("", "", ""))
			})
			if err != nil {
				t.Fatalf("interceptor() = %v", err)
			}
			if held := before == ""; held != tt.held {
				t.Errorf("SendMsg() before the first RecvMsg reached the stream: %q; want held %v", before, tt.held)
			}
		})
	}
}

// TestStreamDecisionMetrics: every checked stream counts one decision, and
// every span it starts ends.
func TestStreamDecisionMetrics(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	for _, place := range tokenPlaces {
		opts := testOptions(place.extract)
		opts.Metrics, opts.TracerProvider = m, tp
		conn, p := serveProbe(t, opts)
		for _, pkg := range []string{registeredPkg, unregisteredPkg} {
			for i, c := range []callCase{
				{token: aliceToken, namespace: "ns", object: "a"},        // allowed
				{token: bobToken, namespace: "ns", object: "a"},          // denied
				{token: "wrong-token-000", namespace: "ns", object: "a"}, // unauthenticated
				{token: aliceToken, namespace: "ns"},                     // bad request
			} {
				name := fmt.Sprintf("%s/%s/%d", place.name, pkg, i)
				ctx, req := place.call(metadata.AppendToOutgoingContext(t.Context(), "case", name), c)
				_ = callProbe(ctx, conn, "/"+pkg+".Probe/LeakBidi", probeMethods[2].desc, []proto.Message{req.(proto.Message)}, true)
				<-p.done(name)
			}
			// No message at all: unauthenticated.
			name := place.name + "/" + pkg + "/empty"
			ctx := metadata.AppendToOutgoingContext(withBearer(t.Context(), aliceToken), "case", name)
			_ = callProbe(ctx, conn, "/"+pkg+".Probe/LeakBidi", probeMethods[2].desc, nil, true)
			<-p.done(name)
		}
	}
	n := 2 * len(tokenPlaces) // calls of each kind: one per place and package
	want := fmt.Sprintf(`
# HELP reviewauth_decisions_total Requests decided by a transport adapter, by transport (http, grpc) and outcome (allowed, denied, unauthenticated, unavailable).
# TYPE reviewauth_decisions_total counter
reviewauth_decisions_total{outcome="allowed",transport="grpc"} %d
reviewauth_decisions_total{outcome="allowed",transport="http"} 0
reviewauth_decisions_total{outcome="always_allowed",transport="grpc"} 0
reviewauth_decisions_total{outcome="always_allowed",transport="http"} 0
reviewauth_decisions_total{outcome="bad_request",transport="grpc"} %d
reviewauth_decisions_total{outcome="bad_request",transport="http"} 0
reviewauth_decisions_total{outcome="denied",transport="grpc"} %d
reviewauth_decisions_total{outcome="denied",transport="http"} 0
reviewauth_decisions_total{outcome="unauthenticated",transport="grpc"} %d
reviewauth_decisions_total{outcome="unauthenticated",transport="http"} 0
reviewauth_decisions_total{outcome="unavailable",transport="grpc"} 0
reviewauth_decisions_total{outcome="unavailable",transport="http"} 0
`, n, n, n, 2*n)
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "reviewauth_decisions_total"); err != nil {
		t.Error(err)
	}
	if s, e := len(rec.Started()), len(rec.Ended()); s != 5*n || e != s {
		t.Errorf("spans started %d, ended %d; want %d and %d", s, e, 5*n, 5*n)
	}
}
