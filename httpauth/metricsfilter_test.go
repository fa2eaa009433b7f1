package httpauth_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/reviewauth/reviewauth/httpauth"
)

// crFilter has the shape of controller-runtime's metricsserver.Filter, a
// named func type: what MetricsFilter returns must be assignable to it.
type crFilter func(logr.Logger, http.Handler) (http.Handler, error)

var _ crFilter = func() crFilter { f, _ := httpauth.MetricsFilter(httpauth.Options{}); return f }()

// recordingRBAC allows get on /metrics to the scraper (the RBAC contract
// of controller-runtime's filter) and records every attribute set it is
// asked about.
type recordingRBAC struct {
	mu   sync.Mutex
	seen []authorizer.AttributesRecord
}

func (r *recordingRBAC) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	r.mu.Lock()
	r.seen = append(r.seen, authorizer.AttributesRecord{User: a.GetUser(), Verb: a.GetVerb(), Path: a.GetPath(),
		ResourceRequest: a.IsResourceRequest(), Resource: a.GetResource(), Name: a.GetName()})
	r.mu.Unlock()
	if !a.IsResourceRequest() && a.GetPath() == "/metrics" && a.GetVerb() == "get" && a.GetUser().GetName() == scraper.Name {
		return authorizer.DecisionAllow, "", nil
	}
	return metricsOnly.Authorize(ctx, a) // errors for authzDownUser, allows nodes/metrics
}

func (r *recordingRBAC) last() authorizer.AttributesRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[len(r.seen)-1]
}

// crAttributes is what controller-runtime v0.25.2's
// filters.WithAuthenticationAndAuthorization authorizes for a request
// (pkg/metrics/filters/filters.go): the oracle of the mapping.
func crAttributes(u user.Info, req *http.Request) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{User: u, Verb: strings.ToLower(req.Method), Path: req.URL.Path}
}

// TestMetricsFilter serves a metrics handler and an extra handler through
// MetricsFilter over real net/http, and checks that the attributes are
// controller-runtime's for every method and path, and the answers.
func TestMetricsFilter(t *testing.T) {
	t.Parallel()
	rbac := &recordingRBAC{}
	filter, err := httpauth.MetricsFilter(httpauth.Options{Authenticator: &fakeTokens{}, Authorizer: rbac})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := funcr.New(func(prefix, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{}).WithName("metrics-server")
	var reached int
	var mu sync.Mutex
	mux := http.NewServeMux()
	for _, path := range []string{"/metrics", "/debug/pprof/"} {
		h, err := filter(log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			reached++
			mu.Unlock()
			u, _ := request.UserFrom(r.Context())
			_, _ = io.WriteString(w, "served "+r.URL.Path+" to "+u.GetName())
		}))
		if err != nil {
			t.Fatal(err)
		}
		mux.Handle(path, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	tests := []struct {
		name, method, path, token string
		want                      int
	}{
		{"no token", http.MethodGet, "/metrics", "", http.StatusUnauthorized},
		{"rejected token", http.MethodGet, "/metrics", badToken, http.StatusUnauthorized},
		{"TokenReview outage", http.MethodGet, "/metrics", downToken, http.StatusServiceUnavailable},
		{"SubjectAccessReview outage", http.MethodGet, "/metrics", denyAllToken, http.StatusServiceUnavailable},
		{"allowed: get /metrics", http.MethodGet, "/metrics", scraperToken, http.StatusOK},
		{"not allowed: head /metrics", http.MethodHead, "/metrics", scraperToken, http.StatusForbidden},
		{"not allowed: post /metrics", http.MethodPost, "/metrics", scraperToken, http.StatusForbidden},
		{"not allowed: get /debug/pprof/heap", http.MethodGet, "/debug/pprof/heap", scraperToken, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			mu.Lock()
			before := reached
			mu.Unlock()
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("%s %s = %d; want %d", tt.method, tt.path, resp.StatusCode, tt.want)
			}
			mu.Lock()
			if (reached != before) != (tt.want == http.StatusOK) {
				t.Errorf("%s %s reached the handler: %v; want %v", tt.method, tt.path, reached != before, tt.want == http.StatusOK)
			}
			mu.Unlock()
			if tt.token == scraperToken {
				if got, want := rbac.last(), crAttributes(scraper, req); got.Verb != want.Verb || got.Path != want.Path ||
					got.ResourceRequest || got.User.GetName() != want.User.GetName() {
					t.Errorf("%s %s authorized %+v; want controller-runtime's %+v", tt.method, tt.path, got, want)
				}
			}
		})
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logs.String(), `metrics-server "level"=0 "msg"="httpauth: request forbidden"`) {
		t.Errorf("refusals were not logged through the metrics server's logger:\n%s", &logs)
	}
	for _, tok := range []string{scraperToken, badToken, downToken} {
		if strings.Contains(logs.String(), tok) {
			t.Errorf("the log holds a token:\n%s", &logs)
		}
	}
}

// TestMetricsFilterMapper: a mapper of the caller's choice replaces
// NonResource, and the handler runs with the caller's identity and
// without the Authorization header.
func TestMetricsFilterMapper(t *testing.T) {
	t.Parallel()
	rbac := &recordingRBAC{}
	nodeMetrics := httpauth.AttributesMapperFunc(func(r *http.Request, u user.Info) ([]authorizer.Attributes, error) {
		return []authorizer.Attributes{authorizer.AttributesRecord{User: u, Verb: "get", Resource: "nodes",
			Subresource: "metrics", Name: "node-1", ResourceRequest: true}}, nil
	})
	filter, err := httpauth.MetricsFilter(httpauth.Options{Authenticator: &fakeTokens{}, Authorizer: rbac, Attributes: nodeMetrics})
	if err != nil {
		t.Fatal(err)
	}
	h, err := filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := request.UserFrom(r.Context())
		_, _ = io.WriteString(w, "served "+r.URL.Path+" to "+u.GetName()+" auth="+r.Header.Get("Authorization"))
	}))
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	r.Header.Set("Authorization", "Bearer "+scraperToken)
	h.ServeHTTP(w, r)
	if want := "served /metrics to " + scraper.Name + " auth="; w.Code != http.StatusOK || w.Body.String() != want {
		t.Errorf("GET /metrics = %d %q; want 200 %q", w.Code, w.Body.String(), want)
	}
	if got := rbac.last(); !got.ResourceRequest || got.Resource != "nodes" {
		t.Errorf("authorized %+v; want the mapper's attributes", got)
	}
}

// TestMetricsFilterErrors: New's errors, and a nil handler.
func TestMetricsFilterErrors(t *testing.T) {
	t.Parallel()
	if f, err := httpauth.MetricsFilter(httpauth.Options{Authenticator: &fakeTokens{}}); err == nil || f != nil {
		t.Errorf("MetricsFilter(no Authorizer) = %v, %v; want nil and an error", f != nil, err)
	}
	if f, err := httpauth.MetricsFilter(httpauth.Options{Authorizer: metricsOnly}); err == nil || f != nil {
		t.Errorf("MetricsFilter(no Authenticator) = %v, %v; want nil and an error", f != nil, err)
	}
	f, err := httpauth.MetricsFilter(httpauth.Options{Authenticator: &fakeTokens{}, Authorizer: metricsOnly})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := f(logr.Discard(), nil); err == nil || h != nil {
		t.Errorf("filter(nil handler) = %v, %v; want nil and an error", h, err)
	}
}
