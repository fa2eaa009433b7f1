package grpcauth_test

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/grpcauth"
)

// BenchmarkInterceptor measures a unary call (Nop, an empty answer) over
// bufconn without the interceptor (none) and with it, backed by the
// reviewauth authenticator and authorizer with warm caches, default options
// (reviewauth). The difference is the cost the interceptor adds per call.
// Both calls carry the same metadata, token included, and request.
func BenchmarkInterceptor(b *testing.B) {
	s := authtest.Start(b)
	s.SetPolicy(allowBackup)
	tok := s.MintToken(backupSA, []string{audience}, time.Now().Add(time.Hour))

	opts := realOptions(b, s, nil)
	opts.Rules[methodNop] = opts.Rules[methodGet]
	for _, bc := range []struct {
		name string
		opts *grpcauth.Options
	}{
		{name: "none", opts: nil},
		{name: "reviewauth", opts: &opts},
	} {
		b.Run(bc.name, func(b *testing.B) {
			conn := serveBench(b, bc.opts)
			ctx := withBearer(b.Context(), tok)
			req := newRequest("", "default", "a")
			resp := new(wrapperspb.StringValue)
			// Warm the caches (and the connection).
			if err := conn.Invoke(ctx, methodNop, req, resp); err != nil {
				b.Fatalf("Nop() = %v", err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := conn.Invoke(ctx, methodNop, req, resp); err != nil {
					b.Fatalf("Nop() = %v", err)
				}
			}
			b.StopTimer()
			if bc.opts != nil {
				if n := s.Count(authtest.TokenReviews); n != 1 {
					b.Errorf("TokenReviews = %d; want 1 (warm cache)", n)
				}
			}
		})
	}
}

// BenchmarkUnaryInterceptorDirect measures the interceptor alone, called
// directly with a no-op handler, so that transport noise does not hide its
// cost: the reviewauth authenticator and authorizer with warm caches.
func BenchmarkUnaryInterceptorDirect(b *testing.B) {
	s := authtest.Start(b)
	s.SetPolicy(allowBackup)
	tok := s.MintToken(backupSA, []string{audience}, time.Now().Add(time.Hour))
	md := metadata.Pairs("authorization", "Bearer "+tok, "user-agent", "grpc-go/1.85.0",
		"content-type", "application/grpc", ":authority", "bufnet")
	for _, bc := range []struct {
		name string
		keep bool
		from grpcauth.TokenExtractor
	}{
		{name: "metadata", keep: false},
		{name: "metadata-keep", keep: true},
		{name: "message", from: grpcauth.FromField("security_token")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			opts := realOptions(b, s, bc.from)
			opts.KeepAuthorizationMetadata = bc.keep
			ic := mustNew(b, opts).UnaryServerInterceptor()
			ctx := metadata.NewIncomingContext(b.Context(), md)
			req := newRequest("", "default", "a")
			if bc.from != nil {
				ctx = metadata.NewIncomingContext(b.Context(), metadata.Pairs("user-agent", "grpc-go/1.85.0"))
				req = newRequest(tok, "default", "a")
			}
			info := &grpc.UnaryServerInfo{FullMethod: methodGet}
			handler := func(context.Context, any) (any, error) { return nil, nil }
			if _, err := ic(ctx, req, info, handler); err != nil {
				b.Fatalf("interceptor() = %v", err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ic(ctx, req, info, handler); err != nil {
					b.Fatalf("interceptor() = %v", err)
				}
			}
		})
	}
}

// BenchmarkStreamInterceptor measures a server-streaming call (List: one
// request, three answers) over bufconn, without the interceptor (none) and
// with it, backed by the reviewauth authenticator and authorizer with warm
// caches. The variants are the three ways a stream is checked: the token in
// the metadata with attributes that ignore the message (checked before the
// handler starts), the token in the message of a method whose type is in
// the protobuf registry (the interceptor receives the first message and
// hands it over), and the same method of an unregistered service (the
// handler starts at once and its output is held until its first RecvMsg).
func BenchmarkStreamInterceptor(b *testing.B) {
	s := authtest.Start(b)
	s.SetPolicy(allowBackup)
	tok := s.MintToken(backupSA, []string{audience}, time.Now().Add(time.Hour))
	fixed := grpcauth.Resource{Verb: "get", APIGroup: "example.com", Resource: "things", Namespace: "default", Name: "a"}.Attributes
	unregisteredList := "/" + unregisteredPkg + ".Svc/List"
	for _, bc := range []struct {
		name   string
		opts   func() *grpcauth.Options
		method string
		md     bool // token in the metadata, else in the message
	}{
		{name: "none", method: methodList, opts: func() *grpcauth.Options { return nil }},
		{name: "metadata-before-handler", method: methodList, md: true, opts: func() *grpcauth.Options {
			o := realOptions(b, s, nil)
			o.Rules[methodList] = grpcauth.Rule{Attributes: fixed, AttributesIgnoreMessage: true}
			return &o
		}},
		{name: "message-registry", method: methodList, opts: func() *grpcauth.Options {
			o := realOptions(b, s, grpcauth.FromField("security_token"))
			return &o
		}},
		{name: "message-held", method: unregisteredList, opts: func() *grpcauth.Options {
			o := realOptions(b, s, grpcauth.FromField("security_token"))
			o.Rules[unregisteredList] = o.Rules[methodList]
			return &o
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			conn := serveBench(b, bc.opts())
			ctx, req := b.Context(), newRequest(tok, "default", "a")
			if bc.md {
				ctx, req = withBearer(ctx, tok), newRequest("", "default", "a")
			}
			desc := &grpc.StreamDesc{ServerStreams: true}
			resp := new(wrapperspb.StringValue)
			call := func() {
				cs, err := conn.NewStream(ctx, desc, bc.method)
				if err != nil {
					b.Fatalf("NewStream() = %v", err)
				}
				if err := cs.SendMsg(req); err != nil {
					b.Fatalf("SendMsg() = %v", err)
				}
				_ = cs.CloseSend()
				n := 0
				for cs.RecvMsg(resp) == nil {
					n++
				}
				if n != 3 {
					b.Fatalf("List() answered %d messages; want 3", n)
				}
			}
			call() // warm the caches and the connection
			b.ReportAllocs()
			for b.Loop() {
				call()
			}
		})
	}
}

// benchStream is a server-streaming grpc.ServerStream whose one request is
// req, and which discards what is sent.
type benchStream struct {
	grpc.ServerStream
	ctx  context.Context
	req  proto.Message
	done bool
}

func (s *benchStream) Context() context.Context     { return s.ctx }
func (s *benchStream) SendMsg(any) error            { return nil }
func (s *benchStream) SetHeader(metadata.MD) error  { return nil }
func (s *benchStream) SendHeader(metadata.MD) error { return nil }
func (s *benchStream) SetTrailer(metadata.MD)       {}
func (s *benchStream) RecvMsg(m any) error {
	if s.done {
		return io.EOF
	}
	s.done = true
	proto.Merge(m.(proto.Message), s.req)
	return nil
}

// BenchmarkStreamInterceptorDirect measures the stream interceptor alone,
// called directly on a server-streaming call (one request, three answers)
// with a stream that costs next to nothing, so that transport noise does not
// hide its cost. The variants are those of BenchmarkStreamInterceptor, plus
// the token in the metadata with attributes from the message
// (metadata-registry), and the same with a generated request type
// (grpc's HealthCheckRequest, the token in its service field) instead of
// the test's dynamic one; none calls the handler without the interceptor.
func BenchmarkStreamInterceptorDirect(b *testing.B) {
	s := authtest.Start(b)
	s.SetPolicy(allowBackup)
	tok := s.MintToken(backupSA, []string{audience}, time.Now().Add(time.Hour))
	mdCtx := metadata.NewIncomingContext(b.Context(), metadata.Pairs("authorization", "Bearer "+tok, "user-agent", "grpc-go/1.85.0",
		"content-type", "application/grpc", ":authority", "bufnet"))
	msgCtx := metadata.NewIncomingContext(b.Context(), metadata.Pairs("user-agent", "grpc-go/1.85.0",
		"content-type", "application/grpc", ":authority", "bufnet"))
	fixed := grpcauth.Resource{Verb: "get", APIGroup: "example.com", Resource: "things", Namespace: "default", Name: "a"}.Attributes
	unregisteredList := "/" + unregisteredPkg + ".Svc/List"
	handler := func(newMsg func() any) grpc.StreamHandler {
		return func(_ any, ss grpc.ServerStream) error {
			if err := ss.RecvMsg(newMsg()); err != nil {
				return err
			}
			for range 3 {
				if err := ss.SendMsg(nil); err != nil {
					return err
				}
			}
			return nil
		}
	}
	dynamic := func() any { return dynamicpb.NewMessage(requestDesc) }
	generated := func() any { return new(healthpb.HealthCheckRequest) }
	fromService := func() grpcauth.Rule {
		return grpcauth.Rule{Token: grpcauth.FromField("service"), Attributes: fixed}
	}
	for _, bc := range []struct {
		name   string
		rule   func() grpcauth.Rule // nil: no interceptor
		method string
		md     bool
		gen    bool // the generated HealthCheckRequest, its token in "service"
	}{
		{name: "none", method: methodList},
		{name: "metadata-before-handler", method: methodList, md: true, rule: func() grpcauth.Rule {
			return grpcauth.Rule{Attributes: fixed, AttributesIgnoreMessage: true}
		}},
		{name: "metadata-registry", method: methodList, md: true, rule: func() grpcauth.Rule {
			return grpcauth.Rule{Attributes: getThing}
		}},
		{name: "message-registry", method: methodList, rule: func() grpcauth.Rule {
			return grpcauth.Rule{Token: grpcauth.FromField("security_token"), Attributes: getThing}
		}},
		{name: "message-held", method: unregisteredList, rule: func() grpcauth.Rule {
			return grpcauth.Rule{Token: grpcauth.FromField("security_token"), Attributes: getThing}
		}},
		{name: "generated-none", method: healthpb.Health_Watch_FullMethodName, gen: true},
		{name: "generated-message-registry", method: healthpb.Health_Watch_FullMethodName, gen: true, rule: fromService},
		{name: "generated-message-held", method: "/grpcauth.unregistered.Health/Watch", gen: true, rule: fromService},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var req proto.Message = newRequest(tok, "default", "a")
			ctx, h := msgCtx, handler(dynamic)
			switch {
			case bc.md:
				ctx, req = mdCtx, newRequest("", "default", "a")
			case bc.gen:
				req, h = &healthpb.HealthCheckRequest{Service: tok}, handler(generated)
			}
			info := &grpc.StreamServerInfo{FullMethod: bc.method, IsServerStream: true}
			run := func(ss grpc.ServerStream) error { return h(nil, ss) }
			if bc.rule != nil {
				opts := realOptions(b, s, nil)
				opts.Rules[bc.method] = bc.rule()
				opts.Skip = nil // health is checked here
				ic := mustNew(b, opts).StreamServerInterceptor()
				run = func(ss grpc.ServerStream) error { return ic(nil, ss, info, h) }
			}
			ss := &benchStream{ctx: ctx, req: req}
			if err := run(ss); err != nil {
				b.Fatalf("interceptor() = %v", err)
			}
			b.ReportAllocs()
			for b.Loop() {
				ss.done = false
				if err := run(ss); err != nil {
					b.Fatalf("interceptor() = %v", err)
				}
			}
		})
	}
}
