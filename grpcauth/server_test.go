package grpcauth_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	unionrequest "k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

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
	{name: "plain authentication error", token: echoToken, namespace: "ns", object: "a", want: codes.Unauthenticated},
	{name: "denied user", token: bobToken, namespace: "ns", object: "a", want: codes.PermissionDenied},
	{name: "denied object", token: aliceToken, namespace: "ns", object: "forbidden", want: codes.PermissionDenied},
	{name: "authorizer error", token: aliceToken, namespace: "ns", object: "boom", want: codes.Unavailable},
	{name: "missing name", token: aliceToken, namespace: "ns", object: "", want: codes.InvalidArgument},
	{name: "missing namespace", token: aliceToken, namespace: "", object: "a", want: codes.InvalidArgument},
}

// tokenPlaces are the places a rule can read the token from.
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
		// FromMetadata named explicitly: the stream interceptor must
		// recognise it as the default.
		name:    "metadata-explicit",
		extract: grpcauth.FromMetadata(),
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
	allow := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	})
	tests := []struct {
		name    string
		opts    grpcauth.Options
		wantErr []string // substrings of New's error
	}{
		{name: "no authenticator, no authorizer", opts: grpcauth.Options{Rules: map[string]grpcauth.Rule{methodGet: {Attributes: getThing}}},
			wantErr: []string{"Authenticator is required", "Authorizer is required"}},
		{name: "rule without attributes", opts: grpcauth.Options{Authenticator: fakeAuthn, Authorizer: allow,
			Rules: map[string]grpcauth.Rule{methodGet: {}}}, wantErr: []string{"has no Attributes"}},
		{name: "rule keyed by a service", opts: grpcauth.Options{Authenticator: fakeAuthn, Authorizer: allow,
			Rules: map[string]grpcauth.Rule{"/grpcauth.test.Svc/": {Attributes: getThing}}}, wantErr: []string{"not a full method name"}},
		{name: "rule keyed without a slash", opts: grpcauth.Options{Authenticator: fakeAuthn, Authorizer: allow,
			Rules: map[string]grpcauth.Rule{"grpcauth.test.Svc.Get": {Attributes: getThing}}}, wantErr: []string{"not a full method name"}},
		{name: "skip entry not clean", opts: grpcauth.Options{Authenticator: fakeAuthn, Authorizer: allow,
			Skip: []string{"/grpc.health.v1.Health//"}}, wantErr: []string{"Skip entry"}},
		{name: "skip entry with a star", opts: grpcauth.Options{Authenticator: fakeAuthn, Authorizer: allow,
			Skip: []string{"/grpc.health.v1.Health/*"}}, wantErr: []string{"Skip entry"}},
	}
	for _, tt := range tests {
		ic, err := grpcauth.New(tt.opts)
		if err == nil || ic != nil {
			t.Errorf("%s: New() = %v, %v; want an error", tt.name, ic, err)
			continue
		}
		for _, w := range tt.wantErr {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: New() = %v; want an error mentioning %q", tt.name, err, w)
			}
		}
	}
	if _, err := grpcauth.New(testOptions(nil)); err != nil {
		t.Errorf("New(testOptions()) = %v; want nil", err)
	}

	// An Interceptor New did not build refuses every call.
	var zero grpcauth.Interceptor
	var none *grpcauth.Interceptor
	for _, ic := range []*grpcauth.Interceptor{&zero, none} {
		_, err := ic.UnaryServerInterceptor()(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: methodGet}, func(context.Context, any) (any, error) {
			t.Error("handler called")
			return nil, nil
		})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("zero Interceptor, unary = %v; want code Unavailable", err)
		}
		err = ic.StreamServerInterceptor()(nil, &fakeStream{ctx: t.Context()}, &grpc.StreamServerInfo{FullMethod: methodChat}, func(any, grpc.ServerStream) error {
			t.Error("handler called")
			return nil
		})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("zero Interceptor, stream = %v; want code Unavailable", err)
		}
	}
}

