package httpauth_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/httpauth"
)

// TestAuthenticatorErrors plugs k8s.io/apiserver's own authenticators into
// the middleware. They report a bad credential with a plain error (x509
// with a chain it cannot verify, bearertoken for a token nobody accepts,
// union aggregating its members' errors, the token cache passing errors
// through): that is a rejection, 401. Only an error matching
// reviewauth.ErrUnavailable is "could not check", 503.
func TestAuthenticatorErrors(t *testing.T) {
	t.Parallel()
	now := time.Now()
	trusted := newRootCA(t, "trusted", now.Add(-time.Hour), now.Add(time.Hour))
	other := newRootCA(t, "other", now.Add(-time.Hour), now.Add(time.Hour))
	strangerCert, _ := other.client(t, "system:node:node-1", []string{"system:nodes"}, now.Add(-time.Hour), now.Add(time.Hour))
	verify := x509request.DefaultVerifyOptions()
	verify.Roots = trusted.pool()
	certs := x509request.New(verify, x509request.CommonNameUserConversion)

	tokenErr := func(err error) authenticator.Token {
		return authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
			return nil, false, err
		})
	}
	notMine := authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
		return nil, false, nil
	})
	cached := func(t authenticator.Token) authenticator.Token {
		return tokencache.New(t, false, time.Minute, 10*time.Second)
	}
	unavailable := &reviewauth.ReviewError{Review: "TokenReview", Code: 503, Attempts: 1}

	tests := []struct {
		name         string
		tokens       authenticator.Token
		clientCerts  authenticator.Request
		presentCert  bool
		wantCode     int
		wantCallsErr bool // apiserver's authenticator must return an error (oracle check)
	}{
		{name: "token authenticator returns a plain error", tokens: tokenErr(errors.New("invalid token")), wantCode: 401, wantCallsErr: true},
		{name: "no token authenticator accepts it", tokens: notMine, wantCode: 401, wantCallsErr: true},
		{name: "the token cache over a plain error", tokens: cached(tokenErr(errors.New("token expired"))), wantCode: 401, wantCallsErr: true},
		{name: "a token union", tokens: tokenunion.New(notMine, tokenErr(errors.New("bad signature"))), wantCode: 401, wantCallsErr: true},
		{name: "request union: x509 with an unknown CA, and a bearer token nobody accepts", tokens: notMine, clientCerts: union.New(certs), presentCert: true, wantCode: 401, wantCallsErr: true},
		{name: "x509 with an unknown CA as ClientCertificates", tokens: notMine, clientCerts: certs, presentCert: true, wantCode: 401, wantCallsErr: true},
		{name: "a context error is a plain error too", tokens: tokenErr(context.DeadlineExceeded), wantCode: 401, wantCallsErr: true},
		{name: "ReviewError", tokens: tokenErr(unavailable), wantCode: 503, wantCallsErr: true},
		{name: "ReviewError through the token cache", tokens: cached(tokenErr(unavailable)), wantCode: 503, wantCallsErr: true},
		{name: "wrapped ErrUnavailable", tokens: tokenErr(fmt.Errorf("my backend is down: %w", reviewauth.ErrUnavailable)), wantCode: 503, wantCallsErr: true},
		{name: "wrapped ErrUnavailable as ClientCertificates", tokens: notMine,
			clientCerts: authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
				return nil, false, fmt.Errorf("CRL fetch failed: %w", reviewauth.ErrUnavailable)
			}), presentCert: true, wantCode: 503, wantCallsErr: true},
		{name: "success without a user", tokens: authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
			return &authenticator.Response{}, true, nil
		}), wantCode: 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			newReq := func() *http.Request {
				r := get("/metrics", scraperToken)
				if tt.presentCert {
					r = withCerts(r, strangerCert)
				}
				return r
			}
			if tt.wantCallsErr {
				// The oracle: apiserver's authenticator itself (for a
				// token, its bearertoken reading of the same header) says
				// error.
				a := tt.clientCerts
				if a == nil {
					a = bearertoken.New(tt.tokens)
				}
				if _, ok, err := a.AuthenticateRequest(newReq()); ok || err == nil {
					t.Fatalf("%s: AuthenticateRequest = %v, %v; want an error", tt.name, ok, err)
				}
			}
			mw := newMiddleware(t, httpauth.Options{Authenticator: tt.tokens, ClientCertificates: tt.clientCerts})
			w, s := serve(mw, newReq())
			if w.Code != tt.wantCode {
				t.Fatalf("%s: code = %d; want %d (body %s)", tt.name, w.Code, tt.wantCode, w.Body)
			}
			if s.called {
				t.Errorf("%s: handler called; want not called", tt.name)
			}
			switch tt.wantCode {
			case 401:
				if got := w.Header().Get("Retry-After"); got != "" {
					t.Errorf("%s: Retry-After = %q on a 401; want none: the credential will not get better", tt.name, got)
				}
				if got := w.Header().Get("WWW-Authenticate"); got != `Bearer error="invalid_token"` {
					t.Errorf("%s: WWW-Authenticate = %q; want invalid_token", tt.name, got)
				}
			case 503:
				if got := w.Header().Get("Retry-After"); got == "" {
					t.Errorf("%s: no Retry-After on a 503", tt.name)
				}
			}
		})
	}
}

// TestAuthenticatorErrorNeverLogsToken checks that an authenticator error
// that echoes the token, rejection or outage, is redacted in the log.
func TestAuthenticatorErrorNeverLogsToken(t *testing.T) {
	t.Parallel()
	const token = "echoed-secret-token-0123456789"
	for _, err := range []error{
		fmt.Errorf("invalid token %q", token),
		fmt.Errorf("backend down while checking %s: %w", token, reviewauth.ErrUnavailable),
	} {
		tokens := authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
			return nil, false, err
		})
		var logs strings.Builder
		logger := funcr.New(func(prefix, args string) { logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{Verbosity: 10})
		r := get("/metrics", token)
		serve(newMiddleware(t, httpauth.Options{Authenticator: tokens}), r.WithContext(klog.NewContext(r.Context(), logger)))
		if !strings.Contains(logs.String(), "REDACTED") {
			t.Errorf("%v: log %q; want the error logged, redacted", err, logs.String())
		}
		if strings.Contains(logs.String(), token) {
			t.Errorf("%v: the log contains the token:\n%s", err, logs.String())
		}
	}
}

// TestPresentedTokenNobodyAcceptsIsNotAnonymous: a token that the token
// authenticator neither accepts nor errors on is a rejection, as
// apiserver's bearertoken authenticator makes it, also on an always-allow
// path, where only a request without a credential is anonymous.
func TestPresentedTokenNobodyAcceptsIsNotAnonymous(t *testing.T) {
	t.Parallel()
	notMine := authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
		return nil, false, nil
	})
	if _, ok, err := bearertoken.New(notMine).AuthenticateRequest(get("/healthz", scraperToken)); ok || err == nil {
		t.Fatalf("oracle: bearertoken = %v, %v; want an error", ok, err)
	}
	mw := newMiddleware(t, httpauth.Options{Authenticator: notMine, AlwaysAllowPaths: []string{"/healthz"}})
	for _, p := range []string{"/healthz", "/metrics"} {
		w, s := serve(mw, get(p, scraperToken))
		if w.Code != 401 || s.called {
			t.Errorf("GET %s with a token nobody accepts = %d (handler called %v); want 401", p, w.Code, s.called)
		}
	}
	if w, s := serve(mw, get("/healthz", "")); w.Code != 200 || !s.called {
		t.Errorf("GET /healthz without a credential = %d; want 200 as anonymous", w.Code)
	}
}
