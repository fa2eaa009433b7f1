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
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/metrics"
)

// DefaultRetryAfter is the Retry-After of a 503 when the error does not carry
// one from the API server (see [reviewauth.RetryAfter]).
const DefaultRetryAfter = time.Second

// Options configures [New]. Authorizer, Attributes, and at least one of
// Authenticator and ClientCertificates are required; every other field has a
// safe zero value, stated on the field.
type Options struct {
	// Authenticator authenticates requests that did not authenticate with
	// a client certificate: typically an *authn.Authenticator, which reads
	// the bearer token from the Authorization header. It must return
	// (nil, false, nil) when the request carries no credential it
	// understands, an error matching [reviewauth.ErrUnauthenticated] for a
	// rejected one, and an error matching [reviewauth.ErrUnavailable] when
	// it cannot decide. Any other error is answered with 503: it is not a
	// rejection, and it never lets the request through. Nil means bearer
	// tokens are not accepted.
	Authenticator authenticator.Request

	// ClientCertificates authenticates TLS client certificates, usually the
	// result of [NewClientCertAuthenticator]. It runs first, as in the API
	// server's union of authenticators: when a request presents both a
	// verified client certificate and a bearer token, the certificate's
	// identity is used and the token is never reviewed. A certificate that
	// fails verification is answered with 401, even if the request also
	// carries a valid token: a presented credential that is wrong is a
	// rejection, not an absence. An error from ClientCertificates that does
	// not match [reviewauth.ErrUnavailable] counts as such a rejection. Nil
	// means client certificates are ignored.
	ClientCertificates authenticator.Request

	// Authorizer decides every attribute set the mapper returns; all of them
	// must be allowed (see [authz.Check]). Typically an *authz.Authorizer,
	// or authz.First of local rules and one. An error, whatever the
	// decision that comes with it, is answered with 503; NoOpinion is a
	// denial. Required.
	Authorizer authorizer.UnconditionalAuthorizer

	// Attributes maps an authenticated request to the attribute sets to
	// authorize. Required.
	Attributes AttributesMapper

	// AlwaysAllowPaths lists paths served without authentication or
	// authorization, such as "/healthz", "/readyz" and "/livez". A pattern
	// matches the cleaned request path exactly, or, with a trailing "*",
	// as a prefix ("/debug/*"), as the API server's always-allow paths do.
	// Patterns must be clean absolute paths. Nil or empty means every path
	// is authenticated and authorized. Identity headers are still stripped
	// on these paths.
	AlwaysAllowPaths []string

	// PropagateIdentity, when true, sets X-Remote-User, X-Remote-Uid,
	// X-Remote-Group and X-Remote-Extra-* from the authenticated identity
	// before the handler runs, for reverse proxies in front of an upstream
	// that trusts those headers. Client-sent X-Remote-* headers are
	// removed either way. False (the default) leaves them unset.
	PropagateIdentity bool

	// RetryAfter is the Retry-After of a 503 when the error does not carry
	// one. Zero means [DefaultRetryAfter].
	RetryAfter time.Duration

	// Metrics, if not nil, counts every request in
	// reviewauth_decisions_total{transport="http"} by outcome.
	Metrics *metrics.Metrics

	// TracerProvider, if not nil, wraps every request in a span
	// "reviewauth.httpauth" with the outcome as reviewauth.decision; the
	// authenticator's and authorizer's spans nest inside it. Nil means no
	// spans, at no cost.
	TracerProvider trace.TracerProvider
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
// New reports an error for a missing required option or a malformed
// always-allow path. The middleware is safe for concurrent use if the
// authenticators, authorizer and mapper are.
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
	allow, err := newPathMatcher("always-allow path", opts.AlwaysAllowPaths)
	if err != nil {
		return nil, err
	}
	m := &middleware{opts: opts, alwaysAllow: allow}
	if m.opts.RetryAfter <= 0 {
		m.opts.RetryAfter = DefaultRetryAfter
	}
	if opts.TracerProvider != nil {
		m.tracer = opts.TracerProvider.Tracer(TracerName)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if m.tracer == nil {
				m.opts.Metrics.Decision("http", m.serve(next, w, r))
				return
			}
			ctx, span := m.tracer.Start(r.Context(), "reviewauth.httpauth", trace.WithAttributes(attribute.String("http.request.method", r.Method)))
			defer span.End()
			outcome := m.serve(next, w, r.WithContext(ctx))
			m.opts.Metrics.Decision("http", outcome)
			span.SetAttributes(attribute.String("reviewauth.decision", outcome))
			if outcome == metrics.OutcomeUnavailable {
				span.SetStatus(codes.Error, "review unavailable")
			}
		})
	}, nil
}

