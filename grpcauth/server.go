package grpcauth

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	"github.com/reviewauth/reviewauth/internal/authgroup"
	"github.com/reviewauth/reviewauth/internal/check"
	"github.com/reviewauth/reviewauth/internal/loglimit"
	"github.com/reviewauth/reviewauth/internal/observe"
	"github.com/reviewauth/reviewauth/internal/pathmatch"
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

// Options configures [New]. Authenticator and Authorizer are required, and
// every rule needs Attributes; every other field has a safe zero value,
// stated on it. Options must not be modified after it has been passed to
// New.
type Options struct {
	// Authenticator checks the bearer token of a call. It is typically an
	// *authn.Authenticator, configured with the audience this server
	// accepts, or any authenticator.Token: the same field, of the same
	// type, as httpauth.Options.Authenticator, with the same mapping. An
	// error matching reviewauth.ErrUnavailable means the token could not be
	// checked (codes.Unavailable); any other error, or (nil, false, nil),
	// means it was checked and refused (codes.Unauthenticated): that is how
	// k8s.io/apiserver's own token authenticators (union, the token cache,
	// OIDC) report a bad token. A custom authenticator that cannot reach its
	// backend must wrap reviewauth.ErrUnavailable (for example with a
	// *reviewauth.ReviewError) for callers to be told to retry. The user
	// it returns gets the group system:authenticated unless it has it (or
	// system:unauthenticated, or is system:anonymous), as the API server's
	// authenticated-group adder gives it. Required.
	Authenticator authenticator.Token

	// Authorizer decides every attribute set a [Rule] builds. It is
	// typically an *authz.Authorizer, possibly combined with authz.All.
	// Any error it returns, whatever the decision that comes with it, is
	// codes.Unavailable; NoOpinion is a denial. Required.
	Authorizer authorizer.UnconditionalAuthorizer

	// Rules maps a full method name ("/package.Service/Method") to its rule.
	// A method without a rule, and not skipped, is denied with
	// codes.PermissionDenied before its token is even looked at. Nil or
	// empty denies every method that is not skipped.
	Rules map[string]Rule

	// Skip lists methods served without authentication or authorization.
	// An entry ending in "/" is a service prefix ("/grpc.health.v1.Health/");
	// any other entry is a full method name. Entries must be clean
	// absolute paths (method names are); a method name that is not clean
	// matches no entry. Nil skips nothing; use [HealthAndReflection] for
	// the usual probes. Skip is consulted before Rules.
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
	// token is not in the message ([TokenExtractor.FromMessage] false) is
	// authenticated before its handler starts; any other is given the
	// stream's first message (see [Interceptor.StreamServerInterceptor]).
	Token TokenExtractor

	// Attributes builds the attribute sets to authorize from the request
	// message and the authenticated user. Every set must be allowed (All
	// semantics). Its errors end the call as [AttributesFunc] says:
	// [ErrInvalidArgument] is codes.InvalidArgument, a
	// *reviewauth.DeniedError is codes.PermissionDenied. A builder that
	// returns no sets denies every call: a rule must say what it
	// authorizes. Required.
	Attributes AttributesFunc

	// AttributesIgnoreMessage declares that Attributes does not read the
	// request message: it is then always called with a nil req, on unary
	// and streaming calls alike. With the token in the metadata too (Token
	// nil, [FromMetadata], or any extractor whose FromMessage is false), a
	// call is then checked from its metadata alone: a streaming call before
	// its handler starts, without waiting for a message.
	// False, the default, suits [Resource] and every builder that reads a
	// field of the request.
	AttributesIgnoreMessage bool
}

// TokenExtractor finds the bearer token of a call. [FromMetadata] and
// [FromField] are the extractors of this package; an implementation of
// your own must be safe for concurrent use.
type TokenExtractor interface {
	// Token returns the bearer token carried by the call, and false when
	// there is none. req is the request message (the unary request, or the
	// first message of a stream) when FromMessage is true, and nil
	// otherwise.
	Token(ctx context.Context, req any) (token string, ok bool)
	// FromMessage reports whether Token reads the request message. When it
	// does not, a streaming call is authenticated before any message
	// arrives.
	FromMessage() bool
}

