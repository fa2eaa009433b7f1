package grpcauth

import (
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/reviewauth/reviewauth/internal/observe"
)

// MaxHeldMessages is how many messages a stream handler may send before its
// first RecvMsg returns, when [Interceptor.StreamServerInterceptor] has to
// hold them (see there). Past it, SendMsg fails with codes.Internal.
const MaxHeldMessages = 16

// StreamServerInterceptor returns the stream interceptor: it authenticates
// and authorizes every streaming call that is not skipped. Nothing the
// handler sets or sends reaches a caller that the check refuses, and a
// refused caller gets the check's status and nothing else: no header or
// trailer metadata, no message. After the check, the stream's Context carries the identity
// (request.UserFrom). Unknown methods are denied before the handler runs.
// Status codes are those of the unary interceptor (see [Interceptor]).
//
// When the handler starts, and what it may do before its first RecvMsg
// returns, depends on what the check needs:
//
//   - The token is in the metadata ([Rule.Token] nil, [FromMetadata], or
//     any [TokenExtractor] whose FromMessage is false) and
//     the attributes do not read the message
//     ([Rule.AttributesIgnoreMessage]): the call is authenticated and
//     authorized before the handler starts. The handler may do anything.
//
//   - The check needs the first message (its token or its attributes come
//     from it), and the method's request type is in the protobuf registry
//     (protoregistry.GlobalFiles and GlobalTypes, where generated code
//     registers itself) and the call uses the proto codec: a token in the
//     metadata is authenticated first (a caller without a valid one is
//     refused at once); then the interceptor itself receives the first
//     message, completes the check, and only then starts the handler,
//     whose first RecvMsg is handed that message (a copy if the handler
//     receives into another type). No handler code runs for a refused
//     caller; the handler may do anything. A caller that closes its side
//     without sending a message is refused with codes.Unauthenticated; one
//     that sends nothing and keeps the stream open waits until its own
//     deadline or cancellation, as it would for any handler's RecvMsg.
//
//   - The check needs the first message, but its type cannot be found (an
//     unregistered or hand-built service, or another codec, such as JSON,
//     named by the call's content-subtype): the handler starts at once (a
//     token in the metadata has been authenticated by then) and its first
//     RecvMsg runs the check. Until that RecvMsg returns, the stream's
//     Context carries no identity and the interceptor holds what the
//     handler sets or sends: SetHeader, SendHeader and SetTrailer (on the
//     stream or through grpc.SetHeader, grpc.SendHeader and grpc.SetTrailer
//     on its Context) and up to [MaxHeldMessages] SendMsg calls succeed and
//     are held; they are sent, in order, once the check passes, and
//     dropped if it fails. Every later call then fails with the check's
//     status, which is also what the caller gets, whatever the handler
//     returns. A handler that returns without calling RecvMsg fails the
//     call with codes.Internal. Side effects are the handler's own: a
//     handler of such a method must not act on the caller's behalf before
//     its first RecvMsg has returned nil.
//
// A server that forces a non-proto codec with grpc.ForceServerCodec must
// register no descriptors for its methods, or decode proto messages.
func (i *Interceptor) StreamServerInterceptor() grpc.StreamServerInterceptor {
	if i == nil || i.c == nil {
		return func(any, grpc.ServerStream, *grpc.StreamServerInfo, grpc.StreamHandler) error {
			return errNotConfigured
		}
	}
	c := i.c
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if c.skip.Match(info.FullMethod) {
			return handler(srv, ss)
		}
		r, ok := c.rules[info.FullMethod]
		if !ok {
			c.metrics.Decision("grpc", observe.OutcomeDenied)
			return errUnknownMethod
		}
		if !r.needsMessage {
			ctx, err := c.check(ss.Context(), info.FullMethod, r, nil)
			if err != nil {
				return err
			}
			return handler(srv, &firstMessageStream{ServerStream: ss, ctx: ctx})
		}
		if mt := r.inputType(info.FullMethod); mt != nil && protoCodec(ss.Context()) {
			return c.serveAfterFirstMessage(srv, ss, info.FullMethod, r, mt, handler)
		}
		return c.serveHeld(srv, ss, info.FullMethod, r, handler)
	}
}

