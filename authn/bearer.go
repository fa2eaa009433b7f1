package authn

import (
	"net/http"
	"strings"

	"k8s.io/apiserver/pkg/authentication/authenticator"

	"github.com/reviewauth/reviewauth"
)

// ParseBearer extracts the credential from an Authorization header value of
// the Bearer scheme (RFC 6750). The scheme name is case-insensitive and may be
// followed by one or more spaces. ok is false when the header is empty or
// uses another scheme: that is "no bearer credential here", not an error.
// The token returned is not validated: an empty or malformed token is
// refused by [Authenticator.AuthenticateToken] without a review.
//
// k8s.io/apiserver's bearertoken authenticator (the kubelet's) differs on
// purpose: it ignores "Bearer  <token>" (more than one space, which RFC
// 6750's 1*SP allows and ParseBearer reads as <token>), and it reads
// "Bearer <token> extra" as <token>, where ParseBearer returns
// "<token> extra", which is then refused as malformed.
func ParseBearer(header string) (token string, ok bool) {
	const scheme = "bearer"
	if len(header) <= len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return "", false
	}
	if header[len(scheme)] != ' ' {
		return "", false
	}
	return strings.TrimLeft(header[len(scheme):], " "), true
}

// Bearer returns an authenticator.Request that authenticates the bearer
// token of a request's Authorization header with t. A request with no
// Authorization header, or one of another scheme, yields (nil, false, nil)
// so that other authenticators in a union may try; a request with more than
// one Authorization header (k8s.io/apiserver's bearertoken reads the first),
// or an empty bearer token, is rejected. On
// success the Authorization header is removed, so handlers never see the
// token.
func Bearer(t authenticator.Token) authenticator.Request {
	return authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
		values := r.Header.Values("Authorization")
		if len(values) == 0 {
			return nil, false, nil
		}
		if len(values) > 1 {
			return nil, false, &reviewauth.RejectedError{Reason: "more than one Authorization header"}
		}
		token, ok := ParseBearer(values[0])
		if !ok {
			return nil, false, nil
		}
		if token == "" {
			return nil, false, &reviewauth.RejectedError{Reason: "empty bearer token"}
		}
		resp, ok, err := t.AuthenticateToken(r.Context(), token)
		if ok && err == nil {
			r.Header.Del("Authorization")
		}
		return resp, ok, err
	})
}
