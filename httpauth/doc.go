// Package httpauth protects an [net/http.Handler] the way the kubelet protects
// its API: every request is authenticated (a TLS client certificate or a
// bearer token), mapped to one or more [authorizer.Attributes], and
// authorized, before the handler runs.
//
// [New] builds the middleware from three parts, all in Kubernetes' own
// vocabulary:
//
//   - an [authenticator.Token] for bearer tokens (typically an
//     *authn.Authenticator, the same field as grpcauth's), and, optionally,
//     an [authenticator.Request] for client certificates
//     ([NewClientCertAuthenticator], k8s.io/apiserver's x509 authenticator
//     behind a verification cache);
//   - an [authorizer.UnconditionalAuthorizer] (typically an
//     *authz.Authorizer, or a chain from authz.Flags);
//   - an [AttributesMapper]: [Kubelet], [RequestInfo], [NonResource] or
//     [StaticRoutes], or your own [AttributesMapperFunc].
//
// # Credentials
//
// A client certificate is tried first, as in the API server's union of
// authenticators: a request that presents a verified certificate is that
// certificate's user, and its bearer token, if any, is not reviewed. A
// certificate that fails verification is answered with 401 even if a valid
// token comes with it. A verified certificate that yields no user (no CN)
// falls through to the token. A request with neither is answered with 401,
// except a GET or HEAD to one of [Options].AlwaysAllowPaths, which is served
// as the anonymous user (system:anonymous, group system:unauthenticated),
// as k8s.io/apiserver serves its always-allow paths; a credential presented
// there is still checked, and a bad one is still 401. (apiserver's path
// authorizer allows every method there; other methods are authorized here
// unless [Options].AlwaysAllowMethods lists them.)
//
// Every authenticated user is in the group system:authenticated, whatever
// authenticated it (a client certificate, a token, an authenticator of your
// own): the middleware adds it, exactly as k8s.io/apiserver's
// AuthenticatedGroupAdder does around the API server's, the kubelet's and
// kube-rbac-proxy's authenticators (not to system:anonymous, nor to a user
// already in system:unauthenticated), so that RBAC bound to that group
// grants the same here as there.
//
// The middleware reads the bearer token from the Authorization header as
// RFC 6750 says (the same parser reads grpcauth's "authorization" metadata),
// which differs from k8s.io/apiserver's bearertoken authenticator (the
// kubelet's) on three headers: "Bearer  <token>" (more than one space) is
// the token here, and no credential there; "Bearer <token> extra" is a
// malformed token here (401, no TokenReview), and <token> there; two
// Authorization headers are refused here (401), and the first one is used
// there. Refusing what another hop could read differently is the safe side.
//
// # Paths
//
// The request path is cleaned with [CleanPath] before anything looks at it:
// "//", "/./" and "/../" are resolved (a trailing slash is kept), and
// percent-encoded slashes, dots, backslashes and percent signs, and paths
// that do not decode to valid UTF-8 (such as the overlong "%C0%AE%C0%AE"),
// are refused with 400 Bad Request, because different servers decode them
// differently.
// The request the handler sees carries the cleaned path, so the path that was
// authorized is the path that is served (or proxied).
//
// # Responses
//
// Failures are answered with a metav1.Status JSON body, as the API server
// does, and never reach the handler:
//
//   - 400 Bad Request: a path that cannot be cleaned, or a mapper error;
//   - 401 Unauthorized, with "WWW-Authenticate: Bearer": no credential, or a
//     rejected one: any authenticator error that does not match
//     reviewauth.ErrUnavailable, including the plain errors with which
//     k8s.io/apiserver's authenticators (x509, union, the token cache)
//     report a bad credential, and a token the token authenticator neither
//     accepts nor errors on;
//   - 403 Forbidden: the authorizer denied (or had no opinion on) one of the
//     attribute sets; the body carries the authorizer's reason;
//   - 405 Method Not Allowed: the mapper has no verb for the method;
//   - 503 Service Unavailable, with Retry-After: an authenticator error that
//     matches reviewauth.ErrUnavailable (the API server could not be asked;
//     a custom authenticator says so by wrapping it), or an authorizer error
//     that is not a denial. An outage is never reported as 401 or 403, and
//     nothing is ever answered with 500.
//
// # Headers
//
// On every request, including requests to always-allow paths and requests
// it refuses, the middleware deletes, before anything else, the client-sent
// identity headers X-Remote-User, X-Remote-Uid, X-Remote-Group and
// X-Remote-Extra-*, every Impersonate-* header (a proxy that forwards with
// its own credentials would otherwise hand every caller impersonation), and
// Proxy-Authorization. Names are compared case-insensitively with '_' read
// as '-', since CGI and WSGI upstreams read X-Remote_User as X-Remote-User.
// The Authorization header is deleted once authentication has read it. With
// [Options].PropagateIdentity, the middleware then sets the X-Remote-*
// headers from the authenticated identity (never from the anonymous user of
// an always-allow path), for handlers that read them.
//
// # Reverse proxies
//
// A reverse proxy must send its upstream what was authorized, and
// httputil.ReverseProxy removes every header the client names in its
// Connection header (hop-by-hop) before Rewrite runs (after Director): a
// client sending "Connection: X-Remote-User" would otherwise delete an
// identity header set before the proxy ran, or a header the decision read.
// A [Forwarder] ([Options].Forwarder) closes that: the middleware keeps the
// identity headers, the headers the decision reads ([DecisionHeader]) and
// Authorization out of the client's Connection header, refuses with 400 a
// decision header sent in two spellings (X-Namespace and X_Namespace, which
// an upstream may read alike) or a single-valued one sent twice, and
// [Forwarder.Header], called at the end of Rewrite (or by a forwarder of
// your own), sets the identity headers and the authorized decision headers
// on the forwarded request:
//
//	fw, _ := httpauth.NewForwarder(httpauth.ForwarderOptions{Identity: httpauth.FrontProxyHeaders()})
//	protect, _ := httpauth.New(httpauth.Options{..., Forwarder: fw})
//	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
//		pr.SetURL(upstream)
//		fw.Header(pr.Out.Header, pr.In)
//	}}
//	http.Handle("/", protect(proxy))
//
// # Logging
//
// The middleware logs through klog.FromContext of the request's context,
// never a credential. At the default verbosity it logs refusals (400, 401,
// 403, 405: user, method, the cleaned path and the reason) and outages
// (503, as errors), each at most [RefusalLogBurst] lines at once and one per
// [RefusalLogInterval] after that, each line counting the ones left out
// ("suppressed"); a client looping on a bad token costs a line a second, not
// a line a request. From -v=2 every refusal and outage is logged; allowed
// requests are logged from -v=4 only, so that serving costs no log write at
// the default verbosity.
package httpauth
