package httpauth_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/httpauth"
)

// TestBearerParsingAgainstAPIServer sends Authorization headers over real
// HTTP to a server that runs both k8s.io/apiserver's bearertoken
// authenticator (the kubelet's) and httpauth over authn, and compares them.
// They agree except on three headers, where httpauth differs on purpose:
//
//   - "Bearer  <token>" (two spaces): apiserver ignores the header (no
//     credential, with a warning); RFC 6750 allows one or more spaces
//     (credentials = "Bearer" 1*SP b64token), and authn reads the token.
//   - "Bearer <token> extra": apiserver reads <token> and drops the rest;
//     authn refuses the whole value as malformed (401, no TokenReview):
//     trailing data is not a b64token, and another hop may read it
//     differently.
//   - two Authorization headers: apiserver reads the first; authn refuses
//     the request (401): a later hop may read the other one.
func TestBearerParsingAgainstAPIServer(t *testing.T) {
	t.Parallel()
	api := authtest.Start(t)
	api.SetPolicy(metricsScraperPolicy)
	token := api.MintToken(promSA, []string{testAudience}, time.Now().Add(time.Hour))
	tokens, err := authn.NewForConfig(api.Config(), authn.Options{Audiences: []string{testAudience}, Backoff: wait.Backoff{Steps: -1}})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpauth.New(httpauth.Options{Authenticator: tokens, Authorizer: authorizerAllowAll, Attributes: httpauth.Kubelet("node-1"), AlwaysAllowPaths: []string{"/healthz"}})
	if err != nil {
		t.Fatal(err)
	}

	// apiserver's view: which token, if any, bearertoken hands its token
	// authenticator, and whether it says "no credential".
	var (
		mu         sync.Mutex
		theirToken string
		theirOK    bool
		theirErr   error
	)
	theirs := bearertoken.New(authenticator.TokenFunc(func(_ context.Context, tok string) (*authenticator.Response, bool, error) {
		theirToken = tok // under mu, held by the handler
		return nil, false, errors.New("recorded")
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		theirToken = ""
		_, theirOK, theirErr = theirs.AuthenticateRequest(r.Clone(r.Context()))
		mu.Unlock()
		mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).ServeHTTP(w, r)
	}))
	defer srv.Close()

	tests := []struct {
		name    string
		headers []string // Authorization lines, as sent
		path    string
		// apiserver: the token bearertoken reads ("" = no credential).
		wantTheirs string
		// httpauth: status and TokenReviews sent.
		wantCode    int
		wantReviews int
	}{
		{name: "one space", headers: []string{"Bearer " + token}, wantTheirs: token, wantCode: 200, wantReviews: 1},
		{name: "lowercase scheme", headers: []string{"bearer " + token}, wantTheirs: token, wantCode: 200, wantReviews: 0},
		{name: "no header", wantCode: 401},
		{name: "another scheme", headers: []string{"Basic " + token}, wantCode: 401},
		{name: "scheme only", headers: []string{"Bearer"}, wantCode: 401},
		{name: "scheme and spaces only", headers: []string{"Bearer    "}, wantCode: 401},
		{name: "surrounding whitespace (trimmed on the wire)", headers: []string{"  Bearer " + token + "  "}, wantTheirs: token, wantCode: 200, wantReviews: 0},
		// The deliberate differences.
		{name: "two spaces", headers: []string{"Bearer  " + token}, wantTheirs: "", wantCode: 200, wantReviews: 0},
		{name: "trailing data", headers: []string{"Bearer " + token + " extra"}, wantTheirs: token, wantCode: 401, wantReviews: 0},
		{name: "trailing data on an always-allow path", path: "/healthz", headers: []string{"Bearer " + token + " extra"}, wantTheirs: token, wantCode: 401, wantReviews: 0},
		{name: "two headers", headers: []string{"Bearer " + token, "Bearer other-token-0123456789"}, wantTheirs: token, wantCode: 401, wantReviews: 0},
	}
	for _, tt := range tests {
		// Sequential: the server records one request at a time.
		before := api.Count(authtest.TokenReviews)
		path := tt.path
		if path == "" {
			path = "/metrics"
		}
		code := rawRequest(t, srv.Listener.Addr().String(), path, tt.headers)
		mu.Lock()
		gotTheirs, ok, err := theirToken, theirOK, theirErr
		mu.Unlock()
		if ok {
			t.Fatalf("%s: bearertoken authenticated with a failing token authenticator", tt.name)
		}
		if gotTheirs != tt.wantTheirs {
			t.Errorf("%s: bearertoken read %q (err %v); want %q", tt.name, gotTheirs, err, tt.wantTheirs)
		}
		if code != tt.wantCode {
			t.Errorf("%s: httpauth = %d; want %d", tt.name, code, tt.wantCode)
		}
		if n := api.Count(authtest.TokenReviews) - before; n != tt.wantReviews {
			t.Errorf("%s: httpauth sent %d TokenReviews; want %d", tt.name, n, tt.wantReviews)
		}
	}
}

var authorizerAllowAll = authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionAllow, "", nil
})

// rawRequest sends GET path with the given Authorization lines, as
// written, and returns the status code.
func rawRequest(t *testing.T, addr, path string, authorization []string) int {
	t.Helper()
	lines := []string{"Connection: close"}
	for _, v := range authorization {
		lines = append(lines, "Authorization: "+v)
	}
	return rawHTTP1(t, addr, "GET", path, lines...)
}