// AttributesFunc builds the attribute sets that must all be allowed for a
// call made by u with request message req. Its errors end the call, before
// the authorizer is asked:
//
//   - an error matching [ErrInvalidArgument] (a *[MissingFieldError], say):
//     a field it needs is missing or malformed, codes.InvalidArgument;
//   - an error matching reviewauth.ErrDenied (a *reviewauth.DeniedError,
//     whose Reason is sent to the caller): the request itself shows that
//     the call may not proceed, codes.PermissionDenied. A delta of the CSI
//     SnapshotMetadata API whose base snapshot is bound in another
//     namespace is refused this way in examples/snapshotmetadata;
//   - an error matching reviewauth.ErrUnauthenticated:
//     codes.Unauthenticated;
//   - any other error: codes.Unavailable, with a generic message (the
//     error is logged): fail closed.
//
// An AttributesFunc must be safe for concurrent use.
type AttributesFunc func(ctx context.Context, req any, u user.Info) ([]authorizer.Attributes, error)

// Interceptor authenticates and authorizes gRPC calls according to its
// [Options], as unary and stream server interceptors that share one
// configuration, so that unary and streaming methods obey the same rules.
// The handler of an allowed call finds the caller's identity with
// request.UserFrom (k8s.io/apiserver/pkg/endpoints/request); a skipped
// call has none.
//
// Failures end the call with codes.PermissionDenied (unknown method, or
// denied), codes.Unauthenticated (no token, or a rejected one),
// codes.InvalidArgument (a field needed for authorization is missing) or
// codes.Unavailable (the check could not be made). Status messages never
// contain the token.
//
// An Interceptor is safe for concurrent use. Build one with [New]; the zero
// Interceptor (and a nil one) refuses every call with codes.Unavailable.
type Interceptor struct {
	c *checker
}

// New validates opts and returns the Interceptor they describe. It reports
// every mistake at once: a missing Authenticator or Authorizer, a rule
// without Attributes, a rule keyed by anything but a full method name, and
// a Skip entry that is not a clean absolute path.
func New(opts Options) (*Interceptor, error) {
	var errs []error
	if opts.Authenticator == nil {
		errs = append(errs, errors.New("grpcauth: Options.Authenticator is required"))
	}
	if opts.Authorizer == nil {
		errs = append(errs, errors.New("grpcauth: Options.Authorizer is required"))
	}
	for _, m := range slices.Sorted(maps.Keys(opts.Rules)) {
		if !fullMethod(m) {
			errs = append(errs, fmt.Errorf("grpcauth: rule %q: not a full method name (/package.Service/Method)", m))
		}
		if opts.Rules[m].Attributes == nil {
			errs = append(errs, fmt.Errorf("grpcauth: rule for %s has no Attributes", m))
		}
	}
	skip, err := skipMatcher(opts.Skip)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Interceptor{c: newChecker(opts, skip)}, nil
}

// fullMethod reports whether m is "/package.Service/Method".
func fullMethod(m string) bool {
	i := strings.LastIndexByte(m, '/')
	return i > 1 && i < len(m)-1 && m[0] == '/' && pathmatch.IsClean(m)
}

// skipMatcher compiles Options.Skip: "/svc/" is a prefix, anything else a
// full method name.
func skipMatcher(skip []string) (*pathmatch.Matcher, error) {
	patterns := make([]string, 0, len(skip))
	for _, s := range skip {
		if strings.HasSuffix(s, "/") {
			s += "*"
		} else if strings.Contains(s, "*") {
			return nil, fmt.Errorf("grpcauth: Skip entry %q: a prefix ends in \"/\", not \"*\"", s)
		}
		patterns = append(patterns, s)
	}
	m, err := pathmatch.New("Skip entry", patterns)
	if err != nil {
		return nil, fmt.Errorf("grpcauth: %w", err)
	}
	return m, nil
}

