package httpauth_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	unionrequest "k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/httpauth"
)

const (
	scraperToken = "scraper-token-0123456789"
	badToken     = "rejected-token-0123456789"
	downToken    = "outage-token-0123456789"
	slowToken    = "throttled-token-0123456789"
	weirdToken   = "weird-token-0123456789"
	denyAllToken = "authz-down-token-0123456789"
)

var (
	scraper = &user.DefaultInfo{Name: "system:serviceaccount:monitoring:prometheus", UID: "uid-prom",
		Groups: []string{"system:serviceaccounts", "system:authenticated"}, Extra: map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=1"}}}
	authzDownUser = &user.DefaultInfo{Name: "authz-down"}
)

// fakeTokens is a token authenticator with the results of authn:
// identity, rejection, outage.
type fakeTokens struct{ calls atomic.Int64 }

func (f *fakeTokens) AuthenticateToken(_ context.Context, tok string) (*authenticator.Response, bool, error) {
	f.calls.Add(1)
	switch tok {
	case scraperToken:
		return &authenticator.Response{User: scraper}, true, nil
	case denyAllToken:
		return &authenticator.Response{User: authzDownUser}, true, nil
	case downToken:
		return nil, false, &reviewauth.ReviewError{Review: "TokenReview", Code: 503, Attempts: 1}
	case slowToken:
		return nil, false, &reviewauth.ReviewError{Review: "TokenReview", Code: 429, Attempts: 5, RetryAfter: 2500 * time.Millisecond}
	case weirdToken:
		return nil, false, errors.New("something unexpected")
	}
	return nil, false, &reviewauth.RejectedError{Reason: "invalid bearer token"}
}

// metricsOnly allows nodes/metrics (any verb) to the scraper and to users in
// group "metrics", and fails for authzDownUser.
var metricsOnly = authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	u := a.GetUser()
	if u.GetName() == authzDownUser.GetName() {
		return authorizer.DecisionDeny, "", &reviewauth.ReviewError{Review: "SubjectAccessReview", Code: 503, RetryAfter: 7 * time.Second}
	}
	if a.GetResource() == "nodes" && a.GetSubresource() == "metrics" && a.GetName() == "node-1" {
		if u.GetName() == scraper.Name || contains(u.GetGroups(), "metrics") {
			return authorizer.DecisionAllow, "rbac: bound to nodes/metrics", nil
		}
	}
	return authorizer.DecisionNoOpinion, "no RBAC policy matched", nil
})

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// seen records what the protected handler observed.
type seen struct {
	called bool
	path   string
	header http.Header
	user   user.Info
}

func recordingHandler(s *seen) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.called = true
		s.path = r.URL.Path
		s.header = r.Header.Clone()
		s.user, _ = request.UserFrom(r.Context())
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok"))
	})
}

func newMiddleware(t *testing.T, opts httpauth.Options) func(http.Handler) http.Handler {
	t.Helper()
	if opts.Authenticator == nil {
		opts.Authenticator = &fakeTokens{}
	}
	if opts.Authorizer == nil {
		opts.Authorizer = metricsOnly
	}
	if opts.Attributes == nil {
		opts.Attributes = httpauth.Kubelet("node-1")
	}
	mw, err := httpauth.New(opts)
	if err != nil {
		t.Fatalf("New() error %v", err)
	}
	return mw
}

func serve(mw func(http.Handler) http.Handler, r *http.Request) (*httptest.ResponseRecorder, *seen) {
	var s seen
	w := httptest.NewRecorder()
	mw(recordingHandler(&s)).ServeHTTP(w, r)
	return w, &s
}

func get(target, token string) *http.Request {
	r := httptest.NewRequest("GET", target, nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

func decodeStatus(t *testing.T, w *httptest.ResponseRecorder) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatalf("response body %q is not a Status: %v", w.Body.String(), err)
	}
	return st
}

