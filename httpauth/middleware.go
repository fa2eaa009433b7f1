package httpauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/internal/authgroup"
	"github.com/reviewauth/reviewauth/internal/bearer"
	"github.com/reviewauth/reviewauth/internal/check"
	"github.com/reviewauth/reviewauth/internal/loglimit"
	"github.com/reviewauth/reviewauth/internal/observe"
	"github.com/reviewauth/reviewauth/internal/pathmatch"
	"github.com/reviewauth/reviewauth/metrics"
)

// DefaultRetryAfter is the Retry-After of a 503 when the error does not carry
// one from the API server (see [reviewauth.RetryAfter]).
const DefaultRetryAfter = time.Second

// Limits of the refusal log (see the package documentation, Logging): at
// the default verbosity, at most RefusalLogBurst refusals are logged at
// once and one per RefusalLogInterval after that, and as many outages
// (503); each line counts the ones left out before it. A client looping on
// a bad token, or an attacker, thus costs at most one line a second, while
// an operator still sees who is refused and why. From -v=2 every refusal is
// logged.
const (
	RefusalLogBurst    = 20
	RefusalLogInterval = time.Second
)

// Options configures [New]. Authorizer, Attributes, and at least one of
// Authenticator and ClientCertificates are required; every other field has a
// safe zero value, stated on the field.
type Options struct {
	// Authenticator authenticates the bearer token of requests that did not
	// authenticate with a client certificate: typically an
	// *authn.Authenticator, or any authenticator.Token (k8s.io/apiserver's
	// token cache, union, OIDC, ...). It is the same field, of the same type,
	// as grpcauth.Options.Authenticator. The middleware reads the token from
	// the Authorization header itself (RFC 6750: "Bearer <token>", the scheme
	// case-insensitive; see the package documentation for how this differs
	// from the kubelet's reading): a request without one, or with another
	// scheme, has no credential; two Authorization headers or an empty
	// token are a rejection. The token's results are mapped as follows: an
	// error matching [reviewauth.ErrUnavailable] means the token could not
	// be checked and is answered with 503; any other error, or (nil, false,
	// nil) for a token that was presented, means it was checked and refused,
	// and is answered with 401. That includes plain errors, which is how
	// k8s.io/apiserver's own authenticators (union, the token cache, OIDC)
	// report a bad token, and what its bearertoken authenticator makes of
	// (nil, false, nil). A custom authenticator that cannot reach its
	// backend must therefore wrap reviewauth.ErrUnavailable (for example
	// with a *reviewauth.ReviewError) for clients to be told to retry. Nil
	// means bearer tokens are not accepted.
	Authenticator authenticator.Token

	// ClientCertificates authenticates TLS client certificates, usually the
	// result of [NewClientCertAuthenticator]. It runs first, as in the API
	// server's union of authenticators: when a request presents both a
	// verified client certificate and a bearer token, the certificate's
	// identity is used and the token is never reviewed. A certificate that
	// fails verification is answered with 401, even if the request also
	// carries a valid token: a presented credential that is wrong is a
	// rejection, not an absence. Its errors are mapped as Authenticator's:
	// [reviewauth.ErrUnavailable] is 503, any other error 401. Nil means
	// client certificates are ignored.
	ClientCertificates authenticator.Request

	// Authorizer decides every attribute set the mapper returns; all of them
	// must be allowed (as authz.Check asks). Typically an *authz.Authorizer,
	// or the chain authz.Flags builds. An error, whatever the
	// decision that comes with it, is answered with 503; NoOpinion is a
	// denial. Required.
	Authorizer authorizer.UnconditionalAuthorizer

	// Attributes maps an authenticated request to the attribute sets to
	// authorize. Required.
	Attributes AttributesMapper

	// AlwaysAllowPaths lists paths served without authorization, and without
	// a credential, to GET and HEAD requests (or AlwaysAllowMethods), such
	// as "/healthz", "/readyz" and "/livez": k8s.io/apiserver's
	// --authorization-always-allow-paths, where such requests are
	// authenticated as anonymous and the path authorizer allows them
	// (KEP-4633 lets anonymous authentication be limited to such paths). A
	// pattern matches the cleaned request path exactly, or, with a trailing
	// "*", as a prefix ("/debug/*"); patterns must be clean absolute paths.
	//
	// On a matching path and method:
	//   - a request without a credential is served as the anonymous user
	//     ("system:anonymous", group "system:unauthenticated", in
	//     request.UserFrom);
	//   - a request that presents a credential is authenticated first: a
	//     rejected one is answered with 401 and one that cannot be checked
	//     with 503, as on any other path; a valid one is served as its user,
	//     still without authorization.
	//
	// Other methods on these paths are authenticated and authorized like
	// any other request: here httpauth is stricter than k8s.io/apiserver,
	// whose path authorizer allows every method on these paths (POST and
	// DELETE from anonymous callers included); list the methods in
	// AlwaysAllowMethods to get that. Identity headers are stripped on
	// these paths too.
	// Always-allow paths are decided before the mapper runs, so they work
	// with every [AttributesMapper], the kubelet's resource mappers
	// included. Nil or empty means every request is authenticated and
	// authorized.
	AlwaysAllowPaths []string

	// AlwaysAllowMethods widens the methods AlwaysAllowPaths applies to.
	// Methods are case-sensitive, as in HTTP: "get" is not GET. Nil or
	// empty means GET and HEAD, which cannot change anything; a method that
	// can (POST, PUT, DELETE, ...) is served to anonymous callers only if
	// it is listed here.
	AlwaysAllowMethods []string

	// PropagateIdentity, when true, sets X-Remote-User, X-Remote-Uid,
	// X-Remote-Group and X-Remote-Extra-* ([FrontProxyHeaders]) from the
	// authenticated identity on the request before the handler runs, for
	// handlers that read them, and keeps their names out of the client's
	// Connection header, so that an httputil.ReverseProxy's hop-by-hop
	// pass does not remove them. A reverse proxy should rather send them
	// with a [Forwarder] (Identity: FrontProxyHeaders()), which sets them
	// on the forwarded request itself. The anonymous user of an
	// always-allow path is never propagated: the upstream sees no identity
	// headers, exactly as for a request that never had an identity, so
	// that no upstream can mistake an unauthenticated request for an
	// authenticated one. Client-sent identity headers are removed either
	// way. False (the default) leaves them unset.
	PropagateIdentity bool

	// StripHeaders are more request headers the middleware deletes first,
	// on every path (always-allow paths included), as it deletes the
	// identity headers: for a proxy whose upstream trusts other headers
	// (kube-rbac-proxy's --auth-header-*-field-name names, or every
	// X-Remote-*). Names are compared case-insensitively with '_' read as
	// '-'; one ending in "*" deletes every header it prefixes. Empty (the
	// default): only the identity headers. An empty name, or a '*'
	// elsewhere than at the end, is an error from New.
	StripHeaders []string

	// Forwarder, when the handler is a reverse proxy, is the [Forwarder]
	// the proxy calls for every request it sends upstream: the middleware
	// deletes client-sent headers with the names of its identity headers
	// (in every spelling, on every path), refuses with 400 a request that
	// sends one of its decision headers in two spellings or a
	// single-valued one twice, and keeps the names of its identity and
	// decision headers out of the client's Connection header (see
	// [Forwarder]). Nil means no identity or decision headers; the
	// Connection header is still kept from naming Authorization and, with
	// PropagateIdentity, the X-Remote-* headers.
	Forwarder *Forwarder

	// RetryAfter is the Retry-After of a 503 when the error does not carry
	// one. Zero or negative means [DefaultRetryAfter].
	RetryAfter time.Duration

	// Metrics, if not nil, counts every request in
	// reviewauth_decisions_total{transport="http"} by outcome.
	Metrics *metrics.Metrics

	// TracerProvider, if not nil, wraps every request in a span
	// "reviewauth.httpauth" with the outcome as reviewauth.decision; the
	// authenticator's and authorizer's spans nest inside it. Nil means no
	// spans, at no cost.
	TracerProvider trace.TracerProvider

	// Clock paces the refusal log ([RefusalLogBurst], [RefusalLogInterval]).
	// Nil means the real clock.
	Clock clock.PassiveClock
}

