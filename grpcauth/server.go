package grpcauth

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/internal/observe"
	"github.com/reviewauth/reviewauth/metrics"
)

// HealthAndReflection lists the method prefixes of the standard gRPC health
// and reflection services. Put it in [Options.Skip] to serve them without
// authentication, as probes and tooling expect.
var HealthAndReflection = []string{
	"/grpc.health.v1.Health/",
	"/grpc.reflection.v1.ServerReflection/",
	"/grpc.reflection.v1alpha.ServerReflection/",
}

// Options configures [UnaryServerInterceptor] and [StreamServerInterceptor].
// One Options value is meant to be shared by both, so that unary and streaming
// methods obey the same rules.
//
// The zero value denies every call: it has no rules, so every method is
// unknown. Options must not be modified after it has been passed to an
// interceptor constructor.
type Options struct {
	// Authenticator checks the bearer token of a call. It is typically an
	// *authn.Authenticator, configured with the audience this server
	// accepts. When nil, every call that needs a check fails with
	// codes.Unavailable (fail closed); [Options.Validate] reports it.
	Authenticator authenticator.Token

	// Authorizer decides every attribute set a [Rule] builds. It is
	// typically an *authz.Authorizer, possibly combined with authz.All.
	// When nil, every call that needs a check fails with codes.Unavailable.
	Authorizer authorizer.UnconditionalAuthorizer

	// Rules maps a full method name ("/package.Service/Method") to its rule.
	// A method without a rule, and not skipped, is denied with
	// codes.PermissionDenied before its token is even looked at.
	Rules map[string]Rule

	// Skip lists methods served without authentication or authorization.
	// An entry ending in "/" is a service prefix ("/grpc.health.v1.Health/");
	// any other entry is a full method name. Nil skips nothing; use
	// [HealthAndReflection] for the usual probes. Skip is consulted before
	// Rules.
	Skip []string

	// KeepAuthorizationMetadata keeps the "authorization" entry in the
	// incoming metadata seen by the handler. By default (false) it is
	// removed once the call is authenticated, as the Kubernetes API server
	// does with the Authorization header, so that a handler cannot log or
	// forward the caller's token by accident.
	KeepAuthorizationMetadata bool

	// Metrics, if not nil, counts every checked call in
	// reviewauth_decisions_total{transport="grpc"} by outcome.
	Metrics *metrics.Metrics

	// TracerProvider, if not nil, wraps every check in a span
	// "reviewauth.grpcauth" with the method and the outcome; the
	// authenticator's and authorizer's spans nest inside it. Nil means no
	// spans, at no cost.
	TracerProvider trace.TracerProvider
}

// TracerName is the instrumentation name of the spans grpcauth creates.
const TracerName = "github.com/reviewauth/reviewauth/grpcauth"

// Rule says how the calls of one method are authenticated and authorized.
type Rule struct {
	// Token finds the bearer token of a call. Nil means [FromMetadata]: the
	// "authorization: Bearer <token>" metadata entry. A streaming call whose
	// token is in the metadata (Token nil or [FromMetadata]) is
	// authenticated before its handler starts; any other extractor is given
	// the stream's first message (see [StreamServerInterceptor]).
	Token TokenExtractor

	// Attributes builds the attribute sets to authorize from the request
	// message and the authenticated user. Every set must be allowed (All
	// semantics). An error matching [ErrInvalidArgument] fails the call
	// with codes.InvalidArgument; any other error is mapped like a review
	// error. Nil, or a builder that returns no sets, denies every call:
	// a rule must say what it authorizes.
	Attributes AttributesFunc

	// AttributesIgnoreMessage declares that Attributes does not read the
	// request message: it is then always called with a nil req, on unary
	// and streaming calls alike. With the token in the metadata too (Token
	// nil or [FromMetadata]), a streaming call is then authenticated and
	// authorized before its handler starts, without waiting for a message.
	// False, the default, suits [Resource] and every builder that reads a
	// field of the request.
	AttributesIgnoreMessage bool
}

// TokenExtractor returns the bearer token carried by a call, and false when
// there is none. req is the request message: the unary request, or the first
// message of a stream. A TokenExtractor must be safe for concurrent use.
type TokenExtractor func(ctx context.Context, req any) (token string, ok bool)

// AttributesFunc builds the attribute sets that must all be allowed for a
// call made by u with request message req. It returns an error matching
// [ErrInvalidArgument] when a field it needs is missing or malformed. An
// AttributesFunc must be safe for concurrent use.
type AttributesFunc func(ctx context.Context, req any, u user.Info) ([]authorizer.Attributes, error)

// Validate reports configuration mistakes that would make every checked call
// fail: a nil Authenticator or Authorizer, or a rule with no Attributes.
func (o Options) Validate() error {
	var errs []error
	if o.Authenticator == nil {
		errs = append(errs, errors.New("grpcauth: Options.Authenticator is nil"))
	}
	if o.Authorizer == nil {
		errs = append(errs, errors.New("grpcauth: Options.Authorizer is nil"))
	}
	for m, r := range o.Rules {
		if r.Attributes == nil {
			errs = append(errs, errors.New("grpcauth: rule for "+m+" has no Attributes"))
		}
	}
	return errors.Join(errs...)
}

