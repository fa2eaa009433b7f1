package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/examples/internal/clitest"
)

// scrapeEnv is an API server with a scraper bound to nodes/metrics on
// node-1, its token and an upstream.
type scrapeEnv struct {
	api                *authtest.Server
	kubeconfig         string
	token, apiAudToken string
	upstream           *httptest.Server
}

func newScrapeEnv(t *testing.T) *scrapeEnv {
	t.Helper()
	api := authtest.Start(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	scraper := &user.DefaultInfo{Name: "prometheus"}
	api.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{scraper.Name}, Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}, Subresources: []string{"metrics"}}))
	up := httptest.NewServer(&upstream{})
	t.Cleanup(up.Close)
	exp := time.Now().Add(time.Hour)
	return &scrapeEnv{api: api, kubeconfig: kubeconfig, upstream: up,
		token: api.MintToken(scraper, []string{"metricsproxy"}, exp), apiAudToken: api.MintToken(scraper, nil, exp)}
}

func (e *scrapeEnv) args(extra ...string) []string {
	return append([]string{"--listen", "127.0.0.1:0", "--upstream", e.upstream.URL, "--kubeconfig", e.kubeconfig,
		"--audience", "metricsproxy", "--node-name", "node-1"}, extra...)
}

func scrape(t *testing.T, client *http.Client, base, path, token string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestRefusedClientsCannotHoldTheProxy (issue #12): 300 unauthenticated
// requests, half of them POSTs announcing a 100,000-byte body they never
// send, half keep-alive GETs, are each answered 401 and their connections
// closed, promptly; a legitimate scrape still succeeds. Before, the POSTs
// got no answer and every connection was held (no ReadTimeout, no
// IdleTimeout).
func TestRefusedClientsCannotHoldTheProxy(t *testing.T) {
	e := newScrapeEnv(t)
	base := startProxy(t, e.args()...)
	addr := strings.TrimPrefix(base, "https://")
	start := time.Now()
	if err := clitest.HoldRefused(addr, "/metrics", 300, http.StatusUnauthorized); err != nil {
		t.Fatal(err)
	}
	t.Logf("300 refused requests answered and closed in %v", time.Since(start))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	if code := scrape(t, client, base, "/metrics", e.token); code != 200 {
		t.Fatalf("legitimate scrape = %d; want 200", code)
	}
}

// TestLoggingAsAComponent (issue #12): the program takes component-base's
// logging flags. At the default verbosity an allowed scrape writes no log
// line (50 scrapes, none), a refusal does; at -v=4 every allowed request
// is logged; at -v=10, in text and in JSON, no token appears anywhere in
// the output. It runs the real program (this test binary as main).
func TestLoggingAsAComponent(t *testing.T) {
	e := newScrapeEnv(t)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	tests := []struct {
		name        string
		flags       []string
		wantAllowed int // lines for the 50 allowed requests: exact at 0, at least otherwise
	}{
		{"default", nil, 0},
		{"v4", []string{"-v=4"}, 50},
		{"v10 text", []string{"-v=10"}, 50},
		{"v10 json", []string{"-v=10", "--logging-format=json"}, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := clitest.Start(t, e.args(tt.flags...)...)
			for range 50 {
				if code := scrape(t, client, p.Addr, "/metrics", e.token); code != 200 {
					t.Fatalf("scrape = %d; want 200", code)
				}
			}
			if code := scrape(t, client, p.Addr, "/logs/", e.token); code != 403 {
				t.Fatalf("GET /logs/ = %d; want 403", code)
			}
			for _, tok := range []string{e.apiAudToken, "not-a-token-at-all-0123456789"} {
				if code := scrape(t, client, p.Addr, "/metrics", tok); code != 401 {
					t.Fatalf("bad token = %d; want 401", code)
				}
			}
			client.CloseIdleConnections()
			p.Stop(t)
			out := p.Output()
			for _, tok := range []string{e.token, e.apiAudToken, "not-a-token-at-all-0123456789"} {
				if strings.Contains(out, tok) {
					t.Fatalf("the output holds a token")
				}
				// JWT parts, in case a logger split or escaped it.
				for _, part := range strings.Split(tok, ".") {
					if len(part) > 20 && strings.Contains(out, part) {
						t.Fatalf("the output holds part of a token")
					}
				}
			}
			allowed := 0
			refused := 0
			sc := bufio.NewScanner(strings.NewReader(out))
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				if strings.Contains(line, "httpauth: request allowed") {
					allowed++
				}
				if strings.Contains(line, "httpauth: request forbidden") && strings.Contains(line, "/logs/") {
					refused++
				}
			}
			if tt.wantAllowed == 0 && allowed != 0 || allowed < tt.wantAllowed {
				t.Errorf("lines for 50 allowed requests = %d; want %d", allowed, tt.wantAllowed)
			}
			if refused != 1 {
				t.Errorf("lines for the refusal = %d; want 1", refused)
			}
			if tt.name == "default" && strings.Contains(out, `path="/metrics" code=200`) {
				t.Errorf("per-request lines at the default verbosity:\n%s", out)
			}
			if tt.name == "v10 json" && !strings.Contains(out, `"msg":"httpauth: request forbidden"`) {
				t.Errorf("--logging-format=json did not log JSON:\n%.2000s", out)
			}
		})
	}
}

// TestVersionAndHealth (issue #12): --version prints the version and
// exits; --metrics-listen serves /healthz, /livez and /readyz (ready while
// serving) besides /metrics.
func TestVersionAndHealth(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), []string{"--version"}, &out); err != nil {
		t.Fatalf("run(--version) = %v", err)
	}
	if !strings.HasPrefix(out.String(), "metricsproxy ") {
		t.Errorf("--version printed %q", out.String())
	}
	e := newScrapeEnv(t)
	p := clitest.Start(t, e.args("--metrics-listen", "127.0.0.1:0")...)
	var metricsURL string
	for _, line := range strings.Split(p.Stdout.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "metrics on "); ok {
			metricsURL = strings.TrimSuffix(v, "/metrics")
		}
	}
	if metricsURL == "" {
		t.Fatalf("no metrics line in %q", p.Stdout.String())
	}
	for _, path := range []string{"/healthz", "/livez", "/readyz", "/metrics"} {
		resp, err := http.Get(metricsURL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s = %d; want 200", path, resp.StatusCode)
		}
		// The proxy's server reports its admission (issue #22).
		if want := `reviewauth_connections{state="admitted"}`; path == "/metrics" && !strings.Contains(string(body), want) {
			t.Errorf("GET /metrics has no %s", want)
		}
	}
}