// ErrMethodNotAllowed is returned (wrapped) by mappers that have no verb for
// the request's method; the middleware answers 405 Method Not Allowed.
var ErrMethodNotAllowed = errors.New("httpauth: method not allowed")

// New returns middleware that authenticates, maps and authorizes every
// request before handing it to the wrapped handler, and answers failures
// itself (see the package documentation for the status codes). The handler
// sees the cleaned path, no Authorization or client-sent X-Remote-* headers,
// and the identity in its context through request.UserFrom.
//
// New reports an error for a missing required option, a malformed
// always-allow path or a method that is not an HTTP token; it never panics.
// New reads opts once: changing it afterwards has no effect. The middleware
// is safe for concurrent use if the authenticators, authorizer and mapper
// are.
func New(opts Options) (func(http.Handler) http.Handler, error) {
	if opts.Authenticator == nil && opts.ClientCertificates == nil {
		return nil, errors.New("httpauth: Options.Authenticator or Options.ClientCertificates is required")
	}
	if opts.Authorizer == nil {
		return nil, errors.New("httpauth: Options.Authorizer is required")
	}
	if opts.Attributes == nil {
		return nil, errors.New("httpauth: Options.Attributes is required")
	}
	allow, err := pathmatch.New("always-allow path", opts.AlwaysAllowPaths)
	if err != nil {
		return nil, fmt.Errorf("httpauth: %w", err)
	}
	methods := []string{http.MethodGet, http.MethodHead}
	if len(opts.AlwaysAllowMethods) > 0 {
		methods = nil
		for _, method := range opts.AlwaysAllowMethods {
			if !validMethod(method) {
				return nil, fmt.Errorf("httpauth: always-allow method %q is not an HTTP method token", method)
			}
			methods = append(methods, method)
		}
	}
	strip, err := stripNames(opts.StripHeaders)
	if err != nil {
		return nil, err
	}
	protected := []stripName{{name: "authorization"}}
	if opts.PropagateIdentity {
		frontProxyNames, _ := stripNames(frontProxy{}.Names())
		protected = append(protected, frontProxyNames...)
	}
	var decision []decisionHeader
	if f := opts.Forwarder; f != nil {
		strip = append(strip, f.identityNames...)
		protected = append(protected, f.protected...)
		decision = f.decision
	}
	m := &middleware{opts: opts, alwaysAllow: allow, alwaysAllowMethods: methods, metrics: observe.Of(opts.Metrics),
		refusals:    loglimit.New(RefusalLogBurst, RefusalLogInterval, opts.Clock),
		unavailable: loglimit.New(RefusalLogBurst, RefusalLogInterval, opts.Clock),
		strip:       strip,
		protected:   protected,
		decision:    decision,
	}
	if m.opts.RetryAfter <= 0 {
		m.opts.RetryAfter = DefaultRetryAfter
	}
	if opts.TracerProvider != nil {
		m.tracer = opts.TracerProvider.Tracer(TracerName)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if m.tracer == nil {
				m.metrics.Decision("http", m.serve(next, w, r))
				return
			}
			ctx, span := m.tracer.Start(r.Context(), "reviewauth.httpauth", trace.WithAttributes(attribute.String("http.request.method", r.Method)))
			defer span.End()
			outcome := m.serve(next, w, r.WithContext(ctx))
			m.metrics.Decision("http", outcome)
			span.SetAttributes(attribute.String("reviewauth.decision", outcome))
			if outcome == observe.OutcomeUnavailable {
				span.SetStatus(codes.Error, "review unavailable")
			}
		})
	}, nil
}

