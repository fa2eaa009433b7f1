package grpcauth_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/grpcauth"
)

// callCase is one call of the status-code table.
type callCase struct {
	name      string
	token     string
	namespace string
	object    string
	want      codes.Code
}

var callCases = []callCase{
	{name: "allowed", token: aliceToken, namespace: "ns", object: "a", want: codes.OK},
	{name: "no token", token: "", namespace: "ns", object: "a", want: codes.Unauthenticated},
	{name: "invalid token", token: "not-a-known-token-0123456789", namespace: "ns", object: "a", want: codes.Unauthenticated},
	{name: "authentication outage", token: outageToken, namespace: "ns", object: "a", want: codes.Unavailable},
	{name: "unclassified authentication error", token: echoToken, namespace: "ns", object: "a", want: codes.Unavailable},
	{name: "denied user", token: bobToken, namespace: "ns", object: "a", want: codes.PermissionDenied},
	{name: "denied object", token: aliceToken, namespace: "ns", object: "forbidden", want: codes.PermissionDenied},
	{name: "authorizer error", token: aliceToken, namespace: "ns", object: "boom", want: codes.Unavailable},
	{name: "missing name", token: aliceToken, namespace: "ns", object: "", want: codes.InvalidArgument},
	{name: "missing namespace", token: aliceToken, namespace: "", object: "a", want: codes.InvalidArgument},
}

// tokenPlaces are the two places a rule can read the token from.
var tokenPlaces = []struct {
	name    string
	extract grpcauth.TokenExtractor
	// call returns the context and request for a token.
	call func(ctx context.Context, c callCase) (context.Context, any)
}{
	{
		name:    "metadata",
		extract: nil, // the default
		call: func(ctx context.Context, c callCase) (context.Context, any) {
			return withBearer(ctx, c.token), newRequest("", c.namespace, c.object)
		},
	},
	{
		name:    "message",
		extract: grpcauth.FromField("security_token"),
		call: func(ctx context.Context, c callCase) (context.Context, any) {
			return ctx, newRequest(c.token, c.namespace, c.object)
		},
	},
}

func checkStatus(t *testing.T, call string, err error, c callCase) {
	t.Helper()
	if got := status.Code(err); got != c.want {
		t.Fatalf("%s = %v; want code %v", call, err, c.want)
	}
	if c.token != "" && err != nil && strings.Contains(err.Error(), c.token) {
		t.Errorf("%s = %v; the status message contains the token", call, err)
	}
}

func TestUnaryStatusCodes(t *testing.T) {
	t.Parallel()
	for _, place := range tokenPlaces {
		conn := serve(t, testOptions(place.extract))
		for _, c := range callCases {
			t.Run(place.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				ctx, req := place.call(t.Context(), c)
				resp := new(wrapperspb.StringValue)
				err := conn.Invoke(ctx, methodGet, req, resp)
				checkStatus(t, "Get()", err, c)
				if c.want == codes.OK && !strings.HasPrefix(resp.GetValue(), "alice ") {
					t.Errorf("Get() = %q; want the handler to see user alice", resp.GetValue())
				}
			})
		}
	}
}

func TestServerStreamStatusCodes(t *testing.T) {
	t.Parallel()
	desc := &grpc.StreamDesc{StreamName: "List", ServerStreams: true}
	for _, place := range tokenPlaces {
		conn := serve(t, testOptions(place.extract))
		for _, c := range callCases {
			t.Run(place.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				ctx, req := place.call(t.Context(), c)
				cs, err := conn.NewStream(ctx, desc, methodList)
				if err != nil {
					t.Fatalf("NewStream() = %v", err)
				}
				if err := cs.SendMsg(req); err != nil {
					t.Fatalf("SendMsg() = %v", err)
				}
				if err := cs.CloseSend(); err != nil {
					t.Fatalf("CloseSend() = %v", err)
				}
				var got []string
				for {
					m := new(wrapperspb.StringValue)
					err = cs.RecvMsg(m)
					if err != nil {
						break
					}
					got = append(got, m.GetValue())
				}
				if errors.Is(err, io.EOF) {
					err = nil
				}
				checkStatus(t, "List()", err, c)
				if c.want == codes.OK && strings.Join(got, ",") != "alice,alice,alice" {
					t.Errorf("List() = %q; want alice three times", got)
				} else if c.want != codes.OK && len(got) != 0 {
					t.Errorf("List() sent %q before failing; want nothing", got)
				}
			})
		}
	}
}