// errNotConfigured is every call's status through an Interceptor that New
// did not build.
var errNotConfigured = status.Error(codes.Unavailable, "grpcauth: the server's interceptor is not configured")

// UnaryServerInterceptor returns the unary interceptor: it authenticates and
// authorizes every call that is not skipped before the handler runs, and
// puts the identity in the handler's context (request.UserFrom). It
// composes with grpc.ChainUnaryInterceptor and with go-grpc-middleware's
// selector.
func (i *Interceptor) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	if i == nil || i.c == nil {
		return func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
			return nil, errNotConfigured
		}
	}
	c := i.c
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if c.skip.Match(info.FullMethod) {
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
	authn   authenticator.Token
	authz   authorizer.UnconditionalAuthorizer
	rules   map[string]*rule
	skip    *pathmatch.Matcher
	keepMD  bool
	metrics *observe.Recorder
	tracer  trace.Tracer
	// unavailable paces the log of calls answered Unavailable (see
	// logUnavailable).
	unavailable *loglimit.Limiter
}

// Limits of the log of calls answered Unavailable, as httpauth's of 503s
// (httpauth.RefusalLogBurst, httpauth.RefusalLogInterval): at the default
// verbosity at most UnavailableLogBurst lines at once and one per
// UnavailableLogInterval after that, each counting the ones left out
// before it; from -v=2 every one. Calls that time out or are cancelled
// while they wait for a review are answered Unavailable: 2,313 clients
// sending junk tokens to the snapshot-metadata sidecar made it write a line
// for each, about 15,000 in 40 s (AMD EPYC, 2 cores).
const (
	UnavailableLogBurst    = 20
	UnavailableLogInterval = time.Second
)

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

func newChecker(o Options, skip *pathmatch.Matcher) *checker {
	c := &checker{
		authn:   o.Authenticator,
		authz:   o.Authorizer,
		rules:   make(map[string]*rule, len(o.Rules)),
		skip:    skip,
		keepMD:  o.KeepAuthorizationMetadata,
		metrics: observe.Of(o.Metrics),

		unavailable: loglimit.New(UnavailableLogBurst, UnavailableLogInterval, nil),
	}
	if o.TracerProvider != nil {
		c.tracer = o.TracerProvider.Tracer(TracerName)
	}
	for m, r := range o.Rules {
		if r.Token == nil {
			r.Token = FromMetadata()
		}
		cr := &rule{Rule: r, tokenInMetadata: !r.Token.FromMessage()}
		cr.needsMessage = !cr.tokenInMetadata || !r.AttributesIgnoreMessage
		if mt := inputType(m); mt != nil {
			cr.input.Store(&mt)
		}
		c.rules[m] = cr
	}
	return c
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
	if !r.Token.FromMessage() {
		req = nil
	}
	token, ok := r.Token.Token(ctx, req)
	if !ok || token == "" {
		return nil, "", errNoToken
	}
	resp, ok, err := c.authn.AuthenticateToken(ctx, token)
	if err != nil {
		return nil, "", c.authnStatus(ctx, err, token)
	}
	if !ok || resp == nil || resp.User == nil {
		return nil, "", errRejected
	}
	// Every authenticated user is in system:authenticated, whatever
	// authenticated it, as in the API server (and httpauth).
	return authgroup.Add(resp.User), token, nil
}

// authorize checks every attribute set the rule builds for u and req.
func (c *checker) authorize(ctx context.Context, r *rule, req any, u user.Info, token string) error {
	if r.AttributesIgnoreMessage {
		req = nil
	}
	attrs, err := r.Attributes(ctx, req, u)
	if err != nil {
		return c.toStatus(ctx, err, token)
	}
	if err := check.Check(ctx, c.authz, attrs...); err != nil {
		return c.toStatus(ctx, err, token)
	}
	return nil
}

