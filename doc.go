// Package reviewauth is Kubernetes delegated authentication and
// authorization for node agents, CSI sidecars and DRA plugins: one hardened
// implementation of "who is calling?" (TokenReview) and "may they do this?"
// (SubjectAccessReview), with caching, coalescing, bounded retries and
// audience checks, as gRPC interceptors and net/http middleware.
//
// This package holds only what the others share: the error contract
// ([ErrUnauthenticated], [ErrDenied], [ErrUnavailable], [ErrRefused] and
// the error types that match them), and how authn and authz reach the API
// server ([ClientOptions], [DefaultQPS], [MaxAnswerBytes]). The work is done
// by its sub-packages, and data flows one way through them:
//
//	transport adapter (grpcauth, httpauth)
//	    -> authn: who is calling?      authenticator.Token / authenticator.Request -> user.Info
//	    -> authz: may they do this?    authorizer.Attributes -> authorizer.Decision
//	    -> your handler, with the identity in request.UserFrom(ctx)
//
// The packages:
//
//   - authn asks the API server with TokenReviews for this service's
//     audiences, and caches identities (never past the token's exp) and
//     rejections, under a keyed SHA-256 of the token.
//   - authz asks with SubjectAccessReviews and caches decisions under a
//     collision-free key, and decides locally where it can: always-allow
//     groups, static rules, and node locality for node agents.
//   - cache is the cached-review flow authn and authz are built on (look
//     up, coalesce, call, judge, store, stale-if-error), as decorators over
//     any authenticator.Token or authorizer.Authorizer: put it in front of
//     an authenticator or authorizer of your own.
//   - grpcauth has unary and stream server interceptors with per-method
//     rules built from request messages, and client credentials fed by a
//     projected token file or the TokenRequest API.
//   - httpauth has middleware with the kubelet's path-to-attributes table,
//     RequestInfo, non-resource and static mappers, always-allow paths, and
//     cached client certificate verification.
//   - metrics has Prometheus collectors for the caller's own registry.
//   - serving is the glue of a protected server: one set of flags that
//     builds the authenticator, the authorizer and the middleware,
//     certificates reloaded from their files, and HTTP and gRPC servers
//     hardened against clients that hold connections.
//   - authtest is a fake API server, exported so that you can test your
//     service the way reviewauth tests itself.
//
// # The three flows
//
// CSI snapshot-metadata sidecar (KEP-3314): a backup application puts a
// token for the sidecar's audience in the security_token field of a
// server-streaming request. grpcauth reads it with FromField, authn reviews
// it with the sidecar's audience, and authz checks get volumesnapshots in the
// request's namespace (both snapshots of a delta). See
// examples/snapshotmetadata.
//
// Kubelet-style node API: httpauth authenticates bearer tokens or client
// certificates (CN is the user, O the groups) and maps paths to nodes/metrics,
// nodes/stats, nodes/log, nodes/checkpoint or nodes/proxy with the Kubelet
// mapper, so that a scraper bound only to nodes/metrics gets /metrics and
// nothing else. See examples/metricsproxy.
//
// DRA node plugin or node-local proxy: callers present pod-bound tokens;
// authz.All(authz.NodeLocal(...), sar) admits only callers whose token's
// authentication.kubernetes.io/node-name extra names this node, and whom RBAC
// allows. See examples/draplugin.
//
// # Safety defaults
//
//   - Fail closed: no error path yields an allow or an identity.
//   - An outage is not a denial: "could not check" is [ErrUnavailable]
//     (503, codes.Unavailable); a rejected credential is [ErrUnauthenticated]
//     (401, codes.Unauthenticated); a denial is [ErrDenied] (403,
//     codes.PermissionDenied).
//   - An audience is required. Accepting tokens for the API server's own
//     audience needs an explicit, documented-as-dangerous opt-in, because a
//     service that accepts them can replay them against the API server.
//   - Tokens are secrets: they never appear in a log line, an error, a metric
//     label or a span, and caches key them by a keyed SHA-256.
//   - Every cache, every queue and every token is bounded, and the bounds are
//     documented where they are set.
//   - No goroutine runs in the background; time is injected
//     (k8s.io/utils/clock).
package reviewauth
