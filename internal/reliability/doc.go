// Package reliability holds the reliability and security suite of reviewauth:
// tests only, run with the rest of the module (go test -race ./...).
//
// It drives the real authn, authz, httpauth and grpcauth packages against the
// fake API server of package authtest, over loopback HTTP and gRPC, and
// proves what the library promises when things go wrong:
//
//   - TestFaultMatrix: every fault authtest can inject (429 with Retry-After,
//     5xx, timeouts, resets, slow answers, malformed and wrong answers),
//     for TokenReviews and SubjectAccessReviews, through the HTTP middleware
//     and the gRPC interceptor. Nothing is ever allowed, outages are 503 /
//     Unavailable, retries stay within their bound, and errors are not
//     cached.
//   - TestFloodMalformedTokens, TestFloodUnknownTokens and
//     TestFloodForgedTokensPreVerified: review floods cost the API server
//     nothing, or at most one bounded, cached review per token, while a
//     legitimate caller keeps its latency.
//   - TestStaleIfErrorThroughMiddleware and TestStaleIfErrorPairs:
//     stale-if-error end to end, for identities and for (token, attributes)
//     pairs.
//   - TestSoak: a loopback load with token churn under -race, checked
//     decision by decision against the authtest policy, with bounded memory
//     and no goroutine growth. SOAK_DURATION (a Go duration, default 10s)
//     sets its length.
//
// The README's "Threat model" section lists each threat, what the
// library guarantees, and the tests that prove it.
package reliability