func TestBidiStreamAuthenticatesFirstMessage(t *testing.T) {
	t.Parallel()
	conn := serve(t, testOptions(grpcauth.FromField("security_token")))
	desc := &grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}
	tests := []struct {
		name  string
		first string // token of the first message
		want  codes.Code
		reply []string
	}{
		{name: "allowed", first: aliceToken, want: codes.OK, reply: []string{"alice:a", "alice:b"}},
		{name: "rejected", first: "unknown-token-0123456789", want: codes.Unauthenticated},
		{name: "denied", first: bobToken, want: codes.PermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cs, err := conn.NewStream(t.Context(), desc, methodChat)
			if err != nil {
				t.Fatalf("NewStream() = %v", err)
			}
			// Only the first message carries a token: later ones ride on
			// the stream's identity.
			_ = cs.SendMsg(newRequest(tt.first, "ns", "a"))
			_ = cs.SendMsg(newRequest("", "ns", "b"))
			_ = cs.CloseSend()
			var got []string
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
			if status.Code(err) != tt.want {
				t.Fatalf("Chat() = %v; want code %v", err, tt.want)
			}
			if strings.Join(got, ",") != strings.Join(tt.reply, ",") {
				t.Errorf("Chat() replies = %q; want %q", got, tt.reply)
			}
		})
	}
}

func TestClientStream(t *testing.T) {
	t.Parallel()
	conn := serve(t, testOptions(nil))
	desc := &grpc.StreamDesc{StreamName: "Upload", ClientStreams: true}
	tests := []struct {
		name  string
		token string
		msgs  int
		want  codes.Code
		reply string
	}{
		{name: "allowed", token: aliceToken, msgs: 3, want: codes.OK, reply: "alice sent 3"},
		{name: "denied", token: bobToken, msgs: 2, want: codes.PermissionDenied},
		{name: "no message to authenticate", token: aliceToken, msgs: 0, want: codes.Unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cs, err := conn.NewStream(withBearer(t.Context(), tt.token), desc, methodUpload)
			if err != nil {
				t.Fatalf("NewStream() = %v", err)
			}
			for i := 0; i < tt.msgs; i++ {
				_ = cs.SendMsg(newRequest("", "ns", "a"))
			}
			_ = cs.CloseSend()
			m := new(wrapperspb.StringValue)
			err = cs.RecvMsg(m)
			if status.Code(err) != tt.want {
				t.Fatalf("Upload() = %v; want code %v", err, tt.want)
			}
			if m.GetValue() != tt.reply {
				t.Errorf("Upload() = %q; want %q", m.GetValue(), tt.reply)
			}
		})
	}
}

// countingAuthn counts the tokens it is asked about.
type countingAuthn struct {
	n atomic.Int32
}

func (c *countingAuthn) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	c.n.Add(1)
	return fakeAuthn(ctx, token)
}

func TestUnknownMethodIsDeniedBeforeAuthentication(t *testing.T) {
	t.Parallel()
	authn := &countingAuthn{}
	opts := grpcauth.Options{
		Authenticator: authn,
		Authorizer:    fakeAuthz,
		Rules:         map[string]grpcauth.Rule{methodList: {Attributes: getThing}}, // no rule for Get
	}
	conn := serve(t, opts)
	err := conn.Invoke(withBearer(t.Context(), aliceToken), methodGet, newRequest("", "ns", "a"), new(wrapperspb.StringValue))
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("Get() without a rule = %v; want code PermissionDenied", err)
	}
	// A method the server does not implement at all is answered by grpc
	// itself, before any interceptor runs.
	err = conn.Invoke(withBearer(t.Context(), aliceToken), "/grpcauth.test.Svc/Missing", newRequest("", "ns", "a"), new(wrapperspb.StringValue))
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("Missing() = %v; want code Unimplemented", err)
	}
	if n := authn.n.Load(); n != 0 {
		t.Errorf("authenticator calls = %d; want 0 for methods without a rule", n)
	}
}