func TestResponses(t *testing.T) {
	t.Parallel()
	failingMapper := httpauth.AttributesMapperFunc(func(*http.Request, user.Info) ([]authorizer.Attributes, error) {
		return nil, errors.New("httpauth_test: cannot map")
	})
	emptyMapper := httpauth.AttributesMapperFunc(func(*http.Request, user.Info) ([]authorizer.Attributes, error) {
		return nil, nil
	})
	tests := []struct {
		name        string
		opts        httpauth.Options
		req         *http.Request
		wantCode    int
		wantReason  metav1.StatusReason
		wantHeaders map[string]string
		wantMessage string
	}{
		{
			name: "allowed", req: get("/metrics", scraperToken), wantCode: 200,
		},
		{
			name: "no credential", req: get("/metrics", ""), wantCode: 401, wantReason: metav1.StatusReasonUnauthorized,
			wantHeaders: map[string]string{"WWW-Authenticate": "Bearer"},
		},
		{
			name: "not a bearer credential", req: func() *http.Request {
				r := get("/metrics", "")
				r.Header.Set("Authorization", "Basic "+scraperToken)
				return r
			}(), wantCode: 401, wantReason: metav1.StatusReasonUnauthorized,
			wantHeaders: map[string]string{"WWW-Authenticate": "Bearer"},
		},
		{
			name: "rejected token", req: get("/metrics", badToken), wantCode: 401, wantReason: metav1.StatusReasonUnauthorized,
			wantHeaders: map[string]string{"WWW-Authenticate": `Bearer error="invalid_token"`},
		},
		{
			name: "authentication outage", req: get("/metrics", downToken), wantCode: 503, wantReason: metav1.StatusReasonServiceUnavailable,
			wantHeaders: map[string]string{"Retry-After": "1", "WWW-Authenticate": ""},
		},
		{
			name: "authentication outage with retry-after", req: get("/metrics", slowToken), wantCode: 503, wantReason: metav1.StatusReasonServiceUnavailable,
			wantHeaders: map[string]string{"Retry-After": "3"},
		},
		{
			name: "configured retry-after", opts: httpauth.Options{RetryAfter: 4 * time.Second},
			req: get("/metrics", downToken), wantCode: 503, wantReason: metav1.StatusReasonServiceUnavailable,
			wantHeaders: map[string]string{"Retry-After": "4"},
		},
		{
			// A plain error is how apiserver's authenticators reject a
			// credential: 401, not a 503 that clients retry forever.
			name: "plain authentication error", req: get("/metrics", weirdToken), wantCode: 401, wantReason: metav1.StatusReasonUnauthorized,
			wantHeaders: map[string]string{"Retry-After": "", "WWW-Authenticate": `Bearer error="invalid_token"`},
		},
		{
			name: "forbidden", req: get("/logs/syslog", scraperToken), wantCode: 403, wantReason: metav1.StatusReasonForbidden,
			wantMessage: `nodes "node-1" is forbidden: User "system:serviceaccount:monitoring:prometheus" cannot get resource "nodes/log" in API group "" at the cluster scope: no RBAC policy matched`,
		},
		{
			name: "authorization outage", req: get("/metrics", denyAllToken), wantCode: 503, wantReason: metav1.StatusReasonServiceUnavailable,
			wantHeaders: map[string]string{"Retry-After": "7"},
		},
		{
			name: "bad path", req: get("/metrics/%2e%2e/logs/x", scraperToken), wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
		},
		{
			name: "method without verb", req: func() *http.Request {
				r := get("/metrics", scraperToken)
				r.Method = "OPTIONS"
				return r
			}(), wantCode: 405, wantReason: metav1.StatusReasonMethodNotAllowed,
			wantMessage: `method "OPTIONS" is not allowed here`,
		},
		{
			name: "mapper error", opts: httpauth.Options{Attributes: failingMapper},
			req: get("/metrics", scraperToken), wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
		},
		{
			name: "mapper returns nothing", opts: httpauth.Options{Attributes: emptyMapper},
			req: get("/metrics", scraperToken), wantCode: 403, wantReason: metav1.StatusReasonForbidden,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs strings.Builder
			logger := funcr.New(func(prefix, args string) { logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{Verbosity: 10})
			w, s := serve(newMiddleware(t, tt.opts), tt.req.WithContext(klog.NewContext(tt.req.Context(), logger)))
			for _, tok := range []string{scraperToken, badToken, downToken, slowToken, weirdToken, denyAllToken} {
				if strings.Contains(logs.String(), tok) {
					t.Errorf("%s: the log contains a token:\n%s", tt.name, logs.String())
				}
			}
			if logs.Len() == 0 {
				t.Errorf("%s: nothing logged at verbosity 10; want the decision logged", tt.name)
			}
			if w.Code != tt.wantCode {
				t.Fatalf("%s: code = %d; want %d (body %s)", tt.name, w.Code, tt.wantCode, w.Body)
			}
			for k, v := range tt.wantHeaders {
				if got := w.Header().Get(k); got != v {
					t.Errorf("%s: header %s = %q; want %q", tt.name, k, got, v)
				}
			}
			for _, tok := range []string{scraperToken, badToken, downToken, slowToken, weirdToken, denyAllToken} {
				if strings.Contains(w.Body.String(), tok) || strings.Contains(strings.Join(w.Header().Values("WWW-Authenticate"), ""), tok) {
					t.Errorf("%s: response echoes a token: %s", tt.name, w.Body)
				}
			}
			if tt.wantCode == 200 {
				if !s.called {
					t.Errorf("%s: handler not called; want called", tt.name)
				}
				return
			}
			if s.called {
				t.Errorf("%s: handler called; want not called on %d", tt.name, tt.wantCode)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("%s: Content-Type = %q; want application/json", tt.name, ct)
			}
			st := decodeStatus(t, w)
			want := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Reason: tt.wantReason, Code: int32(tt.wantCode)}
			got := metav1.Status{TypeMeta: st.TypeMeta, Status: st.Status, Reason: st.Reason, Code: st.Code}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s: Status mismatch (-want +got):\n%s", tt.name, diff)
			}
			if st.Message == "" {
				t.Errorf("%s: Status.Message is empty; want a message", tt.name)
			}
			if tt.wantMessage != "" && st.Message != tt.wantMessage {
				t.Errorf("%s: Status.Message = %q; want %q", tt.name, st.Message, tt.wantMessage)
			}
			if tt.wantCode == 503 && (st.Details == nil || st.Details.RetryAfterSeconds < 1) {
				t.Errorf("%s: Status.Details = %+v; want RetryAfterSeconds >= 1", tt.name, st.Details)
			}
		})
	}
}

