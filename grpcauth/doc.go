// Package grpcauth brings Kubernetes delegated authentication and
// authorization to gRPC servers, and Kubernetes service-account tokens to
// gRPC and HTTP clients.
//
// # Servers
//
// [New] validates [Options] and returns an [Interceptor], whose
// UnaryServerInterceptor and StreamServerInterceptor check every call
// against per-method [Rule]s, keyed by full method name. A rule says where
// the bearer token is ([FromMetadata], the default, or [FromField] for APIs
// such as the Kubernetes SnapshotMetadata API that put it in the request
// message) and which authorizer.Attributes the call needs, built from the
// request message ([Resource], [JoinAttributes], or any [AttributesFunc]).
// Every attribute set must be allowed. A method without a rule is denied;
// health and reflection can be skipped with [HealthAndReflection]. A stream
// is checked before its handler starts: with its token from the metadata,
// and, when the check needs the request message, with the first message,
// which the interceptor receives itself when the method's request type is
// in the protobuf registry (generated code registers it) and hands to the
// handler's first RecvMsg. For other streams the handler starts first and
// whatever it sets or sends is held until its first RecvMsg has passed the
// check, and dropped if it failed (see
// [Interceptor.StreamServerInterceptor]). Nothing reaches a caller that is
// refused but the status. The handler finds the caller's user.Info with request.UserFrom
// (k8s.io/apiserver/pkg/endpoints/request), as an HTTP handler behind
// httpauth does; the "authorization" metadata entry is removed from its
// context unless [Options.KeepAuthorizationMetadata] is set.
//
// Errors map to status codes at this edge only:
//
//	no token, or a rejected token: any         codes.Unauthenticated
//	authenticator error but ErrUnavailable
//	(as httpauth's 401)
//	authenticated but not allowed, an unknown  codes.PermissionDenied
//	method, or a *reviewauth.DeniedError from
//	a rule's AttributesFunc
//	a field authorization needs is missing     codes.InvalidArgument
//	the check could not be made: an            codes.Unavailable
//	ErrUnavailable from the authenticator, any
//	authorizer error, any other AttributesFunc
//	error
//
// Status messages never contain the token, and an Unavailable status
// carries a generic message. Its cause is logged as an error, as httpauth
// logs its 503s: at the default verbosity at most [UnavailableLogBurst]
// lines at once and one per [UnavailableLogInterval] after that, each
// counting the ones left out; from -v=2 every one.
//
// The interceptors need the request message only for rules that read it
// (a [TokenExtractor] whose FromMessage is true, or Attributes without
// [Rule].AttributesIgnoreMessage). A rule that reads neither can be checked
// from the metadata alone, which is all go-grpc-middleware's auth
// interceptor (an AuthFunc, func(ctx) (ctx, error)) gives: for servers that
// chain that package's interceptors, [Interceptor.AuthFunc] is the same
// check in that shape, with per-method skipping left to its selector.
//
// # Clients
//
// The token sources are oauth2.TokenSources (golang.org/x/oauth2), the
// interface grpc's credentials/oauth and client-go's
// transport.TokenSourceWrapTransport take: [FileTokenSource] reads a
// projected service-account token file and notices rotation,
// [TokenRequestSource] asks the TokenRequest API for a token with the
// server's audience and refreshes it before it expires; both return tokens
// whose Expiry is the token's. A [ContextTokenSource] (TokenRequestSource,
// [TokenSourceFunc]) can also be asked on behalf of a caller's context.
// [PerRPCCredentials] sends the token on gRPC calls (over TLS, or local
// credentials on a Unix socket; in tests, authtest.TransportCredentials over
// bufconn) and [RoundTripper] on HTTP requests, client-go's included
// (rest.Config.WrapTransport). Neither sends a token to a server it was not
// meant for: [PerRPCCredentials] binds itself to the first server it is
// used with, [RoundTripper] refuses the token to redirects that leave the
// caller's host, and [OnlyTo] names the servers explicitly. See
// [FileTokenSource] for when grpc's own credentials/jwt fits instead.
package grpcauth
