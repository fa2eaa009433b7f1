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
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// BenchmarkProxy measures one authorized GET /metrics from a client over
// TLS (HTTP/1.1, keep-alive), with warm caches, on one authtest server, in
// kube-rbac-proxy's usual topology: a sidecar in the upstream's pod, which
// reaches the upstream over plain HTTP on loopback, the upstream serving
// TLS to nobody else. The variants:
//
//   - direct: the client to the upstream serving the same TLS itself, no
//     proxy: what the upstream would cost if it authenticated nobody;
//   - proxy: the same httputil.ReverseProxy the other two use, with
//     rbacproxy's upstream transport and buffer pool, without
//     authentication, on a plain net/http TLS server: the cost of the hop
//     alone;
//   - reviewauth: rbacproxy itself, started by run with
//     kube-rbac-proxy's flags (non-resource review of the path), serving
//     through serving.HTTPServer;
//   - apiserver: the same reverse proxy wrapped in k8s.io/apiserver's
//     WithRequestInfo, WithAuthentication and WithAuthorization over its
//     delegated token authenticator (token cache over the TokenReview
//     webhook, bearertoken) and its SubjectAccessReview webhook authorizer
//     with kube-rbac-proxy's TTLs (2m; 5m/30s), on a plain net/http TLS
//     server;
//   - interleaved: one GET of each of the four per iteration, so that the
//     load of the machine weighs on all alike; it reports each one's
//     ns/op (direct-ns/op, ...), what each proxy adds to direct
//     (hop-ns/op for proxy, reviewauth-added-ns/op,
//     apiserver-added-ns/op), x-apiserver (reviewauth's added latency
//     over apiserver's, the ratio), and the same for the process's
//     CPU time per request (client, proxy and upstream all run in this
//     process: *-cpu-ns/op, x-apiserver-cpu), and x-apiserver-over-hop,
//     the ratio of what each adds over the bare hop.
//
// All servers present the same certificate. Every variant's ns/op includes
// the client and the upstream; a variant's added latency is its ns/op
// minus direct's. new-conns/op counts the connections the upstream
// accepted while a variant ran: 0 when keep-alive connections are reused.
// BenchmarkProxyTLSUpstream is the same with the upstream reached over
// TLS.
func BenchmarkProxy(b *testing.B) { benchmarkProxy(b, false) }

// BenchmarkProxyTLSUpstream is BenchmarkProxy with the proxies reaching the
// upstream over TLS (rbacproxy's --upstream-ca-file), as direct does: the
// topology of an upstream that serves TLS itself.
func BenchmarkProxyTLSUpstream(b *testing.B) { benchmarkProxy(b, true) }

func benchmarkProxy(b *testing.B, tlsUpstream bool) {
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
	start := func(h http.Handler, tls bool, conns *atomic.Int64) string {
		s := httptest.NewUnstartedServer(h)
		if conns != nil {
			s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}
		}
		if tls {
			s.TLS = serverTLS.Clone()
			s.StartTLS()
		} else {
			s.Start()
		}
		b.Cleanup(s.Close)
		return s.URL
	}

	// The upstream, over TLS for direct, and over plain HTTP on loopback
	// for the proxies unless tlsUpstream.
	var upConns atomic.Int64
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, metricsBody)
	})
	directURL := start(metrics, true, &upConns)
	upURL := directURL
	if !tlsUpstream {
		upURL = start(metrics, false, &upConns)
	}
	upstream, _ := url.Parse(upURL)
	newReverseProxy := func() *httputil.ReverseProxy {
		return &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(upstream)
				pr.SetXForwarded()
			},
			Transport:  cli.UpstreamTransport(&tls.Config{InsecureSkipVerify: true}),
			BufferPool: cli.ProxyBuffers,
		}
	}

	// rbacproxy, as it runs.
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	args := []string{"--secure-listen-address=127.0.0.1:0", "--upstream=" + upURL, "--kubeconfig=" + kubeconfig,
		"--auth-token-audiences=" + audience, "--tls-cert-file=" + caFile, "--tls-private-key-file=" + keyFile,
		"--http2-disable"}
	if tlsUpstream {
		args = append(args, "--upstream-ca-file="+caFile)
	}
	go func() {
		done <- run(ctx, args, pw, io.Discard)
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
		{"direct", directURL},
		{"proxy", start(newReverseProxy(), true, nil)},
		{"reviewauth", reviewauthURL},
		{"apiserver", start(theirs, true, nil)},
	}
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true},
		MaxIdleConnsPerHost: 64,
		DialContext:         (&net.Dialer{}).DialContext,
	}}
	b.Cleanup(client.CloseIdleConnections)
	auth := []string{"Bearer " + token}
	requests := make([]*http.Request, len(variants))
	for i, v := range variants {
		requests[i], _ = http.NewRequest("GET", v.url+"/metrics", nil)
	}
	// get sends one GET to variant i and returns its latency and the
	// process's CPU time meanwhile.
	get := func(b *testing.B, i int) (time.Duration, time.Duration) {
		req := requests[i]
		req.Header = http.Header{"Authorization": auth}
		cpu := processCPU()
		t := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d, c := time.Since(t), processCPU()-cpu
		if resp.StatusCode != 200 || n != int64(len(metricsBody)) {
			b.Fatalf("GET %s = %d, %d bytes", req.URL, resp.StatusCode, n)
		}
		return d, c
	}
	for i := range variants {
		get(b, i) // warm the caches and the connections
	}
	tr, sars := api.Count(authtest.TokenReviews), api.Count(authtest.SubjectAccessReviews)
	b.Cleanup(func() {
		if n, m := api.Count(authtest.TokenReviews)-tr, api.Count(authtest.SubjectAccessReviews)-sars; n != 0 || m != 0 {
			b.Errorf("the warm benchmark sent %d TokenReviews and %d SubjectAccessReviews; want 0", n, m)
		}
	})
	for i, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			conns := upConns.Load()
			var cpu time.Duration
			b.ReportAllocs()
			for b.Loop() {
				_, c := get(b, i)
				cpu += c
			}
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(upConns.Load()-conns)/float64(b.N), "new-conns/op")
		})
	}
	b.Run("interleaved", func(b *testing.B) {
		var wall, cpu [4]time.Duration
		for b.Loop() {
			for i := range variants {
				d, c := get(b, i)
				wall[i] += d
				cpu[i] += c
			}
		}
		n := float64(b.N)
		report := func(d [4]time.Duration, unit string) {
			added := func(i int) float64 { return float64(d[i]-d[0]) / n }
			b.ReportMetric(float64(d[0])/n, "direct-"+unit)
			b.ReportMetric(added(1), "hop-"+unit)
			b.ReportMetric(added(2), "reviewauth-added-"+unit)
			b.ReportMetric(added(3), "apiserver-added-"+unit)
		}
		report(wall, "ns/op")
		report(cpu, "cpu-ns/op")
		b.ReportMetric(float64(wall[2]-wall[0])/float64(wall[3]-wall[0]), "x-apiserver")
		b.ReportMetric(float64(cpu[2]-cpu[0])/float64(cpu[3]-cpu[0]), "x-apiserver-cpu")
		b.ReportMetric(float64(wall[2]-wall[1])/float64(wall[3]-wall[1]), "x-apiserver-over-hop")
	})
}

// processCPU is the CPU time (user and system) of this process so far.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