// inputType returns the request type of the rule's method, looking it up
// again if it was not registered when the interceptor was built.
func (r *rule) inputType(method string) protoreflect.MessageType {
	if p := r.input.Load(); p != nil {
		return *p
	}
	mt := inputType(method)
	if mt != nil {
		r.input.Store(&mt)
	}
	return mt
}

// inputType finds the request type of a method ("/pkg.Service/Method") in
// the protobuf registry, or returns nil.
func inputType(method string) protoreflect.MessageType {
	i := strings.LastIndexByte(method, '/')
	if i <= 1 || method[0] != '/' {
		return nil
	}
	name := protoreflect.FullName(method[1:i] + "." + method[i+1:])
	if !name.IsValid() {
		return nil
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return nil
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return nil
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	if err != nil {
		return nil
	}
	return mt
}

// protoCodec reports whether the call's content-type names the proto codec:
// "application/grpc", optionally with the subtype "proto".
func protoCodec(ctx context.Context) bool {
	v := incomingValue(ctx, "content-type")
	if len(v) == 0 {
		return true // grpc's default
	}
	rest, ok := strings.CutPrefix(strings.ToLower(v[0]), "application/grpc")
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	return (rest[0] == '+' || rest[0] == ';') && rest[1:] == "proto"
}

// serveAfterFirstMessage receives the stream's first message, completes the
// check with it, and only then starts the handler.
func (c *checker) serveAfterFirstMessage(srv any, ss grpc.ServerStream, method string, r *rule, mt protoreflect.MessageType, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	cctx, span := c.begin(ctx, method)
	var (
		u     user.Info
		token string
		err   error
	)
	if r.tokenInMetadata {
		if u, token, err = c.authenticate(cctx, r, nil); err != nil {
			return c.record(span, err)
		}
	}
	first := mt.New().Interface()
	if err := ss.RecvMsg(first); err != nil {
		if errors.Is(err, io.EOF) {
			return c.record(span, errNoFirstMessage)
		}
		abandon(span)
		return err
	}
	if !r.tokenInMetadata {
		if u, token, err = c.authenticate(cctx, r, first); err != nil {
			return c.record(span, err)
		}
	}
	if err := c.record(span, c.authorize(cctx, r, first, u, token)); err != nil {
		return err
	}
	return handler(srv, &firstMessageStream{ServerStream: ss, ctx: c.withUser(ctx, u), first: first})
}

// firstMessageStream is the stream of a checked call: its Context carries
// the identity, and its first RecvMsg, if first is set, hands over the
// message the interceptor received.
type firstMessageStream struct {
	grpc.ServerStream
	ctx   context.Context
	first proto.Message // nil once handed over
}

func (s *firstMessageStream) Context() context.Context { return s.ctx }

// RecvMsg is called by one goroutine at a time, as grpc.ServerStream
// requires.
func (s *firstMessageStream) RecvMsg(m any) error {
	if s.first == nil {
		return s.ServerStream.RecvMsg(m)
	}
	first := s.first
	s.first = nil
	return handOver(m, first)
}

// handOver makes dst a copy of src: a merge into the reset dst when both are
// of the same type, else through the wire format, as the codec would have
// decoded it.
func handOver(dst any, src proto.Message) error {
	d, ok := dst.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "grpcauth: the handler received into a %T, which is not a proto.Message", dst)
	}
	if reflect.TypeOf(d) == reflect.TypeOf(src) && d.ProtoReflect().Descriptor() == src.ProtoReflect().Descriptor() {
		proto.Reset(d)
		proto.Merge(d, src)
		return nil
	}
	b, err := proto.Marshal(src)
	if err == nil {
		err = proto.Unmarshal(b, d)
	}
	if err != nil {
		return status.Errorf(codes.Internal, "grpcauth: handing the first message to the handler: %v", err)
	}
	return nil
}

