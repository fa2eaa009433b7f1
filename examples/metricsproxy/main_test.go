package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/examples/internal/clitest"
	"github.com/reviewauth/reviewauth/examples/internal/difftest"
	"github.com/reviewauth/reviewauth/httpauth"
)

func TestMain(m *testing.M) {
	clitest.MaybeRunMain(main)
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		// client-go keeps idle keep-alive connections to the API server in
		// its shared transport cache.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// upstream is the node metrics endpoint behind the proxy.
type upstream struct {
	mu      sync.Mutex
	paths   []string
	headers []http.Header
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.paths = append(u.paths, r.URL.Path)
	u.headers = append(u.headers, r.Header.Clone())
	u.mu.Unlock()
	_, _ = io.WriteString(w, "upstream "+r.URL.Path)
}

func (u *upstream) seen() ([]string, []http.Header) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.paths...), append([]http.Header(nil), u.headers...)
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// writePEM writes blocks to a new file in dir.
func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// clientCA returns a CA file and a client certificate it signed for CN cn
// in group group.
func clientCA(t *testing.T, dir, cn, group string) (caFile string, client tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test client CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn, Organization: []string{group}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, "client-ca.pem", "CERTIFICATE", caDER), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// startProxy runs the proxy in-process with args and returns its base URL.
// It is stopped, and run's result checked, when the test ends.
func startProxy(t *testing.T, args ...string) string {
	t.Helper()
	return startProxyWith(t, context.Background(), args...)
}

// startProxyWith is startProxy with a parent context (and its logger).
func startProxyWith(t *testing.T, parent context.Context, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(parent)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"--listen", "127.0.0.1:0"}, args...), pw)
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("proxy did not start: %v (run: %v)", err, <-done)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run() = %v after cancel; want nil", err)
		}
	})
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if !ok {
		t.Fatalf("proxy printed %q; want \"listening on https://...\"", line)
	}
	return base
}

