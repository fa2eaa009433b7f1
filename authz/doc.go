// Package authz decides whether an authenticated identity may do something,
// in the vocabulary of k8s.io/apiserver v0.37: [authorizer.Attributes] in,
// [authorizer.Decision] (zero value Deny), a reason and an error out.
//
// # Asking the API server
//
// [Authorizer] asks with authorization.k8s.io/v1 SubjectAccessReviews
// ([NewForConfig], or [New] over a narrow [SubjectAccessReviewer]). It is two
// pieces: a [Client], the SubjectAccessReview client and its attribute
// mapping, which caches nothing, behind package cache's [cache.Authorizer],
// which carries the cached-review flow authn shares (compose them yourself
// with [NewClient] and package cache). It keeps what k8s.io/apiserver's
// webhook authorizer does and fixes what a node agent under load needs:
//
//   - a bounded cache with separate TTLs for Allow and for Deny/NoOpinion
//     ([DefaultAllowedTTL], [DefaultDeniedTTL]); errors are never cached;
//   - entries keyed by a length-prefixed encoding of the whole review
//     (user, UID, sorted groups, extra, every attribute, field and label
//     selectors), located by a seeded hash and compared in full on every
//     hit, so two different reviews never share an entry; concurrent misses
//     are coalesced under a keyed hash (a PRF with a per-process secret) of
//     the same encoding. The one exception is the credential-id extra, which names the token
//     rather than the caller and differs for every token: it is left out of
//     the key by default ([Options.CacheKeyIgnoredExtras]), so that a client
//     minting a token per call costs one review per TTL, not one per call;
//   - no caching of requests whose caller-controlled attributes, selectors
//     included, are large (kubernetes#141457);
//   - one SubjectAccessReview for any number of concurrent identical misses,
//     which no single caller's deadline or cancellation bounds;
//   - bounded retries with backoff and Retry-After (HTTP/2 stream resets
//     included), within a total budget, each request under its own timeout
//     ([Options.AttemptTimeout]), with a bound on reviews in flight;
//   - answers read up to a bound ([reviewauth.MaxAnswerBytes]) and never logged;
//     the API server refusing the service's own credentials is logged at
//     the default level and counted, and [SelfCheck] finds it at start-up;
//   - failing closed: an error never comes with Allow, and "could not
//     check" (a *[reviewauth.ReviewError], matching
//     [reviewauth.ErrUnavailable]) is distinguishable from a denial.
//
// A cache hit costs no allocation.
//
// # Deciding locally
//
// Some decisions need no API server: [AlwaysAllowGroups] (opt-in),
// [StaticRules], [NodeLocal], which admits
// only callers whose node-bound service-account token names this node, and
// [NodeScope], which lets such callers list, watch and deletecollection
// node-scoped resources (ResourceSlices by default) only with a field
// selector naming their own node.
//
// # Composing
//
// [First] is a union, like k8s.io/apiserver's: the first Allow or Deny wins
// and NoOpinion moves on, but an error stops it and denies. [All] requires
// every authorizer to allow; NoOpinion counts as not allowed. Typical chains:
//
//	// a metrics endpoint: admins and static rules locally, the rest by SAR
//	authz.First(authz.AlwaysAllowGroups("system:masters"), static, sar)
//	// a DRA plugin: callers on this node, and allowed by RBAC
//	authz.All(authz.NodeLocal(authz.NodeLocalOptions{NodeName: node}), sar)
//	// a node-local API proxy: also, collections only of this node's objects
//	authz.All(authz.NodeLocal(authz.NodeLocalOptions{NodeName: node}), scope, sar)
//
// Paths served without authorization and without a credential (health
// probes) are not an authorizer's business: they are httpauth.Options'
// AlwaysAllowPaths (--authorization-always-allow-paths), decided before
// authentication and mapping.
//
// # What the transports use
//
// httpauth and grpcauth authorize every request with [Check], which is All
// over the request's attribute sets: each set is asked of the configured
// authorizer (an [Authorizer], or a First/All chain of them), and the request
// proceeds only if every set is allowed. Check turns the result into the
// shared errors: nil, a [reviewauth.ErrDenied] (Deny or NoOpinion), or a
// [reviewauth.ErrUnavailable] (any error), which the transports map to 403
// and 503 (PermissionDenied and Unavailable).
//
// Every authorizer in this package implements the whole
// [authorizer.Authorizer] (so it fits union.New) and hence
// [authorizer.UnconditionalAuthorizer] (so it fits filters.WithAuthorization).
// None is conditions-aware.
package authz
