// Package authn answers "who is calling?" for a bearer token by asking the
// Kubernetes API server with an authentication.k8s.io/v1 TokenReview, scoped
// to this service's audiences.
//
// [Authenticator] implements k8s.io/apiserver's authenticator.Token and
// authenticator.Request, so it drops into apiserver's filters, unions and
// anything else that speaks that vocabulary. It is two pieces, composed by
// [New] and [NewForConfig]:
//
//   - a [Client], the TokenReview client and the judgement of its answer,
//     which caches nothing;
//   - package cache's [cache.TokenAuthenticator] in front of it, which
//     carries the cached-review flow (look up, coalesce, call, store) that
//     authz shares. Compose them differently with [NewClient] and package
//     cache: a cache in front of a union of a Client and an authenticator
//     of your own, say.
//
// Together they add what a service on a node needs and apiserver's
// delegated authenticator lacks:
//
//   - Audiences are required. A token minted for the API server's own
//     audience is refused unless the caller opts in, because a service that
//     accepts such tokens can replay them against the API server. Audiences
//     in a call's context (authenticator.WithAudiences) replace the
//     configured ones for that call, as in apiserver's webhook
//     authenticator, under the same rules; so one Authenticator can serve a
//     service whose audience is known per call ([Options].AudiencesFromContext).
//   - Results are cached under a keyed hash of the token and the context's
//     audiences (a keyed SHA-256 or BLAKE2b, whichever is faster on the
//     CPU), never under the token itself.
//     Successes live for [Options.SuccessTTL] but never past the token's own
//     exp claim; rejections are cached for [Options.FailureTTL] in a separate,
//     separately bounded cache, so a flood of bad tokens cannot evict good
//     identities; errors are never cached.
//   - Concurrent reviews of one token are coalesced into one TokenReview,
//     which no single caller's deadline or cancellation bounds.
//   - Reviews that fail with 429, 5xx, a reset or refused connection (an
//     HTTP/2 stream reset or GOAWAY included) or a timeout are retried with
//     jittered exponential backoff, honouring Retry-After, within the
//     caller's deadline and a total budget; each request has its own
//     timeout ([Options.AttemptTimeout]), so one that hangs leaves the
//     budget to its retries.
//   - [NewForConfig]'s client never logs a request or response body, at
//     any klog verbosity or vmodule, contextual logging on or off, and
//     bounds answers ([reviewauth.MaxAnswerBytes]). A malformed, contradictory or
//     oversized answer is "could not check", and never cached. An answer
//     that is neither authenticated nor says why (client-go's fake
//     clientset; never a real API server) is a rejection, as in apiserver's
//     webhook, and is not cached.
//   - The API server refusing the service's own credentials (401, or 403
//     without system:auth-delegator) is logged at the default level, at
//     most once a minute, and counted; it is "could not check" for the
//     caller, never cached. [SelfCheck] finds it at start-up.
//   - At most [Options.MaxInFlight] TokenReviews are in flight; more callers
//     wait, subject to their own deadline.
//   - Empty, oversized and malformed tokens are refused locally, without a
//     review. An opt-in [PreVerifier] ([JWKSVerifier]) checks a token's
//     signature on a cache miss, in the Client, before the review: a token
//     the API server itself refuses as forged costs no review, and its
//     rejection is cached like any other; a token it verifies (the
//     cluster's signature, canonical spelling, valid now, for the call's
//     audiences) takes most turns of the review queue, and every other
//     token keeps a guaranteed share ([Options.MaxInFlight]).
//   - Failures are typed: a rejected token is an error matching
//     reviewauth.ErrUnauthenticated (401), and a review that could not be
//     done is a *reviewauth.ReviewError matching reviewauth.ErrUnavailable
//     (503). Neither ever carries the token.
package authn
