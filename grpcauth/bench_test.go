package grpcauth_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
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
			ic := grpcauth.UnaryServerInterceptor(opts)
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