var spoofed = map[string]string{
	"X-Remote-User":             "system:admin",
	"X-Remote-Uid":              "0",
	"X-Remote-Group":            "system:masters",
	"X-Remote-Extra-Scopes":     "all",
	"X-Remote-Extra-Foo%2fbar":  "x",
	"x-remote-user":             "lowercase-admin",
	"X-REMOTE-EXTRA-Other":      "y",
	"X-Remote-Not-An-Identity":  "kept",
	"X-Forwarded-For":           "10.0.0.1",
	"X-Remote-Usernot-Identity": "kept",
	"authorization":             "Bearer second-spoofed-token",
	"Impersonate-User":          "system:admin",
	"Impersonate-Group":         "system:masters",
	"Impersonate-Uid":           "0",
	"Impersonate-Extra-Scopes":  "all",
	"impersonate-user":          "lowercase-admin",
	"Impersonate_User":          "underscore-admin",
	"X-Remote_User":             "underscore-admin",
	"X_REMOTE_GROUP":            "system:masters",
	"x-remote-extra_scopes":     "all",
	"Proxy-Authorization":       "Basic cHJveHk6c2VjcmV0",
	"Proxy_Authorization":       "Basic cHJveHk6c2VjcmV0",
	"Impersonatex-User":         "kept",
}

