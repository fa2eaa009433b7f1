// Package authtest provides a fake Kubernetes API server for tests.
//
// [Server] is an [net/http/httptest] server with TLS that answers the three
// requests a delegated authenticator and authorizer make, the way a real
// kube-apiserver v1.37.2 does:
//
//   - TokenReview: POST /apis/authentication.k8s.io/v1/tokenreviews
//   - SubjectAccessReview: POST /apis/authorization.k8s.io/v1/subjectaccessreviews
//   - TokenRequest: POST /api/v1/namespaces/{namespace}/serviceaccounts/{name}/token
//   - the service-account key set: GET /openid/v1/jwks, served only as
//     application/jwk-set+json (a client that accepts only
//     application/json gets 406, as from a real server)
//
// and the two requests a service makes to check its own credentials at
// start-up: SelfSubjectReview (who am I) and SelfSubjectAccessReview (may
// I), answered for the administrator ([WithAdminUser]) by the
// administrator policy ([Server.SetAdminPolicy]), which also decides
// whether the administrator may create reviews at all: a service without
// system:auth-delegator gets the 403 a real server sends. [WithHTTP2] makes
// the server speak HTTP/2, as a real one does.
//
// Requests and answers are JSON, or protobuf when the client sends and
// prefers it (client-go's generated clientsets do, for built-in types);
// error answers are metav1.Status objects in JSON, which every client reads.
// Reviews answer HTTP 201 with the review object. A rejected token is an answer,
// not a failure: the status has no authenticated field and an error string
// worded like the real server's, for example
//
//	[invalid bearer token, token audiences ["snap.example"] is invalid for the target audiences ["other"]]
//
// Error and status strings never contain the token.
//
// Tokens are registered with [Server.AddToken] or minted with
// [Server.MintToken]; service accounts registered with
// [Server.AddServiceAccount] can ask for tokens through TokenRequest.
// Authorization answers come from a [Policy], for example [Rules].
//
// Every request must carry the administrator bearer token of
// [Server.Config]; anything else gets 401 with a Status body, like a real
// server. Faults ([Server.InjectFault]), blocking ([Server.Block]) and
// observation ([Server.Count], [Server.InFlight], [Server.TokenReviews], ...)
// let tests drive clients through failures and concurrency without sleeping.
//
// # Testing gRPC services
//
// [TransportCredentials] returns TLS transport credentials for a test
// server and its clients, over google.golang.org/grpc/test/bufconn or
// loopback, so that a client in a test sends its token with
// grpcauth.PerRPCCredentials (or grpc's credentials/oauth), which refuse
// insecure transports, exactly as in production, instead of setting the
// authorization metadata by hand.
//
// Time comes from a [k8s.io/utils/clock.PassiveClock] ([WithClock]), so token
// expiry can be tested with a fake clock. The server starts no goroutine of
// its own besides the ones [net/http/httptest] runs, and [Server.Close] stops
// all of them, even while requests are blocked or delayed.
package authtest