func TestProxy(t *testing.T) {
	api := authtest.Start(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := api.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	scraper := &user.DefaultInfo{Name: "system:serviceaccount:monitoring:prometheus", Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	api.SetPolicy(authtest.Rules(
		authtest.Rule{Users: []string{scraper.Name}, Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}, Subresources: []string{"metrics"}, Names: []string{"node-1"}},
		authtest.Rule{Groups: []string{"cert-scrapers"}, Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}, Subresources: []string{"metrics"}},
	))
	exp := time.Now().Add(time.Hour)
	token := api.MintToken(scraper, []string{"metricsproxy"}, exp)
	apiServerToken := api.MintToken(scraper, nil, exp)

	up := &upstream{}
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	caFile, clientCert := clientCA(t, dir, "cert-scraper", "cert-scrapers")

	// Capture the log at the default verbosity through the context's
	// logger, which the server passes to every request.
	var logs syncBuffer
	logCtx := klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs))))
	t.Cleanup(func() {
		out := logs.String()
		for _, tok := range []string{token, apiServerToken, "not-a-token"} {
			if strings.Contains(out, tok) {
				t.Errorf("the log contains a token")
			}
		}
		// Refusals are logged at the default verbosity, with the user
		// and the cleaned path; allowed requests are not.
		for _, want := range []string{
			`"httpauth: request forbidden" user="system:serviceaccount:monitoring:prometheus" method="GET" path="/logs/"`,
			`"httpauth: request forbidden" user="system:serviceaccount:monitoring:prometheus" method="GET" path="/logs/x"`,
			`"httpauth: request unauthenticated" user="" method="GET" path="/metrics"`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("the log has no line with %s; log:\n%s", want, out)
			}
		}
		if strings.Contains(out, "request allowed") || strings.Contains(out, "always allowed") {
			t.Errorf("allowed requests are logged at the default verbosity:\n%s", out)
		}
	})

	base := startProxyWith(t, logCtx, "--upstream", upSrv.URL, "--kubeconfig", kubeconfig, "--audience", "metricsproxy",
		"--node-name", "node-1", "--client-ca-file", caFile, "--authorization-always-allow-paths", "/healthz")

	insecure := &tls.Config{InsecureSkipVerify: true} // the proxy's certificate is self-signed
	tokenClient := &http.Client{Transport: &http.Transport{TLSClientConfig: insecure}}
	certTLS := insecure.Clone()
	certTLS.Certificates = []tls.Certificate{clientCert}
	certClient := &http.Client{Transport: &http.Transport{TLSClientConfig: certTLS}}
	t.Cleanup(tokenClient.CloseIdleConnections)
	t.Cleanup(certClient.CloseIdleConnections)

	tests := []struct {
		name, method string
		path, token  string
		client       *http.Client
		spoof        bool
		wantCode     int
		wantUpstream string // path the upstream must have served
	}{
		{name: "scraper gets /metrics", path: "/metrics", token: token, wantCode: 200, wantUpstream: "/metrics"},
		{name: "scraper gets /metrics/cadvisor", path: "/metrics/cadvisor", token: token, wantCode: 200, wantUpstream: "/metrics/cadvisor"},
		{name: "scraper is refused /logs/", path: "/logs/", token: token, wantCode: 403},
		{name: "scraper is refused /stats/summary", path: "/stats/summary", token: token, wantCode: 403},
		{name: "dot-dot to /logs/ is refused", path: "/metrics/../logs/", token: token, wantCode: 403},
		{name: "double slash to /logs is refused", path: "//logs/x", token: token, wantCode: 403},
		{name: "encoded dot-dot is rejected", path: "/metrics/%2e%2e/logs/", token: token, wantCode: 400},
		{name: "cleaned path is what is proxied", path: "//metrics/./cadvisor", token: token, wantCode: 200, wantUpstream: "/metrics/cadvisor"},
		{name: "spoofed identity headers are stripped", path: "/metrics", token: token, spoof: true, wantCode: 200, wantUpstream: "/metrics"},
		{name: "no token", path: "/metrics", wantCode: 401},
		{name: "token for the API server's audience", path: "/metrics", token: apiServerToken, wantCode: 401},
		{name: "garbage token", path: "/metrics", token: "not-a-token", wantCode: 401},
		{name: "always-allowed path", path: "/healthz", wantCode: 200, wantUpstream: "/healthz"},
		{name: "always-allowed path, HEAD", method: "HEAD", path: "/healthz", wantCode: 200, wantUpstream: "/healthz"},
		{name: "always-allowed path with a valid token", path: "/healthz", token: token, spoof: true, wantCode: 200, wantUpstream: "/healthz"},
		{name: "always-allowed path with a bad token", path: "/healthz", token: "not-a-token", wantCode: 401},
		{name: "always-allowed path with an API server token", path: "/healthz", token: apiServerToken, wantCode: 401},
		{name: "POST to an always-allowed path", method: "POST", path: "/healthz", wantCode: 401},
		{name: "DELETE to an always-allowed path", method: "DELETE", path: "/healthz", token: token, wantCode: 403},
		{name: "client certificate gets /metrics", path: "/metrics", client: certClient, wantCode: 200, wantUpstream: "/metrics"},
		{name: "client certificate is refused /logs/", path: "/logs/", client: certClient, wantCode: 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := up.seen()
			method := tt.method
			if method == "" {
				method = "GET"
			}
			req, err := http.NewRequest(method, base+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			// Send the path exactly as written, without client-side cleaning.
			req.URL.Opaque = "//" + req.URL.Host + tt.path
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			if tt.spoof {
				req.Header.Set("X-Remote-User", "system:admin")
				req.Header.Set("X-Remote-Group", "system:masters")
				req.Header.Set("X-Remote-Extra-Scopes", "all")
				req.Header.Set("Impersonate-User", "system:admin")
				req.Header.Set("Impersonate-Group", "system:masters")
				req.Header["X-Remote_User"] = []string{"system:admin"}
				req.Header["Impersonate_User"] = []string{"system:admin"}
			}
			client := tt.client
			if client == nil {
				client = tokenClient
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("GET %s: %v", tt.path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("GET %s: code = %d; want %d (body %s)", tt.path, resp.StatusCode, tt.wantCode, body)
			}
			if tt.token != "" && strings.Contains(string(body), tt.token) {
				t.Errorf("GET %s: response echoes the token", tt.path)
			}
			after, headers := up.seen()
			if tt.wantUpstream == "" {
				if len(after) != len(before) {
					t.Errorf("GET %s: upstream was called (%v); want not called", tt.path, after[len(before):])
				}
				return
			}
			if len(after) != len(before)+1 || after[len(after)-1] != tt.wantUpstream {
				t.Fatalf("GET %s: upstream saw %v; want one request for %q", tt.path, after[len(before):], tt.wantUpstream)
			}
			h := headers[len(headers)-1]
			for k := range h {
				lk := strings.ReplaceAll(strings.ToLower(k), "_", "-")
				if lk == "authorization" || strings.HasPrefix(lk, "x-remote-") || strings.HasPrefix(lk, "impersonate-") {
					t.Errorf("GET %s: upstream received header %s; want it stripped", tt.path, k)
				}
			}
			if method != "HEAD" && string(body) != "upstream "+tt.wantUpstream {
				t.Errorf("GET %s: body = %q; want %q", tt.path, body, "upstream "+tt.wantUpstream)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	base := []string{"--upstream", "http://127.0.0.1:1", "--node-name", "n", "--audience", "a", "--kubeconfig", "/nonexistent"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no upstream", []string{"--node-name", "n", "--audience", "a"}, "--upstream is required"},
		{"no node name", []string{"--upstream", "http://x", "--audience", "a"}, "--node-name is required"},
		{"no audience", []string{"--upstream", "http://x", "--node-name", "n"}, "--audience is required"},
		{"cert without key", append(base, "--tls-cert-file", "c.pem"), "go together"},
		{"bad upstream", []string{"--upstream", "unix:///x", "--node-name", "n", "--audience", "a"}, "not an http(s) URL"},
		{"missing kubeconfig", base, "--authentication-kubeconfig"},
		{"stray argument", append(base, "extra"), "unexpected arguments"},
		{"--allow-path is gone", append(base, "--allow-path", "/healthz"), "unknown flag: --allow-path"},
		{"bad always-allow path", append(base, "--authorization-always-allow-paths", "healthz"), "--authorization-always-allow-paths"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := run(context.Background(), tt.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run(%q) = %v; want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

func TestMetricsEndpoint(t *testing.T) {
	api := authtest.Start(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	scraper := &user.DefaultInfo{Name: "prometheus"}
	api.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{scraper.Name}, Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}, Subresources: []string{"metrics"}}))
	token := api.MintToken(scraper, []string{"metricsproxy"}, time.Now().Add(time.Hour))
	upSrv := httptest.NewServer(&upstream{})
	t.Cleanup(upSrv.Close)

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--upstream", upSrv.URL,
			"--kubeconfig", kubeconfig, "--audience", "metricsproxy", "--node-name", "node-1"}, pw)
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run() = %v", err)
		}
	})
	rd := bufio.NewReader(pr)
	var base, metricsURL string
	for base == "" || metricsURL == "" {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the proxy's output: %v", err)
		}
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "listening on "); ok {
			base = v
		}
		if v, ok := strings.CutPrefix(line, "metrics on "); ok {
			metricsURL = v
		}
	}
	go io.Copy(io.Discard, rd)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(client.CloseIdleConnections)
	for _, path := range []string{"/metrics", "/metrics", "/logs/"} {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`reviewauth_decisions_total{outcome="allowed",transport="http"} 2`,
		`reviewauth_decisions_total{outcome="denied",transport="http"} 1`,
		`reviewauth_reviews_total{code="201",review="TokenReview"} 1`,
		`reviewauth_reviews_total{code="201",review="SubjectAccessReview"} 2`,
		`reviewauth_cache_hits_total{cache="token"} 2`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(string(body), token) {
		t.Errorf("/metrics contains the token")
	}
}