func TestHealthSkipped(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		skip []string
		want codes.Code
	}{
		{name: "HealthAndReflection", skip: grpcauth.HealthAndReflection, want: codes.OK},
		{name: "exact method", skip: []string{"/grpc.health.v1.Health/Check"}, want: codes.OK},
		{name: "nil skips nothing", skip: nil, want: codes.PermissionDenied},
		{name: "other service", skip: []string{"/grpc.health.v1.Healthy/"}, want: codes.PermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := testOptions(nil)
			opts.Skip = tt.skip
			conn := serve(t, opts)
			resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
			if status.Code(err) != tt.want {
				t.Fatalf("Health.Check() = %v, %v; want code %v", resp, err, tt.want)
			}
			if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("Health.Check() = %v; want SERVING", resp.GetStatus())
			}
		})
	}
}

// recordingAuthz allows everything but the names in deny, and records every
// name it was asked about.
type recordingAuthz struct {
	deny  map[string]bool
	asked []string
}

func (r *recordingAuthz) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	r.asked = append(r.asked, a.GetNamespace()+"/"+a.GetName())
	if r.deny[a.GetName()] {
		return authorizer.DecisionDeny, "denied by test", nil
	}
	return authorizer.DecisionAllow, "", nil
}

func (r *recordingAuthz) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(r.Authorize(ctx, a))
}

func (r *recordingAuthz) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

func TestRuleAllSemantics(t *testing.T) {
	t.Parallel()
	// Like a CSI delta call: the target named in the request, and a base
	// object named by the rule.
	attrs := grpcauth.JoinAttributes(
		getThing,
		grpcauth.Resource{Verb: "get", APIGroup: "example.com", Resource: "things", NamespaceField: "namespace", Name: "base"}.Attributes,
	)
	tests := []struct {
		name  string
		deny  []string
		want  codes.Code
		asked string
	}{
		{name: "both allowed", want: codes.OK, asked: "ns/target,ns/base"},
		{name: "first denied", deny: []string{"target"}, want: codes.PermissionDenied, asked: "ns/target"},
		{name: "second denied", deny: []string{"base"}, want: codes.PermissionDenied, asked: "ns/target,ns/base"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			az := &recordingAuthz{deny: map[string]bool{}}
			for _, d := range tt.deny {
				az.deny[d] = true
			}
			conn := serve(t, grpcauth.Options{
				Authenticator: fakeAuthn,
				Authorizer:    az,
				Rules:         map[string]grpcauth.Rule{methodGet: {Attributes: attrs}},
			})
			err := conn.Invoke(withBearer(t.Context(), aliceToken), methodGet, newRequest("", "ns", "target"), new(wrapperspb.StringValue))
			if status.Code(err) != tt.want {
				t.Fatalf("Get() = %v; want code %v", err, tt.want)
			}
			if got := strings.Join(az.asked, ","); got != tt.asked {
				t.Errorf("authorizer asked about %q; want %q", got, tt.asked)
			}
		})
	}
}

func TestRuleWithoutAttributesIsDenied(t *testing.T) {
	t.Parallel()
	for _, attrs := range []struct {
		name string
		f    grpcauth.AttributesFunc
	}{
		{name: "nil", f: nil},
		{name: "empty", f: func(context.Context, any, user.Info) ([]authorizer.Attributes, error) { return nil, nil }},
	} {
		t.Run(attrs.name, func(t *testing.T) {
			t.Parallel()
			conn := serve(t, grpcauth.Options{
				Authenticator: fakeAuthn,
				Authorizer: authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
					return authorizer.DecisionAllow, "", nil
				}),
				Rules: map[string]grpcauth.Rule{methodGet: {Attributes: attrs.f}},
			})
			err := conn.Invoke(withBearer(t.Context(), aliceToken), methodGet, newRequest("", "ns", "a"), new(wrapperspb.StringValue))
			if status.Code(err) != codes.PermissionDenied {
				t.Errorf("Get() with %s attributes = %v; want code PermissionDenied", attrs.name, err)
			}
		})
	}
}

func TestAuthorizationMetadataStripped(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		keep bool
		want string
	}{
		{name: "default strips", keep: false, want: "alice md="},
		{name: "kept on request", keep: true, want: "alice md=Bearer " + aliceToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := testOptions(nil)
			opts.KeepAuthorizationMetadata = tt.keep
			conn := serve(t, opts)
			resp := new(wrapperspb.StringValue)
			if err := conn.Invoke(withBearer(t.Context(), aliceToken), methodGet, newRequest("", "ns", "a"), resp); err != nil {
				t.Fatalf("Get() = %v", err)
			}
			if resp.GetValue() != tt.want {
				t.Errorf("Get() = %q; want %q", resp.GetValue(), tt.want)
			}
		})
	}
}

