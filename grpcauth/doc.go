// Package grpcauth brings Kubernetes delegated authentication and
// authorization to gRPC servers, and Kubernetes service-account tokens to
// gRPC and HTTP clients.
//
// # Servers
//
// [UnaryServerInterceptor] and [StreamServerInterceptor] check every call
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
// check, and dropped if it failed (see [StreamServerInterceptor]). Nothing
// reaches a caller that is refused but the status.
// The handler finds the caller's user.Info with [UserFrom] or
// request.UserFrom; the "authorization" metadata entry is removed from its
// context unless [Options.KeepAuthorizationMetadata] is set.
//
// Errors map to status codes at this edge only:
//
//	no token, or a rejected token            codes.Unauthenticated
//	authenticated but not allowed, or an
//	unknown method                           codes.PermissionDenied
//	a field authorization needs is missing   codes.InvalidArgument
//	the check could not be made, or any
//	unclassified error                       codes.Unavailable
//
// Status messages never contain the token.
//
// # Clients
//
// A [TokenSource] supplies tokens: [FileTokenSource] reads a projected
// service-account token file and notices rotation, [TokenRequestSource]
// asks the TokenRequest API for a token with the server's audience and
// refreshes it before it expires. [PerRPCCredentials] sends the token on
// gRPC calls (over TLS, or local credentials on a Unix socket) and
// [RoundTripper] on HTTP requests. Neither sends a token to a server it was
// not meant for: [PerRPCCredentials] binds itself to the first server it
// is used with, [RoundTripper] refuses the token to redirects that leave
// the caller's host, and [OnlyTo] names the servers explicitly.
package grpcauth
