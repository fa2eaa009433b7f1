package serving_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/httpauth"
	"github.com/reviewauth/reviewauth/serving"
)

// crFilter has the shape of controller-runtime's metricsserver.Filter, a
// named func type, and crProvider that of metricsserver.Options'
// FilterProvider field: the provider must be assignable to it.
type (
	crFilter   func(logr.Logger, http.Handler) (http.Handler, error)
	crProvider func(c *rest.Config, httpClient *http.Client) (crFilter, error)
)

var _ crProvider = serving.MetricsFilterProvider[crFilter](serving.MetricsFilterOptions{})

const (
	metricsAudience = "my-operator-metrics"
	prometheusSA    = "system:serviceaccount:monitoring:prometheus"
)

// metricsAPI is a fake API server where the Prometheus service account
// may get /metrics (controller-runtime's RBAC contract).
func metricsAPI(t *testing.T, opts ...authtest.Option) *authtest.Server {
	t.Helper()
	s := authtest.Start(t, opts...)
	s.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{prometheusSA}, Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}}))
	return s
}

// metricsHandler applies the provider's filter to a handler that names
// the caller, as controller-runtime's metrics server does.
func metricsHandler(t *testing.T, provider func(*rest.Config, *http.Client) (crFilter, error), cfg *rest.Config, log logr.Logger) http.Handler {
	t.Helper()
	filter, err := provider(cfg, http.DefaultClient)
	if err != nil {
		t.Fatalf("provider() = %v", err)
	}
	h, err := filter(log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := request.UserFrom(r.Context())
		_, _ = io.WriteString(w, "metrics for "+u.GetName())
	}))
	if err != nil {
		t.Fatalf("filter() = %v", err)
	}
	return h
}