// spoof adds the spoofed headers to r, bypassing canonicalization as a
// hand-built request (or another middleware) could.
func spoof(r *http.Request) *http.Request {
	for k, v := range spoofed {
		r.Header[k] = []string{v}
	}
	return r
}

// identityHeaders returns the headers of h that must never come from a
// client: any spelling (case, '_' for '-') of Authorization,
// Proxy-Authorization, X-Remote-User/Uid/Group/Extra-* and Impersonate-*.
func identityHeaders(h http.Header) map[string][]string {
	out := map[string][]string{}
	for k, v := range h {
		lk := strings.ReplaceAll(strings.ToLower(k), "_", "-")
		switch {
		case lk == "authorization", lk == "proxy-authorization",
			lk == "x-remote-user", lk == "x-remote-uid", lk == "x-remote-group", strings.HasPrefix(lk, "x-remote-extra-"),
			strings.HasPrefix(lk, "impersonate-"):
			out[k] = v
		}
	}
	return out
}

func TestHeaderStripping(t *testing.T) {
	t.Parallel()
	anonymous := &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
	propagated := map[string][]string{
		"X-Remote-User":  {scraper.Name},
		"X-Remote-Uid":   {scraper.UID},
		"X-Remote-Group": scraper.Groups,
		"X-Remote-Extra-Authentication.kubernetes.io%2fcredential-Id": {"JTI=1"},
	}
	tests := []struct {
		name      string
		propagate bool
		req       *http.Request
		wantUser  user.Info
		want      map[string][]string
	}{
		{name: "allowed path", req: spoof(get("/metrics", scraperToken)), wantUser: scraper, want: map[string][]string{}},
		{name: "always-allow path with credential", req: spoof(get("/healthz", scraperToken)), wantUser: scraper, want: map[string][]string{}},
		{name: "always-allow path without credential", req: spoof(get("/healthz", "")), wantUser: anonymous, want: map[string][]string{}},
		{name: "always-allow path after cleaning", req: spoof(get("//healthz/", "")), wantUser: anonymous, want: map[string][]string{}},
		{name: "propagated identity replaces spoofed", propagate: true, req: spoof(get("/metrics", scraperToken)), wantUser: scraper, want: propagated},
		{name: "always-allow path with credential propagates it", propagate: true, req: spoof(get("/healthz", scraperToken)), wantUser: scraper, want: propagated},
		{name: "anonymous is never propagated", propagate: true, req: spoof(get("/healthz", "")), wantUser: anonymous, want: map[string][]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tokens := &fakeTokens{}
			mw := newMiddleware(t, httpauth.Options{Authenticator: tokens, AlwaysAllowPaths: []string{"/healthz", "/healthz/", "/readyz"}, PropagateIdentity: tt.propagate})
			w, s := serve(mw, tt.req)
			if w.Code != 200 || !s.called {
				t.Fatalf("%s: code = %d, handler called %v; want 200 and called (body %s)", tt.name, w.Code, s.called, w.Body)
			}
			if diff := cmp.Diff(tt.want, identityHeaders(s.header)); diff != "" {
				t.Errorf("%s: identity headers seen by the handler (-want +got):\n%s", tt.name, diff)
			}
			for _, k := range []string{"X-Remote-Not-An-Identity", "X-Forwarded-For", "X-Remote-Usernot-Identity", "Impersonatex-User"} {
				if s.header[k] == nil {
					t.Errorf("%s: header %s was removed; want it kept", tt.name, k)
				}
			}
			if !cmp.Equal(tt.wantUser, s.user) {
				t.Errorf("%s: request.UserFrom = %v; want %v", tt.name, s.user, tt.wantUser)
			}
		})
	}

	t.Run("stripped before a failure too", func(t *testing.T) {
		t.Parallel()
		r := spoof(get("/logs/x", scraperToken))
		w, _ := serve(newMiddleware(t, httpauth.Options{}), r)
		if w.Code != 403 {
			t.Fatalf("code = %d; want 403", w.Code)
		}
		if got := identityHeaders(r.Header); len(got) != 0 {
			t.Errorf("identity headers left on the request after a 403: %v; want none", got)
		}
	})
}