// stripAuthorization returns ctx with incoming metadata that has no
// "authorization" entry (in any letter case, since
// metadata.ValueFromIncomingContext matches keys case-insensitively), or
// ctx itself when there is none.
//
// Hand-written for speed (BenchmarkInterceptorChain): the obvious
// metadata.FromIncomingContext, delete, NewIncomingContext deep-copies every
// value slice and was a quarter of the interceptor's cost, and building even
// a shallow copy of the map costs a third of what remains. So the copy is
// made only when the handler asks for its metadata (see strippedContext),
// and it shares the value slices of the other keys with the caller's
// metadata. That is safe because nothing outside this package can reach
// those slices: grpc's metadata package hands out the incoming metadata
// only through FromIncomingContext and ValueFromIncomingContext, which both
// return copies, and this package only reads them.
func stripAuthorization(ctx context.Context) context.Context {
	return stripAuthorizationKey(ctx, incomingKey)
}

// stripAuthorizationKey is stripAuthorization with the metadata's context
// key, nil if unknown.
func stripAuthorizationKey(ctx context.Context, key any) context.Context {
	md, ok := incomingMD(ctx, key)
	if !ok {
		return ctx
	}
	if _, ok := md[authorizationKey]; !ok {
		// grpc's transport lowercases keys, but a context built by hand
		// may spell it otherwise.
		if !hasFoldedAuthorization(md) {
			return ctx // calls whose token is in the message usually have none
		}
	}
	if key == nil {
		return metadata.NewIncomingContext(ctx, withoutAuthorization(md))
	}
	return &strippedContext{Context: ctx, key: key, md: md}
}

// withoutAuthorization returns a new MD with the entries of md that are not
// "authorization", sharing their value slices.
func withoutAuthorization(md metadata.MD) metadata.MD {
	out := make(metadata.MD, len(md))
	for k, v := range md {
		if !isAuthorizationKey(k) {
			out[k] = v
		}
	}
	return out
}

// strippedContext is a context whose incoming metadata is that of its
// parent without "authorization". The stripped MD is built the first time
// it is asked for: a handler that never reads its metadata does not pay
// for it. Cancellation and every other value are the parent's.
type strippedContext struct {
	context.Context
	key any         // the incoming metadata's context key
	md  metadata.MD // the parent's incoming metadata, not modified

	once     sync.Once
	stripped metadata.MD
}

func (c *strippedContext) Value(key any) any {
	if key != c.key {
		return c.Context.Value(key)
	}
	c.once.Do(func() { c.stripped = withoutAuthorization(c.md) })
	return c.stripped
}

// String describes the context as context.WithValue's do, without the
// metadata.
func (c *strippedContext) String() string {
	return fmt.Sprint(c.Context) + ".WithValue(incoming metadata without authorization)"
}

// hasFoldedAuthorization reports whether md has a key that is
// "authorization" in some letter case.
func hasFoldedAuthorization(md metadata.MD) bool {
	for k := range md {
		if isAuthorizationKey(k) {
			return true
		}
	}
	return false
}

// isAuthorizationKey reports whether k is "authorization" in any case.
func isAuthorizationKey(k string) bool {
	return len(k) == len(authorizationKey) && strings.EqualFold(k, authorizationKey)
}

// incomingMD returns the incoming metadata of ctx, stored under key, without
// copying it, or a copy (metadata.FromIncomingContext) if key is nil. The
// caller must not modify it.
func incomingMD(ctx context.Context, key any) (metadata.MD, bool) {
	if key == nil {
		return metadata.FromIncomingContext(ctx)
	}
	md, ok := ctx.Value(key).(metadata.MD)
	return md, ok
}