func TestMisconfiguredServerFailsClosed(t *testing.T) {
	t.Parallel()
	opts := grpcauth.Options{Rules: map[string]grpcauth.Rule{methodGet: {Attributes: getThing}}}
	if err := opts.Validate(); err == nil {
		t.Errorf("Options{no authenticator, no authorizer}.Validate() = nil; want an error")
	}
	if err := testOptions(nil).Validate(); err != nil {
		t.Errorf("testOptions().Validate() = %v; want nil", err)
	}
	conn := serve(t, opts)
	err := conn.Invoke(withBearer(t.Context(), aliceToken), methodGet, newRequest("", "ns", "a"), new(wrapperspb.StringValue))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Get() on a server without authenticator = %v; want code Unavailable", err)
	}
}

// fakeStream is a grpc.ServerStream that replays msgs and records what the
// handler sends.
type fakeStream struct {
	grpc.ServerStream
	ctx  context.Context
	msgs []string // tokens of the messages to receive
	sent int
}

func (f *fakeStream) Context() context.Context { return f.ctx }
func (f *fakeStream) RecvMsg(m any) error {
	if len(f.msgs) == 0 {
		return io.EOF
	}
	proto.Merge(m.(proto.Message), newRequest(f.msgs[0], "ns", "a"))
	f.msgs = f.msgs[1:]
	return nil
}
func (f *fakeStream) SendMsg(any) error            { f.sent++; return nil }
func (f *fakeStream) SendHeader(metadata.MD) error { f.sent++; return nil }
func (f *fakeStream) SetHeader(metadata.MD) error  { return nil }
func (f *fakeStream) SetTrailer(metadata.MD)       {}

func TestStreamHandlerCannotSendBeforeAuthentication(t *testing.T) {
	t.Parallel()
	interceptor := grpcauth.StreamServerInterceptor(testOptions(grpcauth.FromField("security_token")))
	newMsg := func() any { return dynamicpb.NewMessage(requestDesc) }
	info := &grpc.StreamServerInfo{FullMethod: methodChat, IsClientStream: true, IsServerStream: true}

	ss := &fakeStream{ctx: context.Background(), msgs: []string{aliceToken}}
	err := interceptor(nil, ss, info, func(_ any, s grpc.ServerStream) error {
		if err := s.SendMsg("early"); status.Code(err) != codes.Unauthenticated {
			t.Errorf("SendMsg() before the first RecvMsg = %v; want code Unauthenticated", err)
		}
		if err := s.SendHeader(nil); status.Code(err) != codes.Unauthenticated {
			t.Errorf("SendHeader() before the first RecvMsg = %v; want code Unauthenticated", err)
		}
		if _, ok := grpcauth.UserFrom(s.Context()); ok {
			t.Errorf("UserFrom(Context()) before the first RecvMsg = _, true; want false")
		}
		if err := s.RecvMsg(newMsg()); err != nil {
			return err
		}
		if u, ok := grpcauth.UserFrom(s.Context()); !ok || u.GetName() != "alice" {
			t.Errorf("UserFrom(Context()) after the first RecvMsg = %v, %v; want alice", u, ok)
		}
		return s.SendMsg("late")
	})
	if err != nil {
		t.Fatalf("interceptor() = %v; want nil", err)
	}
	if ss.sent != 1 {
		t.Errorf("messages reaching the transport = %d; want 1 (only after authentication)", ss.sent)
	}

	// A failed check sticks: later receives fail too.
	ss = &fakeStream{ctx: context.Background(), msgs: []string{bobToken, aliceToken}}
	_ = interceptor(nil, ss, info, func(_ any, s grpc.ServerStream) error {
		for i := 0; i < 2; i++ {
			if err := s.RecvMsg(newMsg()); status.Code(err) != codes.PermissionDenied {
				t.Errorf("RecvMsg() #%d after a denied first message = %v; want code PermissionDenied", i+1, err)
			}
		}
		if err := s.SendMsg("x"); status.Code(err) != codes.PermissionDenied {
			t.Errorf("SendMsg() after a denied first message = %v; want code PermissionDenied", err)
		}
		return nil
	})
	if ss.sent != 0 {
		t.Errorf("messages reaching the transport after a denial = %d; want 0", ss.sent)
	}
}