func scrape(h http.Handler, method, token string) int {
	r := httptest.NewRequest(method, "/metrics", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// TestMetricsFilterProvider runs the provider against a fake API server:
// controller-runtime's RBAC contract, the audience, and the answers.
func TestMetricsFilterProvider(t *testing.T) {
	t.Parallel()
	s := metricsAPI(t)
	reg := prometheus.NewRegistry()
	provider := serving.MetricsFilterProvider[crFilter](serving.MetricsFilterOptions{
		Authentication: authn.Options{Audiences: []string{metricsAudience}, Backoff: wait.Backoff{Steps: -1}},
		Registerer:     reg,
	})
	h := metricsHandler(t, provider, s.Config(), logr.Discard())
	exp := time.Now().Add(time.Hour)
	prometheus_ := &user.DefaultInfo{Name: prometheusSA}
	audienceToken := s.MintToken(prometheus_, []string{metricsAudience}, exp)
	apiServerToken := s.MintToken(prometheus_, nil, exp)
	strangerToken := s.MintToken(&user.DefaultInfo{Name: "system:serviceaccount:default:stranger"}, []string{metricsAudience}, exp)
	tests := []struct {
		name, method, token string
		fault               authtest.Endpoint
		want                int
	}{
		{"scraper, its audience", http.MethodGet, audienceToken, "", http.StatusOK},
		{"scraper, HEAD (verb head)", http.MethodHead, audienceToken, "", http.StatusForbidden},
		{"scraper, API server audience", http.MethodGet, apiServerToken, "", http.StatusUnauthorized},
		{"no RBAC", http.MethodGet, strangerToken, "", http.StatusForbidden},
		{"no token", http.MethodGet, "", "", http.StatusUnauthorized},
		{"TokenReview outage", http.MethodGet, s.MintToken(prometheus_, []string{metricsAudience}, exp), authtest.TokenReviews, http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		if tt.fault != "" {
			s.InjectFault(tt.fault, authtest.Fault{Status: http.StatusServiceUnavailable})
		}
		if got := scrape(h, tt.method, tt.token); got != tt.want {
			t.Errorf("%s: %s /metrics = %d; want %d", tt.name, tt.method, got, tt.want)
		}
		s.ClearFaults()
	}
	for _, sar := range s.SubjectAccessReviews() {
		if nra := sar.Spec.NonResourceAttributes; nra == nil || sar.Spec.ResourceAttributes != nil || nra.Path != "/metrics" {
			t.Errorf("SubjectAccessReview %+v; want a non-resource review of /metrics", sar.Spec)
		}
	}
	// The metrics are on the registry; a second provider call reuses them.
	if _, err := provider(s.Config(), nil); err != nil {
		t.Errorf("a second provider call on the same registry = %v; want nil", err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), "reviewauth_decisions_total") {
		t.Errorf("registry holds %q; want reviewauth's metrics", names)
	}
}

// TestMetricsFilterProviderAudience: no audience is refused when the
// provider is called (controller-runtime then fails the manager's
// creation); AllowAPIServerAudience accepts API server tokens, as
// controller-runtime's filter does.
func TestMetricsFilterProviderAudience(t *testing.T) {
	t.Parallel()
	s := metricsAPI(t)
	if _, err := serving.MetricsFilterProvider[crFilter](serving.MetricsFilterOptions{})(s.Config(), nil); err == nil || !strings.Contains(err.Error(), "no audience") {
		t.Errorf("provider(no audience) = %v; want the audience error", err)
	}
	provider := serving.MetricsFilterProvider[crFilter](serving.MetricsFilterOptions{
		Authentication: authn.Options{AllowAPIServerAudience: true},
	})
	h := metricsHandler(t, provider, s.Config(), logr.Discard())
	tok := s.MintToken(&user.DefaultInfo{Name: prometheusSA}, nil, time.Now().Add(time.Hour))
	if got := scrape(h, http.MethodGet, tok); got != http.StatusOK {
		t.Errorf("API server token with AllowAPIServerAudience = %d; want 200", got)
	}
}

// TestMetricsFilterProviderOptions: what the provider refuses.
func TestMetricsFilterProviderOptions(t *testing.T) {
	t.Parallel()
	s := metricsAPI(t)
	auth := authn.Options{Audiences: []string{metricsAudience}}
	tests := []struct {
		name string
		opts serving.MetricsFilterOptions
		cfg  *rest.Config
	}{
		{"nil rest.Config", serving.MetricsFilterOptions{Authentication: auth}, nil},
		{"an Authenticator of its own", serving.MetricsFilterOptions{Authentication: auth,
			HTTP: httpauth.Options{Authenticator: &authn.Authenticator{}}}, s.Config()},
		{"a malformed always-allow path", serving.MetricsFilterOptions{Authentication: auth,
			HTTP: httpauth.Options{AlwaysAllowPaths: []string{"healthz"}}}, s.Config()},
		{"a registry holding something else under reviewauth's names", serving.MetricsFilterOptions{Authentication: auth,
			Registerer: clashingRegistry(t)}, s.Config()},
	}
	for _, tt := range tests {
		if f, err := serving.MetricsFilterProvider[crFilter](tt.opts)(tt.cfg, nil); err == nil || f != nil {
			t.Errorf("%s: provider() = %v, %v; want nil and an error", tt.name, f != nil, err)
		}
	}
}

// clashingRegistry holds a collector that is not reviewauth's under one
// of reviewauth's metric names.
func clashingRegistry(t *testing.T) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reviewauth_decisions_total", Help: "not ours"}, []string{"transport", "outcome"}))
	return reg
}

// TestMetricsFilterProviderSelfCheck: when the manager may not create
// reviews, the filter fails (and so would the metrics server's start),
// naming the ClusterRole; when the API server cannot be asked, it logs and
// goes on; SkipSelfCheck asks nothing.
func TestMetricsFilterProviderSelfCheck(t *testing.T) {
	t.Parallel()
	const manager = "system:serviceaccount:my-operator-system:controller-manager"
	tests := []struct {
		name     string
		policy   authtest.Policy
		fault    bool
		skip     bool
		wantErr  string
		wantLog  string
		wantSSAR int
	}{
		{name: "may review", wantSSAR: 2},
		{name: "may not", policy: authtest.Rules(), wantErr: "system:auth-delegator", wantSSAR: 2},
		{name: "may not, skipped", policy: authtest.Rules(), skip: true},
		{name: "API server failing", fault: true, wantLog: "Starting the metrics server anyway", wantSSAR: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := metricsAPI(t, authtest.WithAdminUser(manager))
			if tt.policy != nil {
				s.SetAdminPolicy(tt.policy)
			}
			if tt.fault {
				s.InjectFault(authtest.SelfSubjectAccessReviews, authtest.Fault{Status: http.StatusInternalServerError})
			}
			filter, err := serving.MetricsFilterProvider[crFilter](serving.MetricsFilterOptions{
				Authentication: authn.Options{Audiences: []string{metricsAudience}},
				SkipSelfCheck:  tt.skip,
			})(s.Config(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var logs lines
			for range 2 { // /metrics and an extra handler: checked once
				_, err = filter(logs.logger(), http.NotFoundHandler())
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("filter() = %v; want an error containing %q", err, tt.wantErr)
			}
			if got := strings.Join(logs.snapshot(), "\n"); !strings.Contains(got, tt.wantLog) || tt.wantLog == "" && got != "" {
				t.Errorf("logged %q; want %q", got, tt.wantLog)
			}
			if n := s.Count(authtest.SelfSubjectAccessReviews); n < tt.wantSSAR || tt.wantSSAR == 0 && n != 0 {
				t.Errorf("SelfSubjectAccessReviews = %d; want %d", n, tt.wantSSAR)
			}
		})
	}
}