// The states of a heldStream.
const (
	pending int32 = iota // not checked yet: everything sent is held
	passed               // checked and allowed: everything goes through
	failed               // checked and refused: everything is dropped
)

var (
	errHeldTooMany    = status.Errorf(codes.Internal, "grpcauth: the handler sent more than %d messages before its first RecvMsg returned", MaxHeldMessages)
	errHeaderSent     = status.Error(codes.Internal, "grpcauth: the header was already sent")
	errHandlerNoCheck = status.Error(codes.Internal, "grpcauth: the handler returned before the stream's first message was checked")
)

// serveHeld starts the handler at once, with a stream whose first RecvMsg
// runs the check and which holds what the handler sends until then.
func (c *checker) serveHeld(srv any, ss grpc.ServerStream, method string, r *rule, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	h := &heldStream{ServerStream: ss, c: c, r: r, method: method, orig: grpc.ServerTransportStreamFromContext(ctx)}
	base := ctx
	if !c.keepMD {
		// The handler starts before the check: it must not see the
		// token either.
		base = stripAuthorization(base)
	}
	h.base = grpc.NewContextWithServerTransportStream(base, heldTransport{h})
	if r.tokenInMetadata {
		cctx, span := c.begin(ctx, method)
		u, token, err := c.authenticate(cctx, r, nil)
		if err != nil {
			return c.record(span, err)
		}
		h.cctx, h.span, h.user, h.token = cctx, span, u, token
	}
	err := handler(srv, h)
	return h.end(err)
}

// heldStream authenticates and authorizes a stream on its first received
// message, holding what the handler sends until then.
type heldStream struct {
	grpc.ServerStream
	c      *checker
	r      *rule
	method string
	orig   grpc.ServerTransportStream // the context's, may be nil
	base   context.Context            // the stream's context, with heldTransport

	// The authentication of a token in the metadata, done before the
	// handler started; cctx is the check's context, and span (guarded by
	// mu) its span until taken.
	cctx  context.Context
	span  trace.Span
	user  user.Info
	token string

	recvMu sync.Mutex // serializes the first RecvMsg

	state atomic.Int32 // pending, passed or failed
	mu    sync.Mutex   // guards the fields below, and the switch out of pending
	err   error        // the check's status once failed
	ctx   context.Context
	// Held until the check passes.
	header     metadata.MD
	headerSent bool
	trailer    metadata.MD
	msgs       []any
	flushErr   error // the error of sending what was held
}

func (s *heldStream) Context() context.Context {
	if s.state.Load() == passed {
		return s.ctx
	}
	return s.base
}

func (s *heldStream) RecvMsg(m any) error {
	switch s.state.Load() {
	case passed:
		return s.ServerStream.RecvMsg(m)
	case failed:
		return s.err
	}
	s.recvMu.Lock()
	defer s.recvMu.Unlock()
	switch s.state.Load() {
	case passed:
		return s.ServerStream.RecvMsg(m)
	case failed:
		return s.err
	}
	cctx, span, u, token := s.cctx, s.takeSpan(), s.user, s.token
	if !s.r.tokenInMetadata {
		cctx, span = s.c.begin(s.ServerStream.Context(), s.method)
	}
	if err := s.ServerStream.RecvMsg(m); err != nil {
		if errors.Is(err, io.EOF) {
			err = s.c.record(span, errNoFirstMessage)
		} else {
			abandon(span)
		}
		s.fail(err)
		return err
	}
	var err error
	if !s.r.tokenInMetadata {
		u, token, err = s.c.authenticate(cctx, s.r, m)
	}
	if err == nil {
		err = s.c.authorize(cctx, s.r, m, u, token)
	}
	if err := s.c.record(span, err); err != nil {
		s.fail(err)
		return err
	}
	s.pass(request.WithUser(s.base, u))
	return nil
}

// takeSpan returns the span of the check begun before the handler started,
// once: the caller ends it.
func (s *heldStream) takeSpan() trace.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	span := s.span
	s.span = nil
	return span
}