// UserFrom returns the identity that the interceptors authenticated, from
// the context of a handler. It is [request.UserFrom]; ok is false for a
// skipped method.
func UserFrom(ctx context.Context) (user.Info, bool) {
	return request.UserFrom(ctx)
}

// UnaryServerInterceptor returns an interceptor that authenticates and
// authorizes every unary call according to opts before the handler runs, and
// puts the identity in the handler's context (see [UserFrom]). It composes
// with grpc.ChainUnaryInterceptor and with go-grpc-middleware's selector.
//
// Failures end the call with codes.PermissionDenied (unknown method, or
// denied), codes.Unauthenticated (no token, or a rejected one),
// codes.InvalidArgument (a field needed for authorization is missing) or
// codes.Unavailable (the check could not be made). Status messages never
// contain the token. The interceptor is safe for concurrent use.
func UnaryServerInterceptor(opts Options) grpc.UnaryServerInterceptor {
	c := newChecker(opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if c.skipped(info.FullMethod) {
			return handler(ctx, req)
		}
		r, ok := c.rules[info.FullMethod]
		if !ok {
			c.metrics.Decision("grpc", observe.OutcomeDenied)
			return nil, errUnknownMethod
		}
		ctx, err := c.check(ctx, info.FullMethod, r, req)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

var (
	errUnknownMethod  = status.Error(codes.PermissionDenied, "grpcauth: method is not allowed")
	errNoToken        = status.Error(codes.Unauthenticated, "grpcauth: no bearer token")
	errRejected       = status.Error(codes.Unauthenticated, "grpcauth: invalid bearer token")
	errNoFirstMessage = status.Error(codes.Unauthenticated, "grpcauth: the stream ended before a message could be checked")
)

type checker struct {
	authn    authenticator.Token
	authz    authorizer.UnconditionalAuthorizer
	rules    map[string]*rule
	exact    map[string]struct{}
	prefixes []string
	keepMD   bool
	metrics  *observe.Recorder
	tracer   trace.Tracer
}

// rule is a Rule with what the stream interceptor needs to know about it,
// worked out once.
type rule struct {
	Rule
	// tokenInMetadata: the token is read from the metadata, so the call
	// can be authenticated before any message arrives.
	tokenInMetadata bool
	// needsMessage: the check needs the stream's first message.
	needsMessage bool
	// input is the method's request type from the protobuf registry,
	// nil until found.
	input atomic.Pointer[protoreflect.MessageType]
}

func newChecker(o Options) *checker {
	c := &checker{
		authn:   o.Authenticator,
		authz:   o.Authorizer,
		rules:   make(map[string]*rule, len(o.Rules)),
		exact:   map[string]struct{}{},
		keepMD:  o.KeepAuthorizationMetadata,
		metrics: observe.Of(o.Metrics),
	}
	if o.TracerProvider != nil {
		c.tracer = o.TracerProvider.Tracer(TracerName)
	}
	for m, r := range o.Rules {
		cr := &rule{Rule: r, tokenInMetadata: r.Token == nil || isFromMetadata(r.Token)}
		cr.needsMessage = !cr.tokenInMetadata || !r.AttributesIgnoreMessage
		if mt := inputType(m); mt != nil {
			cr.input.Store(&mt)
		}
		c.rules[m] = cr
	}
	for _, s := range o.Skip {
		if strings.HasSuffix(s, "/") {
			c.prefixes = append(c.prefixes, s)
		} else {
			c.exact[s] = struct{}{}
		}
	}
	return c
}

// isFromMetadata reports whether f is the extractor [FromMetadata] returns.
// Funcs are not comparable; their code pointers are, and FromMetadata
// always returns the same top-level function.
func isFromMetadata(f TokenExtractor) bool {
	return reflect.ValueOf(f).Pointer() == reflect.ValueOf(TokenExtractor(fromMetadata)).Pointer()
}

func (c *checker) skipped(method string) bool {
	if _, ok := c.exact[method]; ok {
		return true
	}
	for _, p := range c.prefixes {
		if strings.HasPrefix(method, p) {
			return true
		}
	}
	return false
}

// check authenticates and authorizes one call and returns the context for
// the handler, or a status error. It records the outcome and, with a
// tracer, a span around the check (not around the handler).
func (c *checker) check(ctx context.Context, method string, r *rule, req any) (context.Context, error) {
	cctx, span := c.begin(ctx, method)
	u, token, err := c.authenticate(cctx, r, req)
	if err == nil {
		err = c.authorize(cctx, r, req, u, token)
	}
	if err := c.record(span, err); err != nil {
		return nil, err
	}
	return c.withUser(ctx, u), nil
}

// begin starts the span of a check, when there is a tracer.
func (c *checker) begin(ctx context.Context, method string) (context.Context, trace.Span) {
	if c.tracer == nil {
		return ctx, nil
	}
	return c.tracer.Start(ctx, "reviewauth.grpcauth", trace.WithAttributes(attribute.String("rpc.method", method)))
}

// record counts the outcome of a check, notes it on span and ends span. It
// returns err.
func (c *checker) record(span trace.Span, err error) error {
	outcome := outcomeOf(err)
	c.metrics.Decision("grpc", outcome)
	if span != nil {
		span.SetAttributes(attribute.String("reviewauth.decision", outcome))
		if outcome == observe.OutcomeUnavailable {
			span.SetStatus(otelcodes.Error, "review unavailable")
		}
		span.End()
	}
	return err
}

// abandon ends the span of a check that ended without a decision: the
// stream broke before its first message arrived.
func abandon(span trace.Span) {
	if span != nil {
		span.End()
	}
}

// withUser returns the handler's context of an allowed call.
func (c *checker) withUser(ctx context.Context, u user.Info) context.Context {
	if !c.keepMD {
		ctx = stripAuthorization(ctx)
	}
	return request.WithUser(ctx, u)
}

// outcomeOf names the outcome of a check for metrics and spans.
func outcomeOf(err error) string {
	switch status.Code(err) {
	case codes.OK:
		return observe.OutcomeAllowed
	case codes.PermissionDenied:
		return observe.OutcomeDenied
	case codes.Unauthenticated:
		return observe.OutcomeUnauthenticated
	case codes.InvalidArgument:
		return observe.OutcomeBadRequest
	default:
		return observe.OutcomeUnavailable
	}
}

// authenticate finds the call's token (in req or the metadata) and
// authenticates it. It returns the token too, for redaction.
func (c *checker) authenticate(ctx context.Context, r *rule, req any) (user.Info, string, error) {
	extract := r.Token
	if extract == nil {
		extract = fromMetadata
	}
	token, ok := extract(ctx, req)
	if !ok || token == "" {
		return nil, "", errNoToken
	}
	if c.authn == nil || c.authz == nil {
		return nil, "", status.Error(codes.Unavailable, "grpcauth: server has no authenticator or authorizer configured")
	}
	resp, ok, err := c.authn.AuthenticateToken(ctx, token)
	if err != nil {
		return nil, "", toStatus(ctx, err, token)
	}
	if !ok || resp == nil || resp.User == nil {
		return nil, "", errRejected
	}
	return resp.User, token, nil
}

// authorize checks every attribute set the rule builds for u and req.
func (c *checker) authorize(ctx context.Context, r *rule, req any, u user.Info, token string) error {
	var attrs []authorizer.Attributes
	if r.Attributes != nil {
		if r.AttributesIgnoreMessage {
			req = nil
		}
		var err error
		if attrs, err = r.Attributes(ctx, req, u); err != nil {
			return toStatus(ctx, err, token)
		}
	}
	if err := authz.Check(ctx, c.authz, attrs...); err != nil {
		return toStatus(ctx, err, token)
	}
	return nil
}

func stripAuthorization(ctx context.Context) context.Context {
	// Look the one key up first: copying the whole metadata costs more,
	// and calls whose token is in the message usually carry none.
	if len(metadata.ValueFromIncomingContext(ctx, authorizationKey)) == 0 {
		return ctx
	}
	md, _ := metadata.FromIncomingContext(ctx)
	delete(md, authorizationKey)
	return metadata.NewIncomingContext(ctx, md)
}

// toStatus maps a library error to a gRPC status at the edge: rejection to
// Unauthenticated, denial to PermissionDenied, a bad request to
// InvalidArgument, and anything else (outage, unknown error) to Unavailable,
// so that no error is ever mistaken for an allow. The token, should any
// component have put it in its error, is redacted from the message. An
// Unavailable status carries a generic message: the cause (which may name
// the API server's address) is logged, not sent to the caller.
func toStatus(ctx context.Context, err error, token string) error {
	code := codes.Unavailable
	switch {
	case errors.Is(err, reviewauth.ErrUnavailable):
		code = codes.Unavailable
	case errors.Is(err, ErrInvalidArgument):
		code = codes.InvalidArgument
	case errors.Is(err, reviewauth.ErrUnauthenticated):
		code = codes.Unauthenticated
	case errors.Is(err, reviewauth.ErrDenied):
		code = codes.PermissionDenied
	}
	msg := err.Error()
	if token != "" && strings.Contains(msg, token) {
		msg = strings.ReplaceAll(msg, token, "[redacted]")
	}
	if code == codes.Unavailable {
		klog.FromContext(ctx).Error(errors.New(msg), "grpcauth: could not authenticate or authorize the call")
		return errUnavailable
	}
	return status.Error(code, "grpcauth: "+msg)
}

var errUnavailable = status.Error(codes.Unavailable, "grpcauth: the authentication or authorization service is unavailable; retry later")