// fakeStream is a grpc.ServerStream that replays msgs and records what
// reaches it.
type fakeStream struct {
	grpc.ServerStream
	ctx  context.Context
	msgs []string // tokens of the messages to receive
	ops  []string // what reached the stream, in order
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
func (f *fakeStream) SendMsg(m any) error          { f.ops = append(f.ops, fmt.Sprint(m)); return nil }
func (f *fakeStream) SendHeader(metadata.MD) error { f.ops = append(f.ops, "send-header"); return nil }
func (f *fakeStream) SetHeader(metadata.MD) error  { f.ops = append(f.ops, "set-header"); return nil }
func (f *fakeStream) SetTrailer(metadata.MD)       { f.ops = append(f.ops, "set-trailer") }

// TestStreamHeldUntilChecked drives the interceptor directly on a method
// whose request type is not in the protobuf registry: the handler starts
// before the check, and what it sends is held until its first RecvMsg has
// passed the check, and dropped if it failed.
//
// It replaces TestStreamHandlerCannotSendBeforeAuthentication, which
// expected SendMsg and SendHeader to fail before the first RecvMsg: they
// are held now (and SetHeader and SetTrailer, which went straight through,
// too), and a registered method does not start its handler before the
// check at all (TestStreamNothingReachesARefusedCaller).
func TestStreamHeldUntilChecked(t *testing.T) {
	t.Parallel()
	interceptor := mustNew(t, testOptions(grpcauth.FromField("security_token"))).StreamServerInterceptor()
	newMsg := func() any { return dynamicpb.NewMessage(requestDesc) }
	info := &grpc.StreamServerInfo{FullMethod: "/" + unregisteredPkg + ".Svc/Chat", IsClientStream: true, IsServerStream: true}
	early := func(s grpc.ServerStream, n int) {
		s.SetTrailer(nil)
		if err := s.SetHeader(nil); err != nil {
			t.Errorf("SetHeader() before the first RecvMsg = %v; want nil (held)", err)
		}
		if err := s.SendHeader(nil); err != nil {
			t.Errorf("SendHeader() before the first RecvMsg = %v; want nil (held)", err)
		}
		for i := range n {
			if err := s.SendMsg(fmt.Sprintf("early-%d", i)); err != nil {
				t.Errorf("SendMsg() #%d before the first RecvMsg = %v; want nil (held)", i+1, err)
			}
		}
	}

	tests := []struct {
		name    string
		tokens  []string // of the messages the caller sends
		handler func(t *testing.T, s grpc.ServerStream) error
		want    codes.Code
		ops     string // what reached the transport
	}{{
		name:   "allowed",
		tokens: []string{aliceToken},
		handler: func(t *testing.T, s grpc.ServerStream) error {
			early(s, 2)
			if _, ok := request.UserFrom(s.Context()); ok {
				t.Errorf("UserFrom(Context()) before the first RecvMsg = _, true; want false")
			}
			if err := s.RecvMsg(newMsg()); err != nil {
				return err
			}
			if u, ok := request.UserFrom(s.Context()); !ok || u.GetName() != "alice" {
				t.Errorf("UserFrom(Context()) after the first RecvMsg = %v, %v; want alice", u, ok)
			}
			return s.SendMsg("late")
		},
		want: codes.OK,
		ops:  "set-header,send-header,early-0,early-1,set-trailer,late",
	}, {
		name:   "denied sticks and drops everything",
		tokens: []string{bobToken, aliceToken},
		handler: func(t *testing.T, s grpc.ServerStream) error {
			early(s, 2)
			for i := range 2 {
				if err := s.RecvMsg(newMsg()); status.Code(err) != codes.PermissionDenied {
					t.Errorf("RecvMsg() #%d after a denied first message = %v; want code PermissionDenied", i+1, err)
				}
			}
			if err := s.SendMsg("x"); status.Code(err) != codes.PermissionDenied {
				t.Errorf("SendMsg() after a denied first message = %v; want code PermissionDenied", err)
			}
			if err := s.SetHeader(nil); status.Code(err) != codes.PermissionDenied {
				t.Errorf("SetHeader() after a denied first message = %v; want code PermissionDenied", err)
			}
			s.SetTrailer(nil)
			return nil // the call fails anyway
		},
		want: codes.PermissionDenied,
	}, {
		name:   "handler returns without receiving",
		tokens: []string{aliceToken},
		handler: func(t *testing.T, s grpc.ServerStream) error {
			early(s, 1)
			return nil
		},
		want: codes.Internal,
	}, {
		name:   "no first message",
		tokens: nil,
		handler: func(t *testing.T, s grpc.ServerStream) error {
			early(s, 1)
			return s.RecvMsg(newMsg())
		},
		want: codes.Unauthenticated,
	}, {
		name:   "MaxHeldMessages held",
		tokens: []string{aliceToken},
		handler: func(t *testing.T, s grpc.ServerStream) error {
			for i := range grpcauth.MaxHeldMessages {
				if err := s.SendMsg(i); err != nil {
					t.Errorf("SendMsg() #%d = %v; want nil", i+1, err)
				}
			}
			return s.RecvMsg(newMsg())
		},
		want: codes.OK,
		ops:  "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
	}, {
		name:   "MaxHeldMessages+1 fails",
		tokens: []string{aliceToken},
		handler: func(t *testing.T, s grpc.ServerStream) error {
			for i := range grpcauth.MaxHeldMessages {
				_ = s.SendMsg(i)
			}
			if err := s.SendMsg(grpcauth.MaxHeldMessages); status.Code(err) != codes.Internal {
				t.Errorf("SendMsg() #%d = %v; want code Internal", grpcauth.MaxHeldMessages+1, err)
			}
			return s.RecvMsg(newMsg())
		},
		want: codes.OK,
		ops:  "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ss := &fakeStream{ctx: context.Background(), msgs: tt.tokens}
			err := interceptor(nil, ss, info, func(_ any, s grpc.ServerStream) error { return tt.handler(t, s) })
			if status.Code(err) != tt.want {
				t.Errorf("interceptor() = %v; want code %v", err, tt.want)
			}
			if got := strings.Join(ss.ops, ","); got != tt.ops {
				t.Errorf("reached the transport: %q; want %q", got, tt.ops)
			}
		})
	}
}

