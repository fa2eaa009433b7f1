package serving_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/reviewauth/reviewauth/httpauth"
	"github.com/reviewauth/reviewauth/serving"
)

// peerCN returns the CommonName of the certificate addr serves.
func peerCN(t testing.TB, addr string) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// TestServingCertificateReload (issue #12): the serving certificate is
// reloaded when its files are replaced: the next handshakes present the
// new one, without a restart.
func TestServingCertificateReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newCA(t, "serving CA")
	certA, keyA := ca.issue(t, "cert-a", []string{"127.0.0.1"})
	certFile := writeFile(t, dir, "tls.crt", certA)
	keyFile := writeFile(t, dir, "tls.key", keyA)
	certs, err := serving.NewCertificates(serving.CertificateOptions{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := serving.NewHTTPServer(http.NotFoundHandler(), serving.ServerOptions{Certificates: certs})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, t.Context(), srv)
	if cn := peerCN(t, addr); cn != "cert-a" {
		t.Fatalf("served %q; want cert-a", cn)
	}
	certB, keyB := ca.issue(t, "cert-b", []string{"127.0.0.1"})
	// Key first, then certificate: between the two the pair does not
	// match, and the old pair must go on being served.
	writeAtomic(t, keyFile, keyB)
	if cn := peerCN(t, addr); cn != "cert-a" {
		t.Fatalf("served %q with a mismatched pair on disk; want cert-a kept", cn)
	}
	writeAtomic(t, certFile, certB)
	waitFor(t, 70*time.Second, "the new certificate to be served", func() bool { return peerCN(t, addr) == "cert-b" })
	// A client verifying the chain accepts it.
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool(), ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("verified handshake after reload: %v", err)
	}
	c.Close()
}

// TestClientCAReload (issue #12): the client CA is reloaded when its file
// is replaced: certificates of the new CA are authenticated from then on,
// and those of the old CA are refused (nothing verified against it is
// reused).
func TestClientCAReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca1, ca2 := newCA(t, "client CA 1"), newCA(t, "client CA 2")
	caFile := writeFile(t, dir, "client-ca.crt", ca1.pem)
	certs, err := serving.NewCertificates(serving.CertificateOptions{ClientCAFile: caFile, SelfSigned: serving.SelfSigned{Name: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := certs.ClientCertificates(httpauth.ClientCertOptions{})
	if err != nil || cc == nil {
		t.Fatalf("ClientCertificates() = %v, %v", cc, err)
	}
	protect, err := httpauth.New(httpauth.Options{
		ClientCertificates: cc,
		Authorizer:         allowAll{},
		Attributes:         httpauth.NonResource(),
	})
	if err != nil {
		t.Fatal(err)
	}
	handler := protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := request.UserFrom(r.Context())
		_, _ = w.Write([]byte(u.GetName()))
	}))
	srv, err := serving.NewHTTPServer(handler, serving.ServerOptions{Certificates: certs})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, t.Context(), srv)
	status := func(cert tls.Certificate) int {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}}}}
		defer client.CloseIdleConnections()
		resp, err := client.Get("https://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	old, next := ca1.clientCert(t, "alice"), ca2.clientCert(t, "bob")
	if got := status(old); got != 200 {
		t.Fatalf("certificate of the configured CA = %d; want 200", got)
	}
	if got := status(next); got != 401 {
		t.Fatalf("certificate of another CA = %d; want 401", got)
	}
	// The handshake names the configured CA to clients.
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, GetClientCertificate: func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if len(cri.AcceptableCAs) != 1 || !strings.Contains(string(cri.AcceptableCAs[0]), "client CA 1") {
			t.Errorf("acceptable CAs = %q; want client CA 1", cri.AcceptableCAs)
		}
		return &tls.Certificate{}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()

	writeAtomic(t, caFile, ca2.pem)
	waitFor(t, 70*time.Second, "the new client CA to be used", func() bool { return status(next) == 200 })
	if got := status(old); got != 401 {
		t.Errorf("certificate of the rotated-out CA = %d after reload; want 401", got)
	}
}

// TestSelfSignedSANs (issue #12): a self-signed certificate is valid for
// the --tls-san names and addresses, so that a client dialling a Service
// DNS name can verify it; and it is written for clients to trust.
func TestSelfSignedSANs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	f := serving.TLSFlags{SANs: []string{"snapshot-metadata.csi.svc", "10.0.0.7"}, SelfSignedCAFile: caFile}
	certs, err := f.Certificates("snapshotmetadata", "")
	if err != nil {
		t.Fatal(err)
	}
	defer certs.Close()
	cert, err := x509.ParseCertificate(certs.SelfSignedCertificate())
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"snapshot-metadata.csi.svc", "10.0.0.7", "localhost", "127.0.0.1"} {
		if err := cert.VerifyHostname(host); err != nil {
			t.Errorf("self-signed certificate: %v", err)
		}
	}
	if err := cert.VerifyHostname("other.csi.svc"); err == nil {
		t.Error("self-signed certificate valid for other.csi.svc; want not")
	}
	raw, err := os.ReadFile(caFile)
	if err != nil || !strings.Contains(string(raw), "BEGIN CERTIFICATE") {
		t.Fatalf("self-signed CA file: %v", err)
	}
	srv, err := serving.NewHTTPServer(http.NotFoundHandler(), serving.ServerOptions{Certificates: certs})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, t.Context(), srv)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(raw)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "snapshot-metadata.csi.svc"})
	if err != nil {
		t.Fatalf("handshake for the Service name with the written certificate as root: %v", err)
	}
	c.Close()
}

func TestTLSFlagsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    serving.TLSFlags
		want string
	}{
		{"cert without key", serving.TLSFlags{CertFile: "c"}, "--tls-cert-file and --tls-private-key-file go together"},
		{"unknown version", serving.TLSFlags{MinVersion: "VersionTLS14"}, "--tls-min-version"},
		{"unknown suite", serving.TLSFlags{CipherSuites: []string{"TLS_NOPE"}}, "--tls-cipher-suites"},
		{"bad san", serving.TLSFlags{SANs: []string{"a b"}}, "--tls-san"},
		{"ok", serving.TLSFlags{MinVersion: "VersionTLS13", CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}, SANs: []string{"a.example"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.f.Validate()
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v; want %q", err, tt.want)
			}
		})
	}
}

// TestMinVersion: --tls-min-version is enforced in the handshake.
func TestMinVersion(t *testing.T) {
	t.Parallel()
	f := serving.TLSFlags{MinVersion: "VersionTLS13"}
	certs, err := f.Certificates("test", "")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := serving.NewHTTPServer(http.NotFoundHandler(), serving.ServerOptions{Certificates: certs})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, t.Context(), srv)
	if c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}); err == nil {
		c.Close()
		t.Error("TLS 1.2 handshake with --tls-min-version=VersionTLS13 succeeded; want refused")
	}
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	if v := c.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Errorf("version = %x; want TLS 1.3", v)
	}
	c.Close()
}

type allowAll struct{}

func (allowAll) Authorize(_ context.Context, _ authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionAllow, "", nil
}
