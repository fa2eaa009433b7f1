// Package bearer is the one bearer-token parser of reviewauth: the HTTP
// Authorization header (httpauth, and authn.Authenticator as an
// authenticator.Request) and the gRPC "authorization" metadata entry
// (grpcauth.FromMetadata) are read by it alike.
//
// It reads RFC 6750, which differs from k8s.io/apiserver's bearertoken
// authenticator (the kubelet's) on three inputs, each time refusing what
// another hop could read differently: "Bearer  <token>" (more than one
// space) is the token here and no credential there; "Bearer <token> extra"
// is "<token> extra" here, which authn then refuses as malformed, and
// <token> there; two Authorization headers are refused here, and the first
// one is used there. httpauth's TestBearerParsingAgainstAPIServer runs both
// side by side.
package bearer

import (
	"net/http"
	"strings"

	"github.com/reviewauth/reviewauth"
)

// Parse extracts the credential from an Authorization header value of the
// Bearer scheme (RFC 6750). The scheme name is case-insensitive and may be
// followed by one or more spaces. ok is false when the value is empty or
// uses another scheme: that is "no bearer credential here", not an error.
// The token is not validated: an empty or malformed token is refused by the
// authenticator (authn refuses it without a review).
func Parse(value string) (token string, ok bool) {
	const scheme = "bearer"
	if len(value) <= len(scheme) || !strings.EqualFold(value[:len(scheme)], scheme) {
		return "", false
	}
	if value[len(scheme)] != ' ' {
		return "", false
	}
	return strings.TrimLeft(value[len(scheme):], " "), true
}

// FromRequest returns the bearer token of r's Authorization header. ok is
// false, with no error, when r has no Authorization header or one of
// another scheme: no credential, so that another authenticator may try.
// More than one Authorization header, or an empty bearer token, is a
// rejection (an error matching reviewauth.ErrUnauthenticated).
func FromRequest(r *http.Request) (token string, ok bool, err error) {
	values := r.Header.Values("Authorization")
	if len(values) == 0 {
		return "", false, nil
	}
	if len(values) > 1 {
		return "", false, &reviewauth.RejectedError{Reason: "more than one Authorization header"}
	}
	token, ok = Parse(values[0])
	if !ok {
		return "", false, nil
	}
	if token == "" {
		return "", false, &reviewauth.RejectedError{Reason: "empty bearer token"}
	}
	return token, true, nil
}