// TestStreamHeldHandlerDoesNotSeeToken: a handler that starts before the
// check finds no "authorization" metadata in its context, before or after
// its first RecvMsg.
func TestStreamHeldHandlerDoesNotSeeToken(t *testing.T) {
	t.Parallel()
	interceptor := mustNew(t, testOptions(nil)).StreamServerInterceptor()
	info := &grpc.StreamServerInfo{FullMethod: "/" + unregisteredPkg + ".Svc/Chat", IsClientStream: true, IsServerStream: true}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+aliceToken))
	ss := &fakeStream{ctx: ctx, msgs: []string{""}}
	err := interceptor(nil, ss, info, func(_ any, s grpc.ServerStream) error {
		if v := metadata.ValueFromIncomingContext(s.Context(), "authorization"); len(v) != 0 {
			t.Errorf("authorization metadata before the first RecvMsg = %q; want none", v)
		}
		if err := s.RecvMsg(dynamicpb.NewMessage(requestDesc)); err != nil {
			return err
		}
		if v := metadata.ValueFromIncomingContext(s.Context(), "authorization"); len(v) != 0 {
			t.Errorf("authorization metadata after the first RecvMsg = %q; want none", v)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("interceptor() = %v", err)
	}
}

// TestAuthenticatedGroupMatchesAPIServer: whatever the token authenticator
// answers, the user the authorizer and the handler see is the one
// k8s.io/apiserver's union and AuthenticatedGroupAdder make of it, as
// httpauth does: system:authenticated added to every user but
// system:anonymous and users already in system:authenticated or
// system:unauthenticated.
func TestAuthenticatedGroupMatchesAPIServer(t *testing.T) {
	t.Parallel()
	for _, u := range []*user.DefaultInfo{
		{Name: "alice"},
		{Name: "alice", UID: "u-1", Groups: []string{"team-a"}, Extra: map[string][]string{"scopes": {"a"}}},
		{Name: "bob", Groups: []string{user.AllAuthenticated, "team-b"}},
		{Name: "carol", Groups: []string{user.AllUnauthenticated}},
		{Name: user.Anonymous},
		{Name: "system:node:node-1", Groups: []string{user.NodesGroup}},
	} {
		answer := &authenticator.Response{User: u}
		adder := group.NewAuthenticatedGroupAdder(unionrequest.New(authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
			return answer, true, nil
		})))
		resp, _, _ := adder.AuthenticateRequest(httptest.NewRequest("GET", "/", nil))
		want := *toDefaultInfo(resp.User)

		var asked user.Info
		ic, err := grpcauth.New(grpcauth.Options{
			Authenticator: authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) { return answer, true, nil }),
			Authorizer: authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				asked = a.GetUser()
				return authorizer.DecisionAllow, "", nil
			}),
			Rules: map[string]grpcauth.Rule{methodNop: {AttributesIgnoreMessage: true, Attributes: func(_ context.Context, _ any, u user.Info) ([]authorizer.Attributes, error) {
				return []authorizer.Attributes{&authorizer.AttributesRecord{User: u, Verb: "get", Path: "/"}}, nil
			}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		var seen user.Info
		incoming := metadata.NewIncomingContext(t.Context(), metadata.Pairs("authorization", "Bearer "+aliceToken))
		_, err = ic.UnaryServerInterceptor()(incoming, nil, &grpc.UnaryServerInfo{FullMethod: methodNop},
			func(ctx context.Context, _ any) (any, error) {
				seen, _ = request.UserFrom(ctx)
				return nil, nil
			})
		if err != nil {
			t.Fatalf("%+v: call = %v", u, err)
		}
		if got := *toDefaultInfo(asked); !reflect.DeepEqual(got, want) {
			t.Errorf("%+v: the authorizer saw %+v; apiserver's group adder gives %+v", u, got, want)
		}
		if got := *toDefaultInfo(seen); !reflect.DeepEqual(got, want) {
			t.Errorf("%+v: the handler saw %+v; apiserver's group adder gives %+v", u, got, want)
		}
	}
}