// incomingValue returns the values of key (lowercase) in the incoming
// metadata of ctx, matched as metadata.ValueFromIncomingContext matches
// them, without copying them when incomingKey is known. The caller must not
// modify them.
func incomingValue(ctx context.Context, key string) []string {
	if incomingKey == nil {
		return metadata.ValueFromIncomingContext(ctx, key)
	}
	md, _ := ctx.Value(incomingKey).(metadata.MD)
	if v, ok := md[key]; ok {
		return v
	}
	for k, v := range md {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return nil
}

// incomingKey is the context key under which grpc's metadata package keeps
// the incoming metadata (an unexported type), or nil if it could not be
// found, in which case incomingMD copies.
var incomingKey = findIncomingKey()

// findIncomingKey learns the key by letting metadata.FromIncomingContext
// look it up in a context that records the key it is asked for, and checks
// that metadata.NewIncomingContext stores the very MD it is given under it.
func findIncomingKey() any {
	probe := &keyProbe{Context: context.Background()}
	metadata.FromIncomingContext(probe)
	if probe.key == nil {
		return nil
	}
	want := metadata.MD{"k": {"v"}}
	got, ok := metadata.NewIncomingContext(context.Background(), want).Value(probe.key).(metadata.MD)
	if !ok || len(got["k"]) != 1 || &got["k"][0] != &want["k"][0] {
		return nil
	}
	return probe.key
}

// keyProbe is a context that records the last key it was asked for.
type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(key any) any {
	p.key = key
	return nil
}

// authnStatus maps an authenticator's error at the edge, as httpauth does:
// ErrUnavailable is codes.Unavailable; anything else is a rejection,
// codes.Unauthenticated, which is how k8s.io/apiserver's token
// authenticators report a bad token with a plain error. The message of a
// reviewauth.ErrUnauthenticated is the caller's (its reason is safe to
// return); a plain error, which may say anything, is logged (redacted) and
// the caller gets a generic message.
func (c *checker) authnStatus(ctx context.Context, err error, token string) error {
	switch {
	case errors.Is(err, reviewauth.ErrUnavailable):
		return c.toStatus(ctx, err, token)
	case errors.Is(err, reviewauth.ErrUnauthenticated):
		return status.Error(codes.Unauthenticated, "grpcauth: "+redact(err.Error(), token))
	}
	klog.FromContext(ctx).V(2).Info("grpcauth: the authenticator refused the token", "err", redact(err.Error(), token))
	return errRejected
}

// redact replaces token in msg.
func redact(msg, token string) string {
	if token != "" && strings.Contains(msg, token) {
		return strings.ReplaceAll(msg, token, "[redacted]")
	}
	return msg
}

// toStatus maps a library error to a gRPC status at the edge: rejection to
// Unauthenticated, denial to PermissionDenied, a bad request to
// InvalidArgument, and anything else (outage, unknown error) to Unavailable,
// so that no error is ever mistaken for an allow. The token, should any
// component have put it in its error, is redacted from the message. An
// Unavailable status carries a generic message: the cause (which may name
// the API server's address) is logged, not sent to the caller.
func (c *checker) toStatus(ctx context.Context, err error, token string) error {
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
	msg := redact(err.Error(), token)
	if code == codes.Unavailable {
		c.logUnavailable(klog.FromContext(ctx), errors.New(msg))
		return errUnavailable
	}
	return status.Error(code, "grpcauth: "+msg)
}

// logUnavailable logs a call answered Unavailable as an error: at the
// default verbosity as paced by c.unavailable, from -v=2 every one.
func (c *checker) logUnavailable(logger klog.Logger, err error) {
	var kv []any
	if !logger.V(2).Enabled() {
		var ok bool
		if kv, ok = c.unavailable.AllowKV(nil); !ok {
			return
		}
	}
	logger.Error(err, "grpcauth: could not authenticate or authorize the call", kv...)
}

var errUnavailable = status.Error(codes.Unavailable, "grpcauth: the authentication or authorization service is unavailable; retry later")
