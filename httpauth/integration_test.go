package httpauth_test

import (
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/httpauth"
)

const testAudience = "node-metrics.example"

var promSA = &user.DefaultInfo{Name: "system:serviceaccount:monitoring:prometheus", UID: "uid-prom",
	Groups: []string{"system:serviceaccounts", "system:serviceaccounts:monitoring", "system:authenticated"}}

// metricsScraperPolicy binds the Prometheus service account to nodes/metrics
// on node-1 only, and nothing else.
var metricsScraperPolicy = authtest.Rules(authtest.Rule{
	Users: []string{promSA.Name}, Verbs: []string{"get"}, APIGroups: []string{""},
	Resources: []string{"nodes"}, Subresources: []string{"metrics"}, Names: []string{"node-1"},
})

// newIntegration returns middleware over the real authn and authz against a
// fresh authtest server, with retries off so that faults surface at once.
func newIntegration(t *testing.T, extra httpauth.Options) (*authtest.Server, func(http.Handler) http.Handler) {
	t.Helper()
	s := authtest.Start(t)
	s.SetPolicy(metricsScraperPolicy)
	tokens, err := authn.NewForConfig(s.Config(), authn.Options{Audiences: []string{testAudience}, Backoff: wait.Backoff{Steps: -1}})
	if err != nil {
		t.Fatal(err)
	}
	sar, err := authz.NewForConfig(s.Config(), authz.Options{Backoff: wait.Backoff{Steps: 1}})
	if err != nil {
		t.Fatal(err)
	}
	opts := extra
	opts.Authenticator = tokens
	opts.Authorizer = sar
	if opts.Attributes == nil {
		opts.Attributes = httpauth.Kubelet("node-1")
	}
	mw, err := httpauth.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, mw
}

func TestIntegration(t *testing.T) {
	t.Parallel()
	s, mw := newIntegration(t, httpauth.Options{AlwaysAllowPaths: []string{"/healthz"}})
	exp := time.Now().Add(time.Hour)
	token := s.MintToken(promSA, []string{testAudience}, exp)
	otherAudience := s.MintToken(promSA, []string{"someone-else"}, exp)

	tests := []struct {
		name, method, path, token string
		wantCode                  int
		wantUser                  string
	}{
		{name: "scraper gets /metrics", path: "/metrics", token: token, wantCode: 200, wantUser: promSA.Name},
		{name: "scraper gets /metrics/cadvisor", path: "/metrics/cadvisor", token: token, wantCode: 200, wantUser: promSA.Name},
		{name: "scraper refused /logs/", path: "/logs/", token: token, wantCode: 403},
		{name: "scraper refused /stats/summary", path: "/stats/summary", token: token, wantCode: 403},
		{name: "scraper refused /pods (nodes/proxy)", path: "/pods", token: token, wantCode: 403},
		{name: "dot-dot trick refused", path: "/metrics/../logs/x", token: token, wantCode: 403},
		{name: "double slash trick refused", path: "//logs", token: token, wantCode: 403},
		{name: "encoded dot-dot trick rejected", path: "/metrics/%2e%2e/logs/x", token: token, wantCode: 400},
		{name: "token for another audience", path: "/metrics", token: otherAudience, wantCode: 401},
		{name: "no token", path: "/metrics", wantCode: 401},
		{name: "always-allowed after cleaning", path: "//healthz", wantCode: 200, wantUser: "system:anonymous"},
		{name: "always-allowed with a valid token", path: "/healthz", token: token, wantCode: 200, wantUser: promSA.Name},
		{name: "always-allowed with a token for another audience", path: "/healthz", token: otherAudience, wantCode: 401},
		{name: "always-allowed with a malformed token", path: "/healthz", token: "not a token", wantCode: 401},
		{name: "POST to an always-allow path", method: "POST", path: "/healthz", wantCode: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := spoof(get(tt.path, tt.token))
			if tt.method != "" {
				r.Method = tt.method
			}
			w, seen := serve(mw, r)
			if w.Code != tt.wantCode {
				t.Fatalf("GET %s: code = %d; want %d (body %s)", tt.path, w.Code, tt.wantCode, w.Body)
			}
			if tt.wantCode != 200 {
				return
			}
			if got := identityHeaders(seen.header); len(got) != 0 {
				t.Errorf("GET %s: handler saw identity headers %v; want none", tt.path, got)
			}
			name := ""
			if seen.user != nil {
				name = seen.user.GetName()
			}
			if name != tt.wantUser {
				t.Errorf("GET %s: request.UserFrom = %q; want %q", tt.path, name, tt.wantUser)
			}
		})
	}
}

func TestIntegrationOutages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		endpoint       authtest.Endpoint
		fault          authtest.Fault
		wantRetryAfter string
	}{
		{name: "TokenReview 503 with Retry-After", endpoint: authtest.TokenReviews, fault: authtest.Fault{Status: 503, RetryAfter: 3 * time.Second}, wantRetryAfter: "3"},
		{name: "TokenReview 500", endpoint: authtest.TokenReviews, fault: authtest.Fault{Status: 500}, wantRetryAfter: "1"},
		{name: "TokenReview connection dropped", endpoint: authtest.TokenReviews, fault: authtest.Fault{DropConnection: true}, wantRetryAfter: "1"},
		{name: "TokenReview malformed", endpoint: authtest.TokenReviews, fault: authtest.Fault{MalformedBody: true}, wantRetryAfter: "1"},
		{name: "SubjectAccessReview 429 with Retry-After", endpoint: authtest.SubjectAccessReviews, fault: authtest.Fault{Status: 429, RetryAfter: 2 * time.Second}, wantRetryAfter: "2"},
		{name: "SubjectAccessReview 500", endpoint: authtest.SubjectAccessReviews, fault: authtest.Fault{Status: 500}, wantRetryAfter: "1"},
		{name: "SubjectAccessReview 403 (our credentials)", endpoint: authtest.SubjectAccessReviews, fault: authtest.Fault{Status: 403}, wantRetryAfter: "1"},
		{name: "SubjectAccessReview both allowed and denied", endpoint: authtest.SubjectAccessReviews, fault: authtest.Fault{BothAllowedAndDenied: true}, wantRetryAfter: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, mw := newIntegration(t, httpauth.Options{})
			token := s.MintToken(promSA, []string{testAudience}, time.Now().Add(time.Hour))
			s.InjectFault(tt.endpoint, tt.fault)
			w, seen := serve(mw, get("/metrics", token))
			if seen.called {
				t.Fatalf("%s: handler called; want the request stopped", tt.name)
			}
			if tt.wantRetryAfter == "" {
				// An answer that is both allowed and denied is a denial or
				// an error, never an allow.
				if w.Code != 403 && w.Code != 503 {
					t.Errorf("%s: code = %d; want 403 or 503", tt.name, w.Code)
				}
				return
			}
			if w.Code != 503 {
				t.Fatalf("%s: code = %d; want 503 (body %s)", tt.name, w.Code, w.Body)
			}
			if got := w.Header().Get("Retry-After"); got != tt.wantRetryAfter {
				t.Errorf("%s: Retry-After = %q; want %q", tt.name, got, tt.wantRetryAfter)
			}
			if st := decodeStatus(t, w); st.Reason != metav1.StatusReasonServiceUnavailable || st.Code != 503 {
				t.Errorf("%s: Status = %s/%d; want ServiceUnavailable/503", tt.name, st.Reason, st.Code)
			}
		})
	}
}