func TestPathTricks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		target   string
		wantCode int
		wantPath string // the path the handler sees
	}{
		{target: "/metrics", wantCode: 200, wantPath: "/metrics"},
		{target: "/metrics/../logs/x", wantCode: 403},
		{target: "/metrics/./../logs/", wantCode: 403},
		{target: "//logs", wantCode: 403},
		{target: "//logs/x", wantCode: 403},
		{target: "/logs/../metrics", wantCode: 200, wantPath: "/metrics"},
		{target: "//metrics//cadvisor", wantCode: 200, wantPath: "/metrics/cadvisor"},
		{target: "/./metrics/", wantCode: 200, wantPath: "/metrics/"},
		{target: "/metrics/%2e%2e/logs/x", wantCode: 400},
		{target: "/metrics/%2E%2E/logs/x", wantCode: 400},
		{target: "/metrics%2f..%2flogs", wantCode: 400},
		{target: "/metrics/%252e%252e/logs", wantCode: 400},
		{target: "/metrics/..;/logs", wantCode: 400},
		{target: "/%6detrics", wantCode: 200, wantPath: "/metrics"},
		{target: "/metrics/%C0%AE%C0%AE/logs/x", wantCode: 400},
		{target: "/metrics/%c0%ae%c0%ae/logs/x", wantCode: 400},
		{target: "/metrics/%E0%80%AE%E0%80%AE/logs/x", wantCode: 400},
		{target: "/metrics/%ED%A0%80", wantCode: 400},
	}
	mw := newMiddleware(t, httpauth.Options{})
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			t.Parallel()
			r := get(tt.target, scraperToken)
			w, s := serve(mw, r)
			if w.Code != tt.wantCode {
				t.Fatalf("GET %s: code = %d; want %d (body %s)", tt.target, w.Code, tt.wantCode, w.Body)
			}
			if tt.wantCode != 200 {
				if s.called {
					t.Errorf("GET %s: handler called; want not called", tt.target)
				}
				return
			}
			if s.path != tt.wantPath {
				t.Errorf("GET %s: handler saw path %q; want %q", tt.target, s.path, tt.wantPath)
			}
		})
	}
}

func TestHandlerSeesCleanedURL(t *testing.T) {
	t.Parallel()
	mw := newMiddleware(t, httpauth.Options{})
	var got string
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.EscapedPath() + " " + r.RequestURI
	}))
	r := get("//metrics/./cadvisor?x=1", scraperToken)
	h.ServeHTTP(httptest.NewRecorder(), r)
	if want := "/metrics/cadvisor /metrics/cadvisor?x=1"; got != want {
		t.Errorf("handler saw %q; want %q", got, want)
	}
	if r.URL.Path != "//metrics/./cadvisor" {
		t.Errorf("caller's request URL was modified to %q; want it untouched", r.URL.Path)
	}
}