func toDefaultInfo(u user.Info) *user.DefaultInfo {
	if u == nil {
		return &user.DefaultInfo{}
	}
	return &user.DefaultInfo{Name: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: u.GetExtra()}
}

// TestUnavailableLogPaced: calls answered Unavailable (an outage, or calls
// that time out waiting for a review under a flood) are logged at most
// UnavailableLogBurst at once and one per UnavailableLogInterval after
// that at the default verbosity, and every one from -v=2, as httpauth logs
// its 503s. Not parallel: it captures the global klog.
func TestUnavailableLogPaced(t *testing.T) {
	const calls = 100
	outage := callCase{name: "outage", token: outageToken, namespace: "ns", object: "a", want: codes.Unavailable}
	for _, tt := range []struct {
		name  string
		flags map[string]string
		// paced: at most the burst plus one a second; else every call.
		paced bool
	}{
		{name: "default verbosity", flags: map[string]string{}, paced: true},
		{name: "-v=1", flags: map[string]string{"v": "1"}, paced: true},
		{name: "-v=2", flags: map[string]string{"v": "2"}, paced: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Each line once, not once per severity file (all of them
			// the captured output).
			tt.flags["one_output"] = "true"
			out := globalKlog(t, tt.flags)
			place := tokenPlaces[0]
			conn := serve(t, testOptions(place.extract))
			start := time.Now()
			for range calls {
				ctx, req := place.call(t.Context(), outage)
				err := conn.Invoke(ctx, methodGet, req, new(wrapperspb.StringValue))
				checkStatus(t, "Get()", err, outage)
			}
			elapsed := time.Since(start)
			klog.Flush()
			got := strings.Count(out.String(), "could not authenticate or authorize the call")
			if strings.Contains(out.String(), outageToken) {
				t.Error("the log holds the token")
			}
			if !tt.paced {
				if got != calls {
					t.Errorf("logged %d of %d calls answered Unavailable; want every one", got, calls)
				}
				return
			}
			// One more line for each interval the calls took, and one for
			// the interval they started in.
			most := grpcauth.UnavailableLogBurst + int(elapsed/grpcauth.UnavailableLogInterval) + 1
			if got < grpcauth.UnavailableLogBurst || got > most {
				t.Errorf("logged %d of %d calls answered Unavailable in %v; want %d to %d", got, calls, elapsed, grpcauth.UnavailableLogBurst, most)
			}
		})
	}
}