// TracerName is the instrumentation name of the spans httpauth creates.
const TracerName = "github.com/reviewauth/reviewauth/httpauth"

type middleware struct {
	opts               Options
	alwaysAllow        *pathmatch.Matcher
	alwaysAllowMethods []string
	tracer             trace.Tracer
	// refusals and unavailable pace the log lines of 4xx refusals and of
	// 503s at the default verbosity, separately, so that a flood of bad
	// tokens cannot hide an outage.
	refusals, unavailable *loglimit.Limiter
	metrics               *observe.Recorder
	// strip is StripHeaders, and the Forwarder's identity headers, lower
	// case with '-' for '_', a trailing '*' cut and recorded as prefix.
	strip []stripName
	// protected are the names kept out of the Connection header.
	protected []stripName
	// decision are the Forwarder's decision headers.
	decision []decisionHeader
}

type stripName struct {
	name   string
	prefix bool
}

// errNoCredential is the outcome when no authenticator found a credential.
var errNoCredential = errors.New("httpauth: no credential")

var errNoAttributes = errors.New("httpauth: no attributes to authorize")

func (m *middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) (outcome string) {
	logger := klog.FromContext(r.Context())

	// Client-sent identity headers never reach the handler, whatever follows.
	stripIdentityHeaders(r.Header)
	if len(m.strip) > 0 {
		m.stripMore(r.Header)
	}

	clean, err := cleanURL(r.URL)
	if err != nil {
		delete(r.Header, "Authorization")
		m.logRefusal(logger, r, "", "bad path", err)
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return observe.OutcomeBadRequest
	}
	if clean != r.URL.Path || r.URL.RawPath != "" {
		r = withPath(r, clean)
	}
	alwaysAllow := m.alwaysAllow.Match(clean) && m.alwaysAllowMethod(r.Method)

	credential := r.Header["Authorization"]
	resp, err := m.authenticate(r)
	delete(r.Header, "Authorization")
	switch {
	case err == errNoCredential && alwaysAllow:
		// apiserver's anonymous authentication, limited to these paths.
		r = r.WithContext(request.WithUser(r.Context(), &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}))
		if !m.forwardable(w, r, logger, user.Anonymous) {
			return observe.OutcomeBadRequest
		}
		logDecision(logger, 4, r, user.Anonymous, "always allowed", nil)
		next.ServeHTTP(w, r)
		return observe.OutcomeAlwaysAllowed
	case err == nil:
	case errors.Is(err, reviewauth.ErrUnavailable):
		m.logUnavailable(logger, r, "", "authentication", redactCredential(err, credential))
		m.writeUnavailable(w, err)
		return observe.OutcomeUnavailable
	default:
		// No credential, or one that was checked and refused: an
		// ErrUnauthenticated, or a plain error, which is how
		// k8s.io/apiserver's authenticators report a bad credential.
		m.logRefusal(logger, r, "", "unauthenticated", redactCredential(err, credential))
		challenge := "Bearer"
		if len(credential) > 0 && err != errNoCredential {
			challenge = `Bearer error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", challenge)
		writeStatus(w, apierrors.NewUnauthorized("Unauthorized"))
		return observe.OutcomeUnauthenticated
	}
	// Every authenticated user is in system:authenticated, whatever
	// authenticated it, as in the API server.
	u := authgroup.Add(resp.User)
	r = r.WithContext(request.WithUser(r.Context(), u))
	if !m.forwardable(w, r, logger, u.GetName()) {
		return observe.OutcomeBadRequest
	}
	if alwaysAllow {
		// A valid credential on an always-allow path: served as its user,
		// without authorization, as apiserver's path authorizer allows
		// any user there.
		m.propagate(r, u)
		logDecision(logger, 4, r, u.GetName(), "always allowed", nil)
		next.ServeHTTP(w, r)
		return observe.OutcomeAlwaysAllowed
	}

	attrs, err := m.opts.Attributes.Attributes(r, u)
	if err != nil {
		m.logRefusal(logger, r, u.GetName(), "bad request", err)
		if errors.Is(err, ErrMethodNotAllowed) {
			writeStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status:  metav1.StatusFailure,
				Code:    http.StatusMethodNotAllowed,
				Reason:  metav1.StatusReasonMethodNotAllowed,
				Message: fmt.Sprintf("method %q is not allowed here", r.Method),
			}})
			return observe.OutcomeBadRequest
		}
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return observe.OutcomeBadRequest
	}
	if len(attrs) == 0 {
		// Nothing to authorize is a mapper mistake; authz.Check would deny
		// it too. Fail closed.
		a := authorizer.AttributesRecord{User: u, Path: r.URL.Path, Verb: strings.ToLower(r.Method)}
		m.logRefusal(logger, r, u.GetName(), "forbidden", errNoAttributes)
		writeStatus(w, forbidden(a, "no attributes to authorize"))
		return observe.OutcomeDenied
	}
	for _, a := range attrs {
		a, err := checkSet(r.Context(), m.opts.Authorizer, a)
		if err == nil {
			continue
		}
		var denied *reviewauth.DeniedError
		if errors.As(err, &denied) && errors.Is(err, reviewauth.ErrDenied) {
			m.logRefusal(logger, r, u.GetName(), "forbidden", err)
			writeStatus(w, forbidden(a, denied.Reason))
			return observe.OutcomeDenied
		}
		m.logUnavailable(logger, r, u.GetName(), "authorization", err)
		m.writeUnavailable(w, err)
		return observe.OutcomeUnavailable
	}

	m.propagate(r, u)
	logDecision(logger, 4, r, u.GetName(), "allowed", nil)
	next.ServeHTTP(w, r)
	return observe.OutcomeAllowed
}

// authenticate runs the client certificate authenticator, then the token
// authenticator. The error is errNoCredential when neither found a
// credential; otherwise it is the authenticator's own error, which serve
// maps: ErrUnavailable to 503, anything else to 401.
func (m *middleware) authenticate(r *http.Request) (*authenticator.Response, error) {
	if m.opts.ClientCertificates != nil && r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		resp, ok, err := m.opts.ClientCertificates.AuthenticateRequest(r)
		switch {
		case err != nil:
			return nil, err
		case ok:
			return checkResponse(resp)
		}
	}
	if m.opts.Authenticator != nil {
		token, ok, err := bearer.FromRequest(r)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			return nil, errNoCredential
		}
		resp, ok, err := m.opts.Authenticator.AuthenticateToken(r.Context(), token)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			// A presented token nobody accepts, as apiserver's
			// bearertoken authenticator reads (nil, false, nil).
			return nil, errTokenNotAccepted
		}
		return checkResponse(resp)
	}
	return nil, errNoCredential
}

// errTokenNotAccepted is a presented token the authenticator did not accept
// and had no error for.
var errTokenNotAccepted = &reviewauth.RejectedError{Reason: "invalid bearer token"}

// errNoUser is a success without a user: the authenticator is broken, and
// the credential was not checked.
var errNoUser = fmt.Errorf("httpauth: authenticator reported success without a user: %w", reviewauth.ErrUnavailable)

func checkResponse(resp *authenticator.Response) (*authenticator.Response, error) {
	if resp == nil || resp.User == nil {
		return nil, errNoUser
	}
	return resp, nil
}

func (m *middleware) alwaysAllowMethod(method string) bool {
	for _, am := range m.alwaysAllowMethods {
		if method == am {
			return true
		}
	}
	return false
}

// forwardable checks the decision headers of a request about to be
// served (see Forwarder) and keeps the protected names out of its
// Connection header; it answers 400 and returns false for a request whose
// decision headers are ambiguous.
func (m *middleware) forwardable(w http.ResponseWriter, r *http.Request, logger klog.Logger, username string) bool {
	if len(m.decision) > 0 {
		if err := checkDecisionHeaders(r.Header, m.decision); err != nil {
			m.logRefusal(logger, r, username, "bad request", err)
			writeStatus(w, apierrors.NewBadRequest(err.Error()))
			return false
		}
	}
	keepConnected(r.Header, m.protected)
	return true
}

// propagate sets the X-Remote-* headers from u when PropagateIdentity is
// on. r must be the middleware's own copy of the request.
func (m *middleware) propagate(r *http.Request, u user.Info) {
	if !m.opts.PropagateIdentity {
		return
	}
	if r.Header == nil {
		r.Header = make(http.Header)
	}
	setIdentityHeaders(r.Header, u)
}

// setIdentityHeaders sets the front-proxy identity headers of u, as
// client-go's transport.SetAuthProxyHeaders does (and the API server's
// requestheader authenticator reads): X-Remote-User, X-Remote-Uid,
// X-Remote-Group, and X-Remote-Extra-<key> with the key's bytes that are
// not an HTTP token character %-encoded. It is written here because that
// package brings ten more (oauth2, workqueue, ...) into every binary;
// TestPropagatedHeadersMatchClientGo compares the two.
func setIdentityHeaders(h http.Header, u user.Info) {
	h.Del("X-Remote-User")
	h.Del("X-Remote-Uid")
	h.Del("X-Remote-Group")
	for key := range h {
		if strings.HasPrefix(strings.ToLower(key), "x-remote-extra-") {
			h.Del(key)
		}
	}
	h.Set("X-Remote-User", u.GetName())
	if uid := u.GetUID(); uid != "" {
		h.Set("X-Remote-Uid", uid)
	}
	for _, g := range u.GetGroups() {
		h.Add("X-Remote-Group", g)
	}
	for key, values := range u.GetExtra() {
		for _, v := range values {
			h.Add("X-Remote-Extra-"+headerKeyEscape(key), v)
		}
	}
}

// headerKeyEscape %-encodes the bytes of key that are not HTTP token
// characters (RFC 9110, 5.6.2), and '%' itself, so that the API server's
// url.PathUnescape reads the key back, as client-go does (RFC 3986, 2.1).
func headerKeyEscape(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		if c := key[i]; tokenChar(c) && c != '%' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// tokenChar reports whether c may appear in an HTTP token (RFC 9110, 5.6.2).
func tokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c < 0x80 && strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// redactCredential returns err with every word of the client's
// Authorization header values replaced, for logging: an authenticator that
// is not ours may echo the token in its error.
func redactCredential(err error, credential []string) error {
	msg := err.Error()
	clean := msg
	for _, v := range credential {
		for _, word := range strings.Fields(v) {
			if len(word) >= 8 {
				clean = strings.ReplaceAll(clean, word, "[REDACTED]")
			}
		}
	}
	if clean == msg {
		return err
	}
	return errors.New(clean)
}

func (m *middleware) writeUnavailable(w http.ResponseWriter, err error) {
	d, ok := reviewauth.RetryAfter(err)
	if !ok {
		d = m.opts.RetryAfter
	}
	writeUnavailable(w, d)
}

// withPath returns a shallow copy of r whose URL carries the cleaned path,
// so that the handler (or proxy) serves exactly the path that was authorized.
func withPath(r *http.Request, clean string) *http.Request {
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	u.Path = clean
	u.RawPath = ""
	r2.URL = &u
	r2.RequestURI = u.RequestURI()
	return r2
}

// stripIdentityHeaders deletes every header a client might send to act as
// someone else behind a proxy, or to pass a credential on to where it was
// not meant to go:
//
//   - X-Remote-User, X-Remote-Uid, X-Remote-Group and X-Remote-Extra-*, the
//     front-proxy identity headers;
//   - Impersonate-* (Impersonate-User, -Uid, -Group, -Extra-* and anything
//     else under that prefix): a proxy that forwards with its own
//     credentials would hand every caller impersonation;
//   - Proxy-Authorization: a credential for a proxy on the way, which
//     neither the handler nor an upstream should ever receive
//     (httputil.ReverseProxy drops it as hop-by-hop, other proxies may not);
//   - any spelling of Authorization other than the canonical one, which
//     authenticators (reading the canonical key) would not see but a proxy
//     would forward. The canonical Authorization is deleted after
//     authentication.
//
// Names are compared case-insensitively with '_' read as '-', because CGI
// and WSGI upstreams (and nginx with underscores_in_headers) read
// X-Remote_User or Impersonate_User as the real header.
//
// It is on the hit path of every request: the first byte rejects most keys
// without a comparison, and nothing is allocated.
func stripIdentityHeaders(h http.Header) {
	for key := range h {
		if strippedHeader(key) {
			delete(h, key)
		}
	}
}

func strippedHeader(key string) bool {
	if len(key) < len("X-Remote-Uid") {
		return false
	}
	switch key[0] | 0x20 {
	case 'a':
		return key != "Authorization" && equalHeaderName(key, "authorization")
	case 'p':
		return equalHeaderName(key, "proxy-authorization")
	case 'i':
		return hasHeaderPrefix(key, "impersonate-")
	case 'x':
		if !hasHeaderPrefix(key, "x-remote-") {
			return false
		}
		rest := key[len("x-remote-"):]
		return equalHeaderName(rest, "user") || equalHeaderName(rest, "uid") || equalHeaderName(rest, "group") ||
			hasHeaderPrefix(rest, "extra-")
	}
	return false
}

// hasHeaderPrefix reports whether key starts with prefix (lowercase, with
// '-') ignoring case and reading '_' as '-'.
func hasHeaderPrefix(key, prefix string) bool {
	if len(key) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := key[i]
		switch {
		case c == '_':
			c = '-'
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

// stripMore deletes the headers of Options.StripHeaders and the
// Forwarder's identity headers.
func (m *middleware) stripMore(h http.Header) {
	for key := range h {
		if matchName(m.strip, key) {
			delete(h, key)
		}
	}
}

// stripNames validates and normalizes Options.StripHeaders.
func stripNames(names []string) ([]stripName, error) {
	var out []stripName
	for _, n := range names {
		prefix := strings.HasSuffix(n, "*")
		name := strings.ReplaceAll(strings.ToLower(strings.TrimSuffix(n, "*")), "_", "-")
		if name == "" || strings.Contains(name, "*") {
			return nil, fmt.Errorf("httpauth: strip header %q: want a header name, or a prefix ending in one '*'", n)
		}
		out = append(out, stripName{name: name, prefix: prefix})
	}
	return out, nil
}

func equalHeaderName(key, name string) bool {
	return len(key) == len(name) && hasHeaderPrefix(key, name)
}

// logRefusal logs a 4xx refusal: at the default verbosity as paced by
// m.refusals, from -v=2 every one. The path is the cleaned one once the
// request has been cleaned (every refusal but "bad path"). Nothing logged
// ever holds the credential: callers redact authenticator errors.
func (m *middleware) logRefusal(logger klog.Logger, r *http.Request, username, decision string, err error) {
	if logger.V(2).Enabled() {
		logDecision(logger, 2, r, username, decision, err)
		return
	}
	kv, ok := m.refusals.AllowKV([]any{"user", username, "method", r.Method, "path", r.URL.Path, "reason", err.Error()})
	if !ok {
		return
	}
	logger.Info("httpauth: request "+decision, kv...)
}

// logUnavailable logs a 503 as an error: at the default verbosity as paced
// by m.unavailable, from -v=2 every one.
func (m *middleware) logUnavailable(logger klog.Logger, r *http.Request, username, what string, err error) {
	kv := []any{"user", username, "method", r.Method, "path", r.URL.Path}
	if !logger.V(2).Enabled() {
		var ok bool
		if kv, ok = m.unavailable.AllowKV(kv); !ok {
			return
		}
	}
	logger.Error(err, "httpauth: "+what+" unavailable", kv...)
}

func logDecision(logger klog.Logger, v int, r *http.Request, username, decision string, err error) {
	l := logger.V(v)
	if !l.Enabled() {
		return
	}
	if err != nil {
		l.Info("httpauth: request "+decision, "user", username, "method", r.Method, "path", r.URL.Path, "reason", err.Error())
		return
	}
	l.Info("httpauth: request "+decision, "user", username, "method", r.Method, "path", r.URL.Path)
}

// checkSet authorizes one attribute set, or the alternatives of an [AnyOf]
// in order, the first Allow winning. It returns the attributes to blame in
// a denial: the last alternative tried. An error that is not a denial stops
// at once: a later alternative is not asked.
func checkSet(ctx context.Context, az authorizer.UnconditionalAuthorizer, a authorizer.Attributes) (authorizer.Attributes, error) {
	alts, ok := a.(*anyOf)
	if !ok {
		return a, check.Check(ctx, az, a)
	}
	var err error
	for _, alt := range alts.alts {
		err = check.Check(ctx, az, alt)
		if err == nil || !errors.Is(err, reviewauth.ErrDenied) {
			return alt, err
		}
		a = alt
	}
	return a, err
}

// validMethod reports whether method is an HTTP token (RFC 9110, 5.6.2).
func validMethod(method string) bool {
	if method == "" {
		return false
	}
	for i := 0; i < len(method); i++ {
		if !tokenChar(method[i]) {
			return false
		}
	}
	return true
}
