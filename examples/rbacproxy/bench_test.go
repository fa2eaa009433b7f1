package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	tokenwebhook "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	sarwebhook "k8s.io/apiserver/plugin/pkg/authorizer/webhook"
	sarmetrics "k8s.io/apiserver/plugin/pkg/authorizer/webhook/metrics"
	"k8s.io/client-go/kubernetes"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/examples/internal/cli"
)

// metricsBody is what the upstream answers: a small Prometheus exposition.
var metricsBody = strings.Repeat("# TYPE http_requests_total counter\nhttp_requests_total{code=\"200\"} 1027\n", 16)

// BenchmarkProxy measures one authorized GET /metrics, from a client over
// TLS (HTTP/1.1, keep-alive), with warm caches, on one authtest server:
//
//   - direct: the client to the upstream (TLS), no proxy;
//   - proxy: the same httputil.ReverseProxy the other two use, with
//     rbacproxy's upstream transport, without authentication, on a plain
//     net/http TLS server: the cost of the hop alone;
//   - reviewauth: rbacproxy itself, started by run with
//     kube-rbac-proxy's flags (non-resource review of the path), serving
//     through serving.HTTPServer;
//   - apiserver: the same reverse proxy wrapped in k8s.io/apiserver's
//     WithRequestInfo, WithAuthentication and WithAuthorization over its
//     delegated token authenticator (token cache over the TokenReview
//     webhook, bearertoken) and its SubjectAccessReview webhook authorizer
//     with kube-rbac-proxy's TTLs (2m; 5m/30s), on a plain net/http TLS
//     server.
//
// All servers present the same certificate. A variant's added latency is
// its ns/op minus direct's.
func BenchmarkProxy(b *testing.B) {
	api := authtest.Start(b)
	api.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{scraperName}, Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}}))
	token := api.MintToken(&user.DefaultInfo{Name: scraperName, Groups: []string{"system:serviceaccounts", "system:authenticated"}},
		[]string{audience}, time.Now().Add(24*time.Hour))
	dir := b.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := api.WriteKubeconfig(kubeconfig); err != nil {
		b.Fatal(err)
	}

	// One certificate for every server.
	caFile, keyFile := serverCert(b, dir)
	pair, err := tls.LoadX509KeyPair(caFile, keyFile)
	if err != nil {
		b.Fatal(err)
	}
	serverTLS := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	startTLS := func(h http.Handler) string {
		s := httptest.NewUnstartedServer(h)
		s.TLS = serverTLS.Clone()
		s.StartTLS()
		b.Cleanup(s.Close)
		return s.URL
	}

	upURL := startTLS(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, metricsBody)
	}))
	upstream, _ := url.Parse(upURL)
	newReverseProxy := func() *httputil.ReverseProxy {
		return &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(upstream)
				pr.SetXForwarded()
			},
			Transport: cli.UpstreamTransport(&tls.Config{InsecureSkipVerify: true}),
		}
	}

	// rbacproxy, as it runs.
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--secure-listen-address=127.0.0.1:0", "--upstream=" + upURL, "--kubeconfig=" + kubeconfig,
			"--auth-token-audiences=" + audience, "--tls-cert-file=" + caFile, "--tls-private-key-file=" + keyFile,
			"--upstream-ca-file=" + caFile, "--http2-disable"}, pw, io.Discard)
		pw.Close()
	}()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("run() = %v", err)
		}
	})
	var reviewauthURL string
	buf := make([]byte, 4096)
	var out strings.Builder
	for reviewauthURL == "" {
		n, err := pr.Read(buf)
		if err != nil {
			b.Fatalf("rbacproxy did not start: %v", err)
		}
		out.Write(buf[:n])
		if i := strings.Index(out.String(), "listening on "); i >= 0 {
			if line, _, ok := strings.Cut(out.String()[i+len("listening on "):], "\n"); ok {
				reviewauthURL = line
			}
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	// k8s.io/apiserver's delegated filters.
	cs, err := kubernetes.NewForConfig(api.Config())
	if err != nil {
		b.Fatal(err)
	}
	noop := tokenwebhook.AuthenticatorMetrics{
		RecordRequestTotal:   func(context.Context, string) {},
		RecordRequestLatency: func(context.Context, string, float64) {},
	}
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	wh, err := tokenwebhook.NewFromInterface(cs.AuthenticationV1(), authenticator.Audiences{audience}, backoff, 10*time.Second, noop)
	if err != nil {
		b.Fatal(err)
	}
	theirTokens := bearertoken.New(tokencache.New(wh, false, 2*time.Minute, 10*time.Second))
	theirSAR, err := sarwebhook.NewFromInterface(cs.AuthorizationV1(), 5*time.Minute, 30*time.Second, backoff, authorizer.DecisionNoOpinion, sarmetrics.NoopAuthorizerMetrics{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(runtime.NewScheme())
	var theirs http.Handler = newReverseProxy()
	theirs = filters.WithAuthorization(theirs, theirSAR, codecs)
	theirs = filters.WithAuthentication(theirs, theirTokens, filters.Unauthorized(codecs), authenticator.Audiences{audience}, nil)
	theirs = filters.WithRequestInfo(theirs, &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")})

	variants := []struct{ name, url string }{
		{"direct", upURL},
		{"proxy", startTLS(newReverseProxy())},
		{"reviewauth", reviewauthURL},
		{"apiserver", startTLS(theirs)},
	}
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true},
		MaxIdleConnsPerHost: 64,
		DialContext:         (&net.Dialer{}).DialContext,
	}}
	b.Cleanup(client.CloseIdleConnections)
	get := func(b *testing.B, base string) {
		req, _ := http.NewRequest("GET", base+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || n != int64(len(metricsBody)) {
			b.Fatalf("GET %s/metrics = %d, %d bytes", base, resp.StatusCode, n)
		}
	}
	for _, v := range variants {
		get(b, v.url) // warm the caches and the connections
	}
	tr, sars := api.Count(authtest.TokenReviews), api.Count(authtest.SubjectAccessReviews)
	b.Cleanup(func() {
		if n, m := api.Count(authtest.TokenReviews)-tr, api.Count(authtest.SubjectAccessReviews)-sars; n != 0 || m != 0 {
			b.Errorf("the warm benchmark sent %d TokenReviews and %d SubjectAccessReviews; want 0", n, m)
		}
	})
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				get(b, v.url)
			}
		})
	}
}

// serverCert writes a self-signed ECDSA P-256 certificate for 127.0.0.1
// and its key to dir.
func serverCert(b *testing.B, dir string) (certFile, keyFile string) {
	b.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	return certFile, keyFile
}
