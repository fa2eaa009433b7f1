// Package httpauth protects an [net/http.Handler] the way the kubelet protects
// its API: every request is authenticated (a TLS client certificate or a
// bearer token), mapped to one or more [authorizer.Attributes], and
// authorized, before the handler runs.
//
// [New] builds the middleware from three parts, all in Kubernetes' own
// vocabulary:
//
//   - an [authenticator.Request] for bearer tokens (typically an
//     *authn.Authenticator) and, optionally, one for client certificates
//     ([NewClientCertAuthenticator], k8s.io/apiserver's x509 authenticator
//     behind a verification cache);
//   - an [authorizer.Authorizer] (typically an *authz.Authorizer);
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
// falls through to the token. A request with neither is answered with 401:
// there are no anonymous requests.
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
//     rejected one;
//   - 403 Forbidden: the authorizer denied (or had no opinion on) one of the
//     attribute sets; the body carries the authorizer's reason;
//   - 405 Method Not Allowed: the mapper has no verb for the method;
//   - 503 Service Unavailable, with Retry-After: the API server could not be
//     asked, or any error that is not a rejection or a denial. An outage is
//     never reported as 401 or 403, and nothing is ever answered with 500.
//
// # Headers
//
// On every request, including requests to always-allow paths, the middleware
// deletes the client-sent identity headers X-Remote-User, X-Remote-Uid,
// X-Remote-Group and X-Remote-Extra-*, and the Authorization header, before
// the handler runs. With [Options].PropagateIdentity, it then sets the
// X-Remote-* headers from the authenticated identity, for proxies whose
// upstream trusts them.
package httpauth
