// Package cache puts a bounded, coalescing cache in front of any
// authenticator.Token ([NewTokenAuthenticator]) or authorizer.Authorizer
// ([NewAuthorizer]) of k8s.io/apiserver, and returns the same interface:
// the cached review flow of authn and authz, for authenticators and
// authorizers of your own (OIDC, a webhook, a TokenFunc, RBAC).
// authn.NewForConfig and authz.NewForConfig are these decorators in front
// of their review clients.
//
// # The flow
//
// A call is answered from the cache when it can be. On a miss, concurrent
// identical calls share one call of the wrapped authenticator or authorizer,
// which runs detached from every caller's cancellation, under its own
// Timeout, and is cancelled when every caller has left; each caller leaves
// as soon as its own context ends (with "could not check"). The shared
// call's answer is judged by the contract below, cached for its TTL, and
// handed to every caller. Caches are bounded LRUs (a separate one for
// rejections, so that a flood of bad tokens cannot evict good identities),
// expire lazily (no goroutine), and are keyed by keyed hashes (a PRF under a
// random per-process secret): a cache never holds a token, and a caller
// cannot predict or collide keys.
//
//   - Tokens are keyed with the audiences of the context
//     (authenticator.AudiencesFrom), as k8s.io/apiserver's token cache
//     keys them. An identity is cached for SuccessTTL, never past the
//     token's exp when it is a JWT.
//   - Authorizer attributes are keyed by a canonical encoding of every
//     attribute an authorizer can read (user name, UID, groups as a set,
//     extras, verb, path, resource attributes, field and label
//     selectors), compared in full on every hit, so two different requests
//     never share an entry; [AuthorizerOptions].CacheKeyIgnoredExtras
//     leaves named extras out, and [AuthorizerOptions].SubjectAccessReviewKey
//     keys on the SubjectAccessReview the attributes make instead
//     (authz's). Requests whose caller-controlled attributes are large are
//     not cached (kubernetes#141457), only coalesced.
//
// TTLs: zero means the default; a negative TTL disables caching of that
// kind of answer, as 0 does for k8s.io/apiserver's cache TTL flags.
//
// # What a wrapped authenticator or authorizer answers
//
// One contract, the one httpauth and grpcauth map to status codes:
//
//   - An error matching reviewauth.ErrUnavailable means "could not check":
//     it is never cached, and is returned as it is (503, Unavailable).
//     So is any error of a call whose context ended (the Timeout), as a
//     *reviewauth.ReviewError. Opt-in StaleIfError may then serve a
//     success cached less than StaleIfError past its TTL.
//   - An authenticator's any other error, or its refusal (nil, false, nil),
//     is a rejection: cached for FailureTTL and returned as it is (401,
//     Unauthenticated). A rejection marked with [NoCache] is returned and
//     not cached. Authenticated without a user is "could not check".
//   - An authorizer's decision without an error is cached: an Allow for
//     AllowedTTL, a Deny or NoOpinion for DeniedTTL. An authorizer's error
//     is never cached; it comes back with DecisionDeny (an error never
//     allows) and the authorizer's reason.
//   - Conditional decisions (a conditions-aware authorizer's
//     ConditionsAwareAuthorize, k8s.io/apiserver v0.37) are never cached;
//     unconditional ones are, apart from those of Authorize.
//     EvaluateConditions goes to the wrapped authorizer.
//
// Stale-if-error follows one rule for both decorators: only successes (an
// identity, an Allow) are kept past their TTL, only while the wrapped one
// cannot check, never when caching of successes is disabled, never past a
// token's exp, and any answer replaces the stale success. A caller whose
// own context ends gets "could not check", not a stale success.
//
// The errors a wrapped authenticator returns reach its callers as they are
// (a cached rejection is the same error value): they must not quote the
// token. Errors the decorators make themselves (a caller that left, a call
// that panicked) are *reviewauth.ReviewError values that never do.
//
// A decorator never wraps another: given one (or authn.Authenticator,
// authz.Authorizer), the constructors wrap what it wraps, with the new
// options.
//
// # Revocation
//
// A cache answers for its TTL with what it learnt, unless told that it no
// longer holds. [TokenAuthenticator.Revoke] is told that objects a token
// can be bound to (a pod, a node, a ServiceAccount, by UID) are gone, and
// promises, once it returns:
//
//   - no cached identity bound to one of the UIDs is served again, fresh
//     or stale-if-error (an identity is bound to a UID when its user's
//     GetUID() equals it, or its extra
//     "authentication.kubernetes.io/pod-uid" or
//     "authentication.kubernetes.io/node-uid" holds it);
//   - for RevocationRetention (default [DefaultRevocationRetention], one
//     minute), an identity bound to one of the UIDs that a review returns,
//     in flight during Revoke or started after it, is refused: an error
//     matching reviewauth.ErrUnauthenticated (401), cached as a rejection.
//     The API server itself keeps authenticating a deleted pod's token for
//     about 10 s (its own token cache), so forgetting alone would bring
//     the identity back with the next review. UIDs are never reused, so
//     refusing them is always right; the retention and MaxRevoked
//     (default [DefaultMaxRevoked] UIDs, the least recently revoked
//     forgotten first) only bound the memory;
//   - a review in flight during Revoke is never cached, whatever identity
//     it returns (a generation check), even with the retention disabled.
//
// [Authorizer.ForgetUser] and [Authorizer.ForgetAll] do the same for
// decisions (about one user, or all): once they return, no decision made
// before is served, fresh or stale, and decisions in flight are handed to
// their callers but not cached. Both walk their bounded cache once, keep no
// index from UIDs or users to keys, and start no goroutine; hits do not
// pay for them.
//
// Metrics (package metrics) and OpenTelemetry spans are opt-in through the
// options; neither costs anything when off, and a hit allocates nothing.
package cache
