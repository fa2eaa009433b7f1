package main

import (
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"context"
	smsv1alpha1 "github.com/kubernetes-csi/external-snapshot-metadata/client/apis/snapshotmetadataservice/v1alpha1"
	smsfake "github.com/kubernetes-csi/external-snapshot-metadata/client/clientset/versioned/fake"
	snapshotfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"net"

	"github.com/reviewauth/reviewauth/authtest"
)

// TestServingFlags (issue #12): --tls-san puts the Service DNS name in the
// self-signed certificate (so that a SnapshotMetadataService's address can
// be verified), and the sidecar logs that it is not for production (issue
// #29); --metrics-listen serves the health endpoints, ready while
// serving, and --version prints the version.
func TestServingFlags(t *testing.T) {
	s := authtest.Start(t)
	dir := t.TempDir()
	kubeconfig, caFile := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "ca.pem")
	if err := s.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	services := smsfake.NewSimpleClientset(&smsv1alpha1.SnapshotMetadataService{
		ObjectMeta: metav1.ObjectMeta{Name: testDriver},
		Spec:       smsv1alpha1.SnapshotMetadataServiceSpec{Audience: testAudience, Address: "snapshot-metadata.csi-driver.svc:6443"},
	})
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ml.Addr().String()
	ml.Close()
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(logs)))))
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen=127.0.0.1:0", "--kubeconfig=" + kubeconfig, "--driver=" + testDriver,
			"--self-signed-ca-file=" + caFile, "--tls-san=snapshot-metadata.csi-driver.svc", "--metrics-listen=" + metricsAddr},
			deps{backend: FakeBackend{}, snapshots: snapshotfake.NewSimpleClientset(), services: services}, func(a net.Addr) { ready <- a })
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("run() = %v", err)
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run() = %v after cancel", err)
		}
	}()
	raw, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(raw)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.VerifyHostname("snapshot-metadata.csi-driver.svc"); err != nil {
		t.Errorf("self-signed certificate: %v", err)
	}
	if !strings.Contains(logs.String(), `"Serving with a self-signed certificate; set --tls-cert-file and --tls-private-key-file in production"`) {
		t.Errorf("serving a self-signed certificate, the sidecar does not log that it is not for production; log:\n%s", logs.String())
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		var resp *http.Response
		waitFor(t, "metrics server", func() bool {
			resp, err = http.Get("http://" + metricsAddr + p)
			return err == nil
		})
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s = %d; want 200", p, resp.StatusCode)
		}
	}
}

func TestVersion(t *testing.T) {
	r, w, _ := os.Pipe()
	stdout := os.Stdout
	os.Stdout = w
	err := run(context.Background(), []string{"--version"}, deps{}, nil)
	os.Stdout = stdout
	w.Close()
	out := make([]byte, 200)
	n, _ := r.Read(out)
	if err != nil || !strings.HasPrefix(string(out[:n]), "snapshotmetadata ") {
		t.Errorf("run(--version) = %v, printed %q", err, out[:n])
	}
}

// waitFor polls cond for up to 10s: a bounded wait on an outcome.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
