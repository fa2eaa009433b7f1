package grpcauth

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/internal/observe"
)

// errNoMethod is the status of an AuthFunc called with a context that is
// not a server call's.
var errNoMethod = status.Error(codes.Unavailable, "grpcauth: AuthFunc: the context names no gRPC method")

// errNeedsMessage is the status of a call whose rule cannot be checked
// without the request message, through an AuthFunc, which never sees it.
var errNeedsMessage = status.Error(codes.Unavailable, "grpcauth: the server cannot check this method's calls; retry later")

// AuthFunc returns the Interceptor's check in the shape of
// go-grpc-middleware v2's auth.AuthFunc, func(ctx) (ctx, error), for a
// server that already chains that package's interceptors:
//
//	grpc.ChainUnaryInterceptor(logging..., auth.UnaryServerInterceptor(ic.AuthFunc()), ...)
//	grpc.ChainStreamInterceptor(logging..., auth.StreamServerInterceptor(ic.AuthFunc()), ...)
//
// The function takes the method from grpc.Method(ctx) and checks the call
// exactly as the interceptors do, with the same [Options] (rules, Skip,
// status codes, metrics, spans): on success it returns a child of ctx that
// carries the caller's user.Info (request.UserFrom) and, unless
// [Options.KeepAuthorizationMetadata] is set, no "authorization"
// metadata; on failure it returns nil and a status error, which
// go-grpc-middleware's auth interceptor returns to the caller verbatim.
// A context without a method (not a server call's) is codes.Unavailable.
//
// An AuthFunc never sees the request message, so it can check only the
// methods whose [Rule] needs none: the token in the metadata (Token nil,
// [FromMetadata], or any extractor whose FromMessage is false) and
// attributes that ignore the message ([Rule].AttributesIgnoreMessage).
// Any other rule fails closed: every call of its method is refused with
// codes.Unavailable, as any check that cannot be made, and the first one
// is logged as an error naming the method (later ones at -v=2). Serve such
// methods with [Interceptor.UnaryServerInterceptor] and
// [Interceptor.StreamServerInterceptor], which receive the message; the
// auth interceptor's selector can send each method to one or the other.
//
// Per-method skipping belongs in go-grpc-middleware's selector
// (selector.UnaryServerInterceptor(auth.UnaryServerInterceptor(ic.AuthFunc()),
// matcher)), as that package recommends; Options.Skip is honoured too (a
// skipped call gets ctx back unchanged, without an identity), so that one
// Options serves both shapes. A service that implements go-grpc-middleware's
// ServiceAuthFuncOverride replaces this check with its own for all of its
// methods: do not implement it on a service this protects.
//
// The function is safe for concurrent use. A nil or zero Interceptor's
// refuses every call with codes.Unavailable.
func (i *Interceptor) AuthFunc() func(ctx context.Context) (context.Context, error) {
	if i == nil || i.c == nil {
		return func(context.Context) (context.Context, error) { return nil, errNotConfigured }
	}
	c := i.c
	var logged sync.Map // methods whose rule needs the message, logged once
	return func(ctx context.Context) (context.Context, error) {
		method, ok := grpc.Method(ctx)
		if !ok || method == "" {
			c.metrics.Decision("grpc", observe.OutcomeUnavailable)
			return nil, errNoMethod
		}
		if c.skip.Match(method) {
			return ctx, nil
		}
		r, ok := c.rules[method]
		if !ok {
			c.metrics.Decision("grpc", observe.OutcomeDenied)
			return nil, errUnknownMethod
		}
		if r.needsMessage {
			c.metrics.Decision("grpc", observe.OutcomeUnavailable)
			const msg = "grpcauth: AuthFunc refused a call: its rule needs the request message, which an AuthFunc never sees; serve the method with the Interceptor's own interceptors"
			kv := []any{"method", method, "tokenFromMessage", !r.tokenInMetadata, "attributesReadMessage", !r.AttributesIgnoreMessage}
			if _, seen := logged.LoadOrStore(method, true); seen {
				klog.FromContext(ctx).V(2).Info(msg, kv...)
			} else {
				klog.FromContext(ctx).Error(nil, msg, kv...)
			}
			return nil, errNeedsMessage
		}
		return c.check(ctx, method, r, nil)
	}
}