// TracerName is the instrumentation name of the spans httpauth creates.
const TracerName = "github.com/reviewauth/reviewauth/httpauth"

type middleware struct {
	opts        Options
	alwaysAllow *pathMatcher
	tracer      trace.Tracer
}

// errNoCredential is the outcome when no authenticator found a credential.
var errNoCredential = errors.New("httpauth: no credential")

var errNoAttributes = errors.New("httpauth: no attributes to authorize")

func (m *middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) (outcome string) {
	logger := klog.FromContext(r.Context())

	// Client-sent identity headers never reach the handler, whatever follows.
	stripIdentityHeaders(r.Header)

	clean, err := cleanURL(r.URL)
	if err != nil {
		delete(r.Header, "Authorization")
		logDecision(logger, 2, r, "", "bad path", err)
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return metrics.OutcomeBadRequest
	}
	if clean != r.URL.Path || r.URL.RawPath != "" {
		r = withPath(r, clean)
	}

	if m.alwaysAllow.match(clean) {
		delete(r.Header, "Authorization")
		next.ServeHTTP(w, r)
		return metrics.OutcomeAlwaysAllowed
	}

	hadAuthorization := len(r.Header["Authorization"]) > 0
	resp, err := m.authenticate(r)
	delete(r.Header, "Authorization")
	if err != nil {
		switch {
		case errors.Is(err, reviewauth.ErrUnavailable) || (!errors.Is(err, reviewauth.ErrUnauthenticated) && !errors.Is(err, errNoCredential)):
			logger.Error(err, "httpauth: authentication unavailable", "method", r.Method, "path", r.URL.Path)
			m.unavailable(w, err)
			return metrics.OutcomeUnavailable
		default:
			logDecision(logger, 2, r, "", "unauthenticated", err)
			challenge := "Bearer"
			if hadAuthorization && errors.Is(err, reviewauth.ErrUnauthenticated) {
				challenge = `Bearer error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			writeStatus(w, apierrors.NewUnauthorized("Unauthorized"))
			return metrics.OutcomeUnauthenticated
		}
	}
	u := resp.User
	r = r.WithContext(request.WithUser(r.Context(), u))

	attrs, err := m.opts.Attributes.Attributes(r, u)
	if err != nil {
		logDecision(logger, 2, r, u.GetName(), "bad request", err)
		if errors.Is(err, ErrMethodNotAllowed) {
			writeStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status:  metav1.StatusFailure,
				Code:    http.StatusMethodNotAllowed,
				Reason:  metav1.StatusReasonMethodNotAllowed,
				Message: fmt.Sprintf("method %q is not allowed here", r.Method),
			}})
			return metrics.OutcomeBadRequest
		}
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return metrics.OutcomeBadRequest
	}
	if len(attrs) == 0 {
		// Nothing to authorize is a mapper mistake; authz.Check would deny
		// it too. Fail closed.
		a := authorizer.AttributesRecord{User: u, Path: r.URL.Path, Verb: strings.ToLower(r.Method)}
		logDecision(logger, 2, r, u.GetName(), "forbidden", errNoAttributes)
		writeStatus(w, responsewriters.ForbiddenStatusError(a, "no attributes to authorize"))
		return metrics.OutcomeDenied
	}
	for _, a := range attrs {
		a, err := checkSet(r.Context(), m.opts.Authorizer, a)
		if err == nil {
			continue
		}
		var denied *reviewauth.DeniedError
		if errors.As(err, &denied) && errors.Is(err, reviewauth.ErrDenied) {
			logDecision(logger, 2, r, u.GetName(), "forbidden", err)
			writeStatus(w, responsewriters.ForbiddenStatusError(a, denied.Reason))
			return metrics.OutcomeDenied
		}
		logger.Error(err, "httpauth: authorization unavailable", "user", u.GetName(), "method", r.Method, "path", r.URL.Path)
		m.unavailable(w, err)
		return metrics.OutcomeUnavailable
	}

	if m.opts.PropagateIdentity {
		if r.Header == nil {
			r.Header = make(http.Header) // r is our copy
		}
		transport.SetAuthProxyHeaders(r, u.GetName(), u.GetUID(), u.GetGroups(), u.GetExtra())
	}
	logDecision(logger, 4, r, u.GetName(), "allowed", nil)
	next.ServeHTTP(w, r)
	return metrics.OutcomeAllowed
}

// authenticate runs the client certificate authenticator, then the token
// authenticator. The error matches ErrUnauthenticated, ErrUnavailable or
// errNoCredential, or is unknown (answered as unavailable).
func (m *middleware) authenticate(r *http.Request) (*authenticator.Response, error) {
	if m.opts.ClientCertificates != nil && r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		resp, ok, err := m.opts.ClientCertificates.AuthenticateRequest(r)
		switch {
		case err != nil && errors.Is(err, reviewauth.ErrUnavailable):
			return nil, err
		case err != nil && errors.Is(err, reviewauth.ErrUnauthenticated):
			return nil, err
		case err != nil:
			return nil, &reviewauth.RejectedError{Reason: "client certificate: " + err.Error()}
		case ok:
			return checkResponse(resp)
		}
	}
	if m.opts.Authenticator != nil {
		resp, ok, err := m.opts.Authenticator.AuthenticateRequest(r)
		switch {
		case err != nil:
			return nil, err
		case ok:
			return checkResponse(resp)
		}
	}
	return nil, errNoCredential
}

func checkResponse(resp *authenticator.Response) (*authenticator.Response, error) {
	if resp == nil || resp.User == nil {
		return nil, errors.New("httpauth: authenticator reported success without a user")
	}
	return resp, nil
}

func (m *middleware) unavailable(w http.ResponseWriter, err error) {
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

// stripIdentityHeaders deletes the front-proxy identity headers a client
// might send to impersonate someone behind a proxy that trusts them, and any
// non-canonical spelling of Authorization, which authenticators (reading the
// canonical key) would not see but a proxy would forward. The canonical
// Authorization is deleted after authentication.
func stripIdentityHeaders(h http.Header) {
	for key := range h {
		if key != "Authorization" && strings.EqualFold(key, "Authorization") {
			delete(h, key)
			continue
		}
		if len(key) >= len("X-Remote-") && strings.EqualFold(key[:len("X-Remote-")], "X-Remote-") {
			rest := key[len("X-Remote-"):]
			if strings.EqualFold(rest, "User") || strings.EqualFold(rest, "Uid") || strings.EqualFold(rest, "Group") ||
				(len(rest) >= len("Extra-") && strings.EqualFold(rest[:len("Extra-")], "Extra-")) {
				delete(h, key)
			}
		}
	}
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
		return a, authz.Check(ctx, az, a)
	}
	var err error
	for _, alt := range alts.alts {
		err = authz.Check(ctx, az, alt)
		if err == nil || !errors.Is(err, reviewauth.ErrDenied) {
			return alt, err
		}
		a = alt
	}
	return a, err
}