// fail drops everything held; every later call returns err.
func (s *heldStream) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state.Load() != pending {
		return
	}
	s.err = err
	s.header, s.trailer, s.msgs = nil, nil, nil
	s.state.Store(failed)
}

// pass sends what was held, in order, and lets everything through.
func (s *heldStream) pass(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state.Load() != pending {
		return // the handler has returned already
	}
	s.ctx = ctx
	var err error
	if s.header != nil {
		err = s.ServerStream.SetHeader(s.header)
	}
	if err == nil && s.headerSent {
		err = s.ServerStream.SendHeader(nil)
	}
	for _, m := range s.msgs {
		if err != nil {
			break
		}
		err = s.ServerStream.SendMsg(m)
	}
	if s.trailer != nil {
		s.ServerStream.SetTrailer(s.trailer)
	}
	s.flushErr = err
	s.header, s.trailer, s.msgs = nil, nil, nil
	s.state.Store(passed)
}

// hold runs f under the lock while the check is pending. done reports that
// the call ends here: f ran (and err is its error), the check failed (and
// err is its status), or, for a call that sends, sending what was held
// failed (and err is that error). Otherwise, once the check has passed,
// the call goes through.
func (s *heldStream) hold(sends bool, f func() error) (done bool, err error) {
	if s.state.Load() == passed && !sends {
		return false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state.Load() {
	case pending:
		return true, f()
	case failed:
		return true, s.err
	}
	return s.flushErr != nil, s.flushErr
}

func (s *heldStream) SetHeader(md metadata.MD) error {
	if done, err := s.hold(false, func() error {
		if s.headerSent {
			return errHeaderSent
		}
		s.header = metadata.Join(s.header, md)
		return nil
	}); done {
		return err
	}
	return s.ServerStream.SetHeader(md)
}

func (s *heldStream) SendHeader(md metadata.MD) error {
	if done, err := s.hold(true, func() error {
		if s.headerSent {
			return errHeaderSent
		}
		s.header, s.headerSent = metadata.Join(s.header, md), true
		return nil
	}); done {
		return err
	}
	return s.ServerStream.SendHeader(md)
}

func (s *heldStream) SetTrailer(md metadata.MD) {
	if done, _ := s.hold(false, func() error {
		s.trailer = metadata.Join(s.trailer, md)
		return nil
	}); !done {
		s.ServerStream.SetTrailer(md)
	}
}

func (s *heldStream) SendMsg(m any) error {
	if done, err := s.hold(true, func() error {
		if len(s.msgs) == MaxHeldMessages {
			return errHeldTooMany
		}
		s.msgs = append(s.msgs, m)
		return nil
	}); done {
		return err
	}
	return s.ServerStream.SendMsg(m)
}

// end turns the handler's result into the call's: the check's status if it
// failed, whatever the handler returned; an error if the handler never let
// the check run.
func (s *heldStream) end(handlerErr error) error {
	abandon(s.takeSpan()) // authenticated, but no first message was checked
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state.Load() {
	case passed:
		return handlerErr
	case failed:
		return s.err
	}
	s.header, s.trailer, s.msgs = nil, nil, nil
	s.err = errHandlerNoCheck
	s.state.Store(failed)
	return s.err
}

// heldTransport is the grpc.ServerTransportStream in a held stream's
// context, so that grpc.SetHeader, grpc.SendHeader and grpc.SetTrailer on
// the handler's context are held too.
type heldTransport struct{ s *heldStream }

func (t heldTransport) Method() string {
	if t.s.orig != nil {
		return t.s.orig.Method()
	}
	return t.s.method
}

func (t heldTransport) SetHeader(md metadata.MD) error  { return t.s.SetHeader(md) }
func (t heldTransport) SendHeader(md metadata.MD) error { return t.s.SendHeader(md) }
func (t heldTransport) SetTrailer(md metadata.MD) error {
	t.s.SetTrailer(md)
	return nil
}
