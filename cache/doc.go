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
// A decorator changes the cost, not the answer: what the wrapped
// authenticator or authorizer answers comes back as it is (a cached
// rejection is the same error value), and only these answers are cached:
//
//   - An authenticator's identity ((resp, true, nil) with a user), for
//     SuccessTTL; its refusal ((nil, false, nil), or a Response without
//     ok), for FailureTTL; and its definite rejection, an error matching
//     reviewauth.ErrUnauthenticated (a *reviewauth.RejectedError, or any
//     error wrapping ErrUnauthenticated), for FailureTTL (401,
//     Unauthenticated). A rejection marked with [NoCache] is returned
//     without the mark and not cached.
//   - Any other error of an authenticator is returned as it is and not
//     cached, as k8s.io/apiserver's token cache does with every error: an
//     error matching reviewauth.ErrUnavailable means "could not check"
//     (503, Unavailable); any other is read by httpauth and grpcauth as a
//     rejection (401), as apiserver's filters read it, but is not kept
//     (apiserver's webhook authenticator reports a rejection and an
//     outage alike, with a plain error). A success comes back with the
//     warnings and audit annotations its call recorded (on every hit
//     too); other answers with none, as in apiserver.
//   - An authorizer's decision without an error: an Allow for
//     AllowedTTL, a Deny or NoOpinion for DeniedTTL. With an error, the
//     decision, the reason and the error come back as the wrapped
//     authorizer gave them, uncached (union.New reads a NoOpinion with an
//     error as "ask the next one", as it does from the webhook
//     authorizer). Conditional decisions (ConditionsAwareAuthorize,
//     k8s.io/apiserver v0.37) are never cached; unconditional ones are,
//     apart from those of Authorize. EvaluateConditions goes to the
//     wrapped authorizer.
//   - Nothing a call answers after its context ended (Timeout, or every
//     caller left) is cached, and its error is "could not check": a
//     *reviewauth.ReviewError wrapping the context's error. An
//     authenticator that authenticates without a user, and a call that
//     panics, are "could not check" too.
//
// Opt-in StaleIfError may serve a success cached less than StaleIfError
// past its TTL, while the wrapped one could not check. It follows one rule
// for both decorators: only successes (an identity, an Allow) are kept
// past their TTL, only while the wrapped one cannot check (its error
// matches reviewauth.ErrUnavailable), never when caching of successes is
// disabled, never past a token's exp, and any other answer replaces the
// stale success. A caller whose own context ends gets "could not check",
// not a stale success.
//
// The errors a wrapped authenticator returns reach its callers as they are:
// they must not quote the token. Errors the decorators make themselves (a
// caller that left, a call that panicked) are *reviewauth.ReviewError
// values that never do.
//
// A decorator never wraps another: given one (or authn.Authenticator,
// authz.Authorizer), the constructors wrap what it wraps, with the new
// options.
//
// # Differences from k8s.io/apiserver
//
// k8s.io/apiserver v0.37.2's token cache (pkg/authentication/token/cache,
// New with cacheErrs=false, as its delegated authentication builds it) and
// the webhook authorizer's caching (plugin/pkg/authorizer/webhook) are the
// oracles: cache/doc_test.go runs both and ours over the same wrapped
// authenticators and authorizers, as table rows and as FuzzAgainstAPIServer,
// and checks each against a model whose rules differ from apiserver's by
// exactly the rows below. Everything else is the same: what is cached and
// for how long (TTLs at their edges), keys by token and context audiences
// (in order, none and empty alike), errors returned as they are and never
// cached, warnings and audit annotations replayed on hits, one call for
// concurrent identical tokens, 8192 decisions, nothing cached from 10,000
// bytes of caller-controlled attributes. Each difference is deliberate;
// its tests pin it.
//
// Token cache:
//
//   - T1. A definite rejection (an error matching
//     reviewauth.ErrUnauthenticated) is cached for FailureTTL; apiserver
//     caches no error, so a client retrying a bad token costs a
//     TokenReview per attempt. TestTokenAgainstAPIServer/T1_*.
//   - T2. Authenticated without a user is "could not check" (503),
//     uncached; apiserver caches it and returns (resp, true, nil) with no
//     user. TestTokenAgainstAPIServer/T2_*, TestTokenErrorsAreNotCached.
//   - T3. A panic is "could not check" (a *reviewauth.ReviewError, 503,
//     the token redacted from the panic value); apiserver returns an
//     InternalError, which its filters answer 401.
//     TestTokenAgainstAPIServer/T3_panic, TestTokenPanicNeverLeaksTheToken.
//   - T4. A caller whose context has ended gets "could not check" (a
//     *reviewauth.ReviewError wrapping the context's error) at once, and
//     starts no call; apiserver starts the shared call anyway and returns
//     the bare context error or, at random, the answer.
//     TestTokenCallersAgainstAPIServer/T4_*.
//   - T5. The shared call is cancelled when every caller has left, and an
//     answer given after its context ended is not cached; apiserver runs
//     it to its end and caches it. TestTokenCallersAgainstAPIServer/T5_*.
//   - T6. The shared call is bounded by Timeout (default 10 s);
//     apiserver's by a fixed 30 s. TestTokenSharedCallTimeout.
//   - T7. The shared call sees the context values of the caller that
//     started it (its logger, its trace span), with a warning recorder and
//     an audit context of its own; apiserver's sees only the audiences.
//     TestTokenContextValuesAgainstAPIServer.
//   - T8. Identities and rejections are held in two bounded LRUs
//     (MaxEntries each, 4096), so that bad tokens cannot evict good
//     identities; apiserver's map is unbounded. TestTokenBounded.
//   - T9. An identity is never cached past its JWT's exp; apiserver
//     ignores exp. TestTokenExpCapsTTL.
//   - T10. A token larger than MaxTokenSize (16 KiB) is refused without a
//     call; apiserver passes it on. TestTokenLocalRefusals.
//   - T11. A zero TTL means the default and a negative one disables;
//     apiserver's zero disables (its flags keep that meaning: httpauth,
//     serving). TestTokenDisabledTTLs, TestTokenTTLEdges.
//   - T12. Opt-in StaleIfError; [TokenAuthenticator.Revoke] (see
//     Revocation). TestStaleIfErrorRule, TestRevoke*.
//   - T13. Security decision (authn's TokenReview client, not this
//     cache): a TokenReview answer "authenticated: true" with an empty
//     username is "could not check" (503), never cached; apiserver's
//     webhook authenticator authenticates a user with an empty name. No
//     Kubernetes authenticator answers so (unit-test fakes do); an
//     identity without a name cannot be authorized or audited by name, and
//     forwarded in front-proxy headers it reads as no identity at all.
//     authn: TestAuthenticatedWithoutUsernameAgainstAPIServer.
//
// Authorizer cache:
//
//   - A1. Concurrent identical misses share one call; the webhook sends
//     one SubjectAccessReview each. TestAuthorizerCallersAgainstWebhook/A1_*,
//     TestAuthorizerColdHerd.
//   - A2. Keys cover every attribute an authorizer can read, groups as a
//     set, compared in full on every hit (or, with SubjectAccessReviewKey,
//     the review the attributes make); the webhook keys the review's JSON,
//     groups in order. TestAuthorizerAgainstWebhook/A2_*,
//     TestAuthorizerKeyCoversEveryAttribute.
//   - A3. Selectors count towards MaxCacheableAttributeBytes; the webhook
//     leaves them out, so large selectors fill its cache
//     (kubernetes#141457). TestAuthorizerAgainstWebhook/A3_*,
//     TestAuthorizerOversizedNotCached.
//   - A4. A decision expires at exactly its TTL, as in apiserver's token
//     cache; the webhook's LRUExpireCache still serves it then, and 1 ns
//     later no more. TestAuthorizerAgainstWebhook/A4_*,
//     TestAuthorizerTTLEdges.
//   - A5. Authorize and ConditionsAwareAuthorize are cached apart, and
//     conditional decisions are passed through uncached; the webhook is
//     not conditions-aware. TestAuthorizerAgainstWebhook/A5_*,
//     TestAuthorizerConditions.
//   - A6. The cache's own errors (a caller whose context has ended, a
//     panic, nil attributes) come with DecisionDeny and a
//     *reviewauth.ReviewError; the webhook answers its decisionOnError
//     with the context's error, and a panic crosses it.
//     TestAuthorizerCallersAgainstWebhook/A6_*, TestAuthorizerDropIn.
//   - A7. As T5 and T6: the shared call is cancelled when every caller
//     has left, nothing it answers after its context ended is cached, and
//     its error then is "could not check" (the decision unchanged);
//     Timeout bounds it. TestAuthorizerCallersAgainstWebhook/A7_*,
//     TestAuthorizerCallerLeavesOnItsOwnDeadline.
//   - A8. Warnings and audit annotations the wrapped authorizer records
//     are replayed with every answer, as apiserver's token cache does;
//     the webhook's review records none. TestAuthorizerAgainstWebhook/A8_*.
//   - A9. As T11 and T12: TTLs, StaleIfError, [Authorizer.ForgetUser] and
//     [Authorizer.ForgetAll]. TestAuthorizerDisabledTTLs,
//     TestStaleIfErrorRule, TestForgetUser*.
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
