package grpcauth

import "context"

// IncomingKeyFound reports whether the interceptors read the incoming
// metadata without copying it (see findIncomingKey).
func IncomingKeyFound() bool { return incomingKey != nil }

// StripAuthorizationCopying is what the interceptors do to the handler's
// context when the metadata's context key could not be found: a shallow
// copy of the metadata without "authorization", made at once.
func StripAuthorizationCopying(ctx context.Context) context.Context {
	return stripAuthorizationKey(ctx, nil)
}

// StripAuthorization is what the interceptors do to the handler's context.
func StripAuthorization(ctx context.Context) context.Context {
	return stripAuthorization(ctx)
}
