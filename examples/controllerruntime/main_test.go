package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/reviewauth/reviewauth/authtest"
)

const (
	audience   = "my-operator-metrics"
	scraperSA  = "system:serviceaccount:monitoring:prometheus"
	scraper2SA = "system:serviceaccount:monitoring:prometheus-2"
)

// TestFlags: the audience is required with reviewauth, the dangerous
// opt-in excludes it, and the comparison filter takes neither.
func TestFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--metrics-audience=" + audience}, ""},
		{[]string{"--metrics-allow-api-server-audience"}, ""},
		{[]string{"--metrics-auth=controller-runtime"}, ""},
		{[]string{"--metrics-secure=false"}, ""},
		{nil, "--metrics-audience is required"},
		{[]string{"--metrics-audience=" + audience, "--metrics-allow-api-server-audience"}, "only for scrapers without an audience"},
		{[]string{"--metrics-auth=controller-runtime", "--metrics-audience=" + audience}, "apply to --metrics-auth=reviewauth only"},
		{[]string{"--metrics-auth=kube-rbac-proxy"}, "want reviewauth or controller-runtime"},
		{[]string{"--metrics-audience=" + audience, "extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		_, err := parseFlags(tt.args, io.Discard)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("parseFlags(%q) = %v; want %q", tt.args, err, tt.wantErr)
		}
	}
}

// freeAddr returns a loopback address with a port no one listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startManager runs the manager c describes against s until the test
// ends, and returns the URL of its metrics server once it accepts
// connections.
func startManager(t *testing.T, s *authtest.Server, c *config) string {
	t.Helper()
	c.metricsAddr = freeAddr(t)
	mgr, err := newManager(s.Config(), c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager.Start() = %v", err)
		}
	})
	announced := &strings.Builder{}
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	defer acancel()
	announce(actx, mgr.GetLogger(), c.metricsAddr, announced)
	if !strings.HasPrefix(announced.String(), "listening on https://") {
		select {
		case err := <-done:
			t.Fatalf("the manager stopped: %v", err)
		default:
			t.Fatalf("the metrics server of %s did not start", c.metricsAuth)
		}
	}
	return "https://" + c.metricsAddr
}

var client = &http.Client{
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // controller-runtime's self-signed certificate
	Timeout:   30 * time.Second,
}

func scrape(t *testing.T, url, method, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// newSARs returns the SubjectAccessReviews s recorded after the first n.
func newSARs(s *authtest.Server, n int) []authorizationv1.SubjectAccessReviewSpec {
	var specs []authorizationv1.SubjectAccessReviewSpec
	for _, sar := range s.SubjectAccessReviews()[n:] {
		specs = append(specs, sar.Spec)
	}
	return specs
}

// TestSideBySide runs two managers against one fake API server, one
// protected by reviewauth and one by controller-runtime's own filter,
// and sends both the same scrapes: where the RBAC contract holds, both
// answer alike and send the same SubjectAccessReview (controller-runtime
// is the oracle); where they differ (rejected tokens, outages, the
// audience), the test states controller-runtime's answer.
func TestSideBySide(t *testing.T) {
	s := authtest.Start(t)
	s.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{scraperSA, scraper2SA}, Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}}))
	ours := startManager(t, s, &config{secureMetrics: true, metricsAuth: "reviewauth", metricsAudience: audience})
	theirs := startManager(t, s, &config{secureMetrics: true, metricsAuth: "controller-runtime"})

	exp := time.Now().Add(time.Hour)
	// controller-runtime reviews tokens without an audience: the scraper
	// presents its API server token there, and a token for the metrics'
	// audience here.
	token := func(name string, apiServer bool) string {
		auds := []string{audience}
		if apiServer {
			auds = nil
		}
		return s.MintToken(&user.DefaultInfo{Name: name, UID: name + "-uid", Groups: []string{"system:serviceaccounts", "system:authenticated"}}, auds, exp)
	}
	tests := []struct {
		name, method string
		ours, theirs string // tokens
		fault        authtest.Endpoint
		want         int // both, unless wantTheirs
		wantTheirs   int
		sameSAR      bool
	}{
		{name: "scraper", method: http.MethodGet, ours: token(scraperSA, false), theirs: token(scraperSA, true), want: http.StatusOK, sameSAR: true},
		{name: "scraper, HEAD", method: http.MethodHead, ours: token(scraperSA, false), theirs: token(scraperSA, true), want: http.StatusForbidden, sameSAR: true},
		{name: "scraper, POST", method: http.MethodPost, ours: token(scraperSA, false), theirs: token(scraperSA, true), want: http.StatusForbidden, sameSAR: true},
		{name: "no RBAC", method: http.MethodGet, ours: token("system:serviceaccount:default:app", false), theirs: token("system:serviceaccount:default:app", true), want: http.StatusForbidden, sameSAR: true},
		{name: "no token", method: http.MethodGet, want: http.StatusUnauthorized},
		// controller-runtime answers 500 to a token the API server rejects.
		{name: "rejected token", method: http.MethodGet, ours: "not-a-token", theirs: "not-a-token", want: http.StatusUnauthorized, wantTheirs: http.StatusInternalServerError},
		// A token for the API server here, for the metrics' audience there:
		// each is the other's rejected token.
		{name: "the other's audience", method: http.MethodGet, ours: token(scraperSA, true), theirs: token(scraperSA, false), want: http.StatusUnauthorized, wantTheirs: http.StatusInternalServerError},
		{name: "TokenReview outage", method: http.MethodGet, ours: token(scraperSA, false), theirs: token(scraperSA, true), fault: authtest.TokenReviews,
			want: http.StatusServiceUnavailable, wantTheirs: http.StatusInternalServerError},
		{name: "SubjectAccessReview outage", method: http.MethodGet, ours: token(scraper2SA, false), theirs: token(scraper2SA, true), fault: authtest.SubjectAccessReviews,
			want: http.StatusServiceUnavailable, wantTheirs: http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.fault != "" {
				s.InjectFault(tt.fault, authtest.Fault{Status: http.StatusServiceUnavailable})
				defer s.ClearFaults()
			}
			wantTheirs := tt.wantTheirs
			if wantTheirs == 0 {
				wantTheirs = tt.want
			}
			n := len(s.SubjectAccessReviews())
			code, body := scrape(t, ours, tt.method, tt.ours)
			if code != tt.want {
				t.Errorf("reviewauth: %s /metrics = %d; want %d", tt.method, code, tt.want)
			}
			if code == http.StatusOK && !strings.Contains(body, "reviewauth_decisions_total") {
				t.Errorf("reviewauth: /metrics does not serve reviewauth's metrics on controller-runtime's registry")
			}
			oursSARs := newSARs(s, n)
			n = len(s.SubjectAccessReviews())
			if code, _ := scrape(t, theirs, tt.method, tt.theirs); code != wantTheirs {
				t.Errorf("controller-runtime: %s /metrics = %d; want %d", tt.method, code, wantTheirs)
			}
			theirSARs := newSARs(s, n)
			if !tt.sameSAR {
				return
			}
			if len(oursSARs) != 1 || len(theirSARs) != 1 {
				t.Fatalf("SubjectAccessReviews: reviewauth %d, controller-runtime %d; want one each", len(oursSARs), len(theirSARs))
			}
			if diff := cmp.Diff(theirSARs[0], oursSARs[0]); diff != "" {
				t.Errorf("reviewauth's SubjectAccessReview differs from controller-runtime's (-theirs +ours):\n%s", diff)
			}
		})
	}
}
