package serving_test

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
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"golang.org/x/net/http2"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/serving"
)

// testCA is a CA that issues serving and client certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serialMu sync.Mutex
var nextSerial int64 = 1

func serial() *big.Int {
	serialMu.Lock()
	defer serialMu.Unlock()
	nextSerial++
	return big.NewInt(nextSerial)
}

func newCA(t testing.TB, cn string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// issue returns a certificate and key (PEM) for cn: a server certificate
// for hosts, or a client certificate in groups when hosts is nil.
func (ca *testCA) issue(t testing.TB, cn string, hosts []string, groups ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: cn, Organization: groups},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if hosts != nil {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func (ca *testCA) clientCert(t testing.TB, cn string, groups ...string) tls.Certificate {
	t.Helper()
	c, k := ca.issue(t, cn, nil, groups...)
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// writeAtomic replaces path's content by renaming a new file over it, as
// kubelet-mounted secrets and cert-manager do.
func writeAtomic(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// lines is a concurrency-safe log collector usable as a klog.Logger.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) logger() klog.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.all = append(l.all, prefix+" "+args)
	}, funcr.Options{Verbosity: 0})
}

func (l *lines) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.all...)
}

// serve runs srv on a loopback listener until the test ends, with ctx's
// logger, and returns the address.
func serve(t testing.TB, ctx context.Context, srv *serving.HTTPServer) string {
	t.Helper()
	addr, _ := serveStoppable(t, ctx, srv)
	return addr
}

// serveStoppable is serve, and stop, which stops the server and returns
// how long Serve took to return.
func serveStoppable(t testing.TB, ctx context.Context, srv *serving.HTTPServer) (addr string, stop func() time.Duration) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln.Addr().String(), runUntilStopped(t, ctx, "Serve", func(ctx context.Context) error { return srv.Serve(ctx, ln) })
}

// runUntilStopped runs serve (named name) in a goroutine until stop, also
// called when the test ends, cancels its context; stop checks serve
// returned nil and returns how long it took to.
func runUntilStopped(t testing.TB, ctx context.Context, name string, serve func(context.Context) error) (stop func() time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- serve(ctx) }()
	var once sync.Once
	var took time.Duration
	stop = func() time.Duration {
		once.Do(func() {
			start := time.Now()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s() = %v after cancel; want nil", name, err)
			}
			took = time.Since(start)
		})
		return took
	}
	t.Cleanup(func() { stop() })
	return stop
}

// waitFor polls cond every 10ms until it holds or d passes: a bounded
// wait on an outcome, never a wait for time itself.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// answersOn reads fr's frames until its connection ends, and sends the
// stream of each HEADERS frame (only of those that end their stream, if
// ended); the channel, of size n, is closed once the connection ends.
func answersOn(fr *http2.Framer, n int, ended bool) <-chan uint32 {
	answers := make(chan uint32, n)
	go func() {
		defer close(answers)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if h, ok := f.(*http2.HeadersFrame); ok && (!ended || h.StreamEnded()) {
				answers <- h.StreamID
			}
		}
	}()
	return answers
}

// stepUntil steps clk 100ms at a time until got has a result, for up to
// 10s, and returns it: a newcomer's call, once the grace of the
// connection it waits for has passed on clk.
func stepUntil(t testing.TB, clk *clocktesting.FakeClock, got <-chan error) error {
	t.Helper()
	var err error
	waitFor(t, 10*time.Second, "the newcomer to be served", func() bool {
		clk.Step(100 * time.Millisecond)
		select {
		case err = <-got:
			return true
		default:
			return false
		}
	})
	return err
}

// get sends req with client and returns the status and body, failing t
// if it could not be sent.
func get(t testing.TB, client *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