func TestFineGrainedFlag(t *testing.T) {
	api := authtest.Start(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	reader := &user.DefaultInfo{Name: "pods-reader"}
	api.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{reader.Name}, Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}, Subresources: []string{"pods"}}))
	token := api.MintToken(reader, []string{"metricsproxy"}, time.Now().Add(time.Hour))
	upSrv := httptest.NewServer(&upstream{})
	t.Cleanup(upSrv.Close)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(client.CloseIdleConnections)
	for _, tt := range []struct {
		flag bool
		want int
	}{{false, http.StatusForbidden}, {true, http.StatusOK}} {
		args := []string{"--upstream", upSrv.URL, "--kubeconfig", kubeconfig, "--audience", "metricsproxy", "--node-name", "node-1"}
		if tt.flag {
			args = append(args, "--kubelet-fine-grained-authz")
		}
		base := startProxy(t, args...)
		req, _ := http.NewRequest("GET", base+"/pods", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("fine-grained %v: GET /pods with only nodes/pods = %d; want %d", tt.flag, resp.StatusCode, tt.want)
		}
	}
}

// TestForwardedIsAuthorized is the differential test of metricsproxy
// (issue #21), as examples/rbacproxy's: for a corpus of requests
// (Connection headers naming the identity headers and Authorization,
// spoofed identity headers in every spelling, unclean and encoded paths,
// methods), from a bearer token and from a client certificate, over
// HTTP/1.1 and HTTP/2, with and without --forward-identity, what the
// upstream received, read back as an upstream reads it (the kubelet's
// path table over the received method and path; the identity from the
// front-proxy headers with k8s.io/apiserver's requestheader
// authenticator, their names in any case and '_' for '-'), equals what
// was authorized: the SubjectAccessReview allowed for that request, and
// the user it was for (certificate users with system:authenticated, as on
// the kubelet). Without --forward-identity, no identity header at all.
func TestForwardedIsAuthorized(t *testing.T) {
	for _, forward := range []bool{true, false} {
		t.Run(fmt.Sprintf("forward-identity=%v", forward), func(t *testing.T) {
			api, kubeconfig := difftest.StartAPIServer(t)
			dir := t.TempDir()
			rec := &difftest.Recorder{}
			nodeRule := func(subresource string) authtest.Rule {
				return authtest.Rule{Verbs: []string{"get", "create"}, APIGroups: []string{""}, Resources: []string{"nodes"}, Subresources: []string{subresource}, Names: []string{"node-1"}}
			}
			metrics, stats := nodeRule("metrics"), nodeRule("stats")
			metrics.Groups = []string{"cert-scrapers", "system:serviceaccounts"}
			stats.Groups = []string{user.AllAuthenticated}
			api.SetPolicy(rec.Policy(authtest.Rules(metrics, stats)))
			exp := time.Now().Add(time.Hour)
			scraper := api.MintToken(&user.DefaultInfo{Name: "system:serviceaccount:monitoring:prometheus", UID: "uid-1",
				Groups: []string{"system:serviceaccounts", user.AllAuthenticated}, Extra: map[string][]string{"authentication.kubernetes.io/pod-name": {"prometheus-0"}}},
				[]string{"metricsproxy"}, exp)
			bare := api.MintToken(&user.DefaultInfo{Name: "bare"}, []string{"metricsproxy"}, exp)
			up := &difftest.Upstream{}
			upSrv := httptest.NewServer(up)
			t.Cleanup(upSrv.Close)
			caFile, cert := clientCA(t, dir, "cert-scraper", "cert-scrapers")
			args := []string{"--upstream", upSrv.URL, "--kubeconfig", kubeconfig, "--audience", "metricsproxy", "--node-name", "node-1",
				"--client-ca-file", caFile, "--authentication-token-webhook-cache-ttl=0",
				"--authorization-webhook-cache-authorized-ttl=0", "--authorization-webhook-cache-unauthorized-ttl=0"}
			if forward {
				args = append(args, "--forward-identity")
			}
			base := startProxy(t, args...)
			read := func(r *http.Request) (difftest.Decision, error) {
				var d difftest.Decision
				for k, v := range difftest.Lenient(r.Header) {
					lk := strings.ToLower(k)
					if strings.HasPrefix(lk, "impersonate-") || lk == "authorization" || (!forward && strings.HasPrefix(lk, "x-remote-")) {
						return d, fmt.Errorf("%s: %q reached the upstream", k, v)
					}
				}
				var err error
				if d.User, err = difftest.FrontProxyUser(r.Header); err != nil {
					return d, err
				}
				attrs, err := httpauth.Kubelet("node-1").Attributes(r, nil)
				for _, a := range attrs {
					d.Attributes = append(d.Attributes, difftest.AttributesOf(a))
				}
				return d, err
			}
			identity := func(u *difftest.User) *difftest.User {
				if !forward {
					return nil
				}
				return u
			}
			corpus := difftest.Corpus(difftest.CorpusOptions{
				Methods: []string{"GET", "POST", "HEAD"},
				Targets: []string{"/metrics", "/metrics/cadvisor", "//metrics", "/./metrics/../stats/summary", "/stats/summary?x=1&x=2",
					"/logs/x", "/%6detrics", "/metrics/%2e%2e/logs", "/pods", "/metrics%2fcadvisor"},
				Authorization:   []string{"Bearer " + scraper, "Bearer " + bare, "", "Bearer not-a-token-0123456789"},
				IdentityHeaders: []string{"X-Remote-User", "X-Remote-Uid", "X-Remote-Group", "X-Remote-Extra-Scopes", "Impersonate-User"},
			})
			h1, h2, closeIdle := difftest.Clients()
			defer closeIdle()
			withCert := func(c *http.Client) *http.Client {
				tr := c.Transport.(*http.Transport).Clone()
				tr.TLSClientConfig.Certificates = []tls.Certificate{cert}
				return &http.Client{Transport: tr, Timeout: c.Timeout}
			}
			h1cert, h2cert := withCert(h1), withCert(h2)
			defer h1cert.CloseIdleConnections()
			defer h2cert.CloseIdleConnections()
			for name, client := range map[string]*http.Client{"HTTP/1.1": h1, "HTTP/2": h2, "HTTP/1.1, certificate": h1cert, "HTTP/2, certificate": h2cert} {
				p := difftest.Proxy{
					Send:       func(r difftest.Request) (int, error) { return difftest.Send(client, base, r) },
					Authorized: rec, Upstream: up, Read: read, Identity: identity,
				}
				if err := difftest.Check(p, corpus); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		})
	}
}