func TestAlwaysAllow(t *testing.T) {
	t.Parallel()
	anonymous := user.Anonymous
	tests := []struct {
		method, target, token string
		methods               []string // AlwaysAllowMethods
		wantCode              int
		wantPath, wantUser    string
	}{
		{target: "/healthz", wantCode: 200, wantPath: "/healthz", wantUser: anonymous},
		{method: "HEAD", target: "/healthz", wantCode: 200, wantPath: "/healthz", wantUser: anonymous},
		{target: "//healthz", wantCode: 200, wantPath: "/healthz", wantUser: anonymous},
		{target: "/./readyz", wantCode: 200, wantPath: "/readyz", wantUser: anonymous},
		{target: "/logs/../livez", wantCode: 200, wantPath: "/livez", wantUser: anonymous},
		{target: "/debug/pprof/heap", wantCode: 200, wantPath: "/debug/pprof/heap", wantUser: anonymous},
		{target: "/debug/pprof/../../logs/x", wantCode: 401},
		{target: "/healthz/../logs/x", wantCode: 401},
		{target: "/healthz/", wantCode: 401},
		{target: "/healthzx", wantCode: 401},
		{target: "/healthz%2f..%2flogs", wantCode: 400},
		{target: "/healthz/%2e%2e/logs", wantCode: 400},
		// A presented credential is checked, as apiserver does before its
		// anonymous authenticator.
		{target: "/healthz", token: scraperToken, wantCode: 200, wantPath: "/healthz", wantUser: scraper.Name},
		{target: "/healthz", token: badToken, wantCode: 401},
		{target: "/healthz", token: weirdToken, wantCode: 401},
		{target: "/healthz", token: downToken, wantCode: 503},
		// Only GET and HEAD, unless widened: anything else is
		// authenticated and authorized as on any other path.
		{method: "POST", target: "/healthz", wantCode: 401},
		{method: "PUT", target: "/healthz", wantCode: 401},
		{method: "DELETE", target: "/debug/pprof/heap", wantCode: 401},
		{method: "OPTIONS", target: "/healthz", wantCode: 401},
		{method: "get", target: "/healthz", wantCode: 401},
		{method: "POST", target: "/healthz", token: scraperToken, wantCode: 403},
		{method: "POST", target: "/healthz", methods: []string{"POST"}, wantCode: 200, wantPath: "/healthz", wantUser: anonymous},
		{method: "GET", target: "/healthz", methods: []string{"POST"}, wantCode: 401},
	}
	for _, tt := range tests {
		if tt.method == "" {
			tt.method = "GET"
		}
		t.Run(tt.method+" "+tt.target+" "+tt.token+strings.Join(tt.methods, ","), func(t *testing.T) {
			t.Parallel()
			mw := newMiddleware(t, httpauth.Options{AlwaysAllowPaths: []string{"/healthz", "/readyz", "/livez", "/debug/pprof/*"}, AlwaysAllowMethods: tt.methods})
			r := get(tt.target, tt.token)
			r.Method = tt.method
			w, s := serve(mw, r)
			if w.Code != tt.wantCode {
				t.Fatalf("%s %s (token %q): code = %d; want %d (body %s)", tt.method, tt.target, tt.token, w.Code, tt.wantCode, w.Body)
			}
			if tt.wantCode != 200 {
				if s.called {
					t.Errorf("%s %s: handler called; want not called", tt.method, tt.target)
				}
				return
			}
			if s.path != tt.wantPath {
				t.Errorf("%s %s: handler saw %q; want %q", tt.method, tt.target, s.path, tt.wantPath)
			}
			if s.user == nil || s.user.GetName() != tt.wantUser {
				t.Fatalf("%s %s: request.UserFrom = %v; want %s", tt.method, tt.target, s.user, tt.wantUser)
			}
			if tt.wantUser == anonymous && !cmp.Equal(s.user.GetGroups(), []string{user.AllUnauthenticated}) {
				t.Errorf("%s %s: anonymous groups = %v; want [%s]", tt.method, tt.target, s.user.GetGroups(), user.AllUnauthenticated)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	ok := httpauth.Options{Authenticator: &fakeTokens{}, Authorizer: metricsOnly, Attributes: httpauth.Kubelet("n")}
	tests := []struct {
		name string
		edit func(*httpauth.Options)
	}{
		{"no authenticator", func(o *httpauth.Options) { o.Authenticator = nil }},
		{"no authorizer", func(o *httpauth.Options) { o.Authorizer = nil }},
		{"no mapper", func(o *httpauth.Options) { o.Attributes = nil }},
		{"relative always-allow path", func(o *httpauth.Options) { o.AlwaysAllowPaths = []string{"healthz"} }},
		{"unclean always-allow path", func(o *httpauth.Options) { o.AlwaysAllowPaths = []string{"/a/../healthz"} }},
		{"inner star", func(o *httpauth.Options) { o.AlwaysAllowPaths = []string{"/a*/b"} }},
		{"empty always-allow method", func(o *httpauth.Options) { o.AlwaysAllowMethods = []string{""} }},
		{"always-allow method not a token", func(o *httpauth.Options) { o.AlwaysAllowMethods = []string{"GET /"} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := ok
			tt.edit(&o)
			if mw, err := httpauth.New(o); err == nil || mw != nil || !strings.HasPrefix(err.Error(), "httpauth: ") {
				t.Errorf("New(%s) = %v, %v; want nil and an httpauth error", tt.name, mw != nil, err)
			}
		})
	}
	if _, err := httpauth.New(ok); err != nil {
		t.Errorf("New(valid) error %v; want nil", err)
	}
}

func TestAllAttributeSetsMustBeAllowed(t *testing.T) {
	t.Parallel()
	routes, err := httpauth.StaticRoutes(httpauth.Route{Path: "/delta", Attributes: []authorizer.AttributesRecord{
		{ResourceRequest: true, APIGroup: "snapshot.storage.k8s.io", Resource: "volumesnapshots", Namespace: "ns1", Name: "base"},
		{ResourceRequest: true, APIGroup: "snapshot.storage.k8s.io", Resource: "volumesnapshots", Namespace: "ns1", Name: "target"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		allowed  []string
		wantCode int
		wantAsks int
	}{
		{name: "both allowed", allowed: []string{"base", "target"}, wantCode: 200, wantAsks: 2},
		{name: "second denied", allowed: []string{"base"}, wantCode: 403, wantAsks: 2},
		{name: "first denied stops", allowed: []string{"target"}, wantCode: 403, wantAsks: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var asks atomic.Int64
			az := authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				asks.Add(1)
				if contains(tt.allowed, a.GetName()) {
					return authorizer.DecisionAllow, "", nil
				}
				return authorizer.DecisionDeny, "not this one", nil
			})
			w, _ := serve(newMiddleware(t, httpauth.Options{Authorizer: az, Attributes: routes}), get("/delta", scraperToken))
			if w.Code != tt.wantCode || asks.Load() != int64(tt.wantAsks) {
				t.Errorf("%s: code = %d after %d authorizer calls; want %d after %d", tt.name, w.Code, asks.Load(), tt.wantCode, tt.wantAsks)
			}
		})
	}
}

// TestStripHeaders: Options.StripHeaders deletes the named headers and the
// prefixed ones in every spelling, on authorized and always-allow paths
// alike, and keeps everything else; bad names are an error from New.
func TestStripHeaders(t *testing.T) {
	t.Parallel()
	for _, bad := range [][]string{{""}, {"*"}, {"X-*-User"}, {"X-A**"}} {
		if _, err := httpauth.New(httpauth.Options{Authenticator: &fakeTokens{}, Authorizer: metricsOnly, Attributes: httpauth.Kubelet("node-1"), StripHeaders: bad}); err == nil {
			t.Errorf("New(StripHeaders: %q) = nil error; want one", bad)
		}
	}
	spelled := map[string][]string{
		"X-Auth-User": {"a"}, "x-auth_user": {"b"}, "X_AUTH_USER": {"c"},
		"X-Remote-Groups": {"d"}, "x_remote_anything": {"e"},
		// Kept: a longer name, another prefix, ordinary headers.
		"X-Auth-Username": {"k1"}, "X-Remotely": {"k2"}, "Accept": {"k3"},
	}
	for _, path := range []string{"/metrics", "/healthz"} {
		mw := newMiddleware(t, httpauth.Options{Authenticator: &fakeTokens{}, AlwaysAllowPaths: []string{"/healthz"},
			StripHeaders: []string{"x_auth-USER", "X-Remote-*"}})
		r := get(path, scraperToken)
		for k, v := range spelled {
			r.Header[k] = v
		}
		w, s := serve(mw, r)
		if w.Code != 200 || !s.called {
			t.Fatalf("%s: code %d, called %v; want 200", path, w.Code, s.called)
		}
		for k, v := range spelled {
			_, seen := s.header[k]
			if want := strings.HasPrefix(v[0], "k"); seen != want {
				t.Errorf("%s: header %q reached the handler: %v; want %v", path, k, seen, want)
			}
		}
	}
}

// apiServerUser is the user k8s.io/apiserver's authentication stack makes
// of an authenticator's u: its union of request authenticators wrapped in
// its AuthenticatedGroupAdder, as the API server, the kubelet and
// kube-rbac-proxy build it.
func apiServerUser(t *testing.T, u user.Info) user.Info {
	t.Helper()
	return apiServerAuthenticate(t, authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
		return &authenticator.Response{User: u}, true, nil
	}), httptest.NewRequest("GET", "/", nil))
}

// apiServerAuthenticate authenticates r with apiserver's union of a and its
// AuthenticatedGroupAdder.
func apiServerAuthenticate(t *testing.T, a authenticator.Request, r *http.Request) user.Info {
	t.Helper()
	resp, ok, err := group.NewAuthenticatedGroupAdder(unionrequest.New(a)).AuthenticateRequest(r)
	if !ok || err != nil {
		t.Fatalf("apiserver's authenticators refused the request: %v, %v", ok, err)
	}
	return resp.User
}

// groupUsers are the identities the group-adder tests feed each
// authenticator: with and without groups, already in system:authenticated
// or system:unauthenticated, anonymous.
var groupUsers = []*user.DefaultInfo{
	{Name: "alice"},
	{Name: "alice", UID: "u-1", Groups: []string{"team-a"}, Extra: map[string][]string{"scopes": {"a"}}},
	{Name: "bob", Groups: []string{user.AllAuthenticated, "team-b"}},
	{Name: "carol", Groups: []string{user.AllUnauthenticated}},
	{Name: user.Anonymous},
	{Name: user.Anonymous, Groups: []string{"team-a"}},
	{Name: "system:node:node-1", Groups: []string{user.NodesGroup}},
}

// TestAuthenticatedGroupMatchesAPIServer: whatever authenticated the
// caller, a bearer token (Options.Authenticator) or a request
// authenticator of the user's own (Options.ClientCertificates), the user
// the authorizer and the handler see is the one apiserver's union and
// AuthenticatedGroupAdder make of the same authenticator's answer:
// system:authenticated added to every user but system:anonymous and users
// already in system:authenticated or system:unauthenticated.
// TestClientCertificatesMatchAPIServer does the same with real
// certificates.
func TestAuthenticatedGroupMatchesAPIServer(t *testing.T) {
	t.Parallel()
	for _, u := range groupUsers {
		want := toDefault(apiServerUser(t, u))
		answer := &authenticator.Response{User: u}
		for _, via := range []struct {
			name string
			opts httpauth.Options
			req  *http.Request
		}{
			{"token", httpauth.Options{Authenticator: authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
				return answer, true, nil
			})}, get("/metrics", scraperToken)},
			{"custom request authenticator", httpauth.Options{ClientCertificates: authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
				return answer, true, nil
			})}, withCerts(get("/metrics", ""), &x509.Certificate{})},
		} {
			var asked user.Info
			via.opts.Authorizer = authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				asked = a.GetUser()
				return authorizer.DecisionAllow, "", nil
			})
			w, s := serve(newMiddleware(t, via.opts), via.req)
			if w.Code != 200 {
				t.Fatalf("%s %q: code %d", via.name, u.Name, w.Code)
			}
			if diff := cmp.Diff(want, toDefault(asked)); diff != "" {
				t.Errorf("%s, user %+v: the authorizer saw (-apiserver +ours):\n%s", via.name, u, diff)
			}
			if diff := cmp.Diff(want, toDefault(s.user)); diff != "" {
				t.Errorf("%s, user %+v: the handler saw (-apiserver +ours):\n%s", via.name, u, diff)
			}
		}
	}
}

func toDefault(u user.Info) user.DefaultInfo {
	if u == nil {
		return user.DefaultInfo{}
	}
	return user.DefaultInfo{Name: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: u.GetExtra()}
}
