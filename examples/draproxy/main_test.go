package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// lines collects what run writes to standard output and reports the
// "listening on" line.
type lines struct {
	mu    sync.Mutex
	buf   strings.Builder
	ready chan string
	once  sync.Once
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	out := l.buf.String()
	if i := strings.Index(out, "listening on "); i >= 0 {
		if line, _, ok := strings.Cut(out[i+len("listening on "):], "\n"); ok {
			l.once.Do(func() { l.ready <- line })
		}
	}
	return len(p), nil
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// shortDir is a temporary directory with a short path, for Unix sockets.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "drp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// startRun runs draproxy with args plus the fake API server's kubeconfig,
// the test audience, node-a and the test drivers, once the fake holds the
// admission policy for them, and returns its output once it listens and a
// stop function that cancels it and returns run's result.
func startRun(t *testing.T, f *fakeAPI, args ...string) (*lines, func() error) {
	t.Helper()
	f.installAdmission(t, testIdentities)
	return startRunAs(t, f, args...)
}

// runArgs are the arguments startRun adds to its own.
func runArgs(t testing.TB, f *fakeAPI) []string {
	args := []string{"--kubeconfig=" + f.writeKubeconfig(t), "--audience=" + testAudience, "--node-name=node-a"}
	for _, d := range testDriverFlags {
		args = append(args, "--driver="+d)
	}
	return args
}

// startRunAs is startRun without installing the admission policy.
func startRunAs(t *testing.T, f *fakeAPI, args ...string) (*lines, func() error) {
	t.Helper()
	out := &lines{ready: make(chan string, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	base := runArgs(t, f)
	go func() {
		done <- run(ctx, append(base, args...), out)
	}()
	select {
	case <-out.ready:
	case err := <-done:
		cancel()
		t.Fatalf("run() = %v before listening", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("run() did not listen within 30s")
	}
	var once sync.Once
	var result error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("run() did not return within 20s of cancel")
			}
		})
		return result
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("run() = %v after cancel; want nil", err)
		}
	})
	return out, stop
}

// unixConfig is what a driver puts in its rest.Config to reach draproxy's
// socket.
func unixConfig(sock, token string) *rest.Config {
	cfg := &rest.Config{
		Host:        "http://localhost",
		BearerToken: token,
		QPS:         -1,
		Timeout:     10 * time.Second,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}
	cfg.ContentType = "application/json"
	return cfg
}

func TestRun(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	f.addSlice("a-1", "node-a")
	f.addSlice("b-1", "node-b")
	dir := shortDir(t)
	sock := filepath.Join(dir, "draproxy.sock")
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	out, stop := startRun(t, f, "--socket="+sock, "--tls-listen=127.0.0.1:0", "--self-signed-ca-file="+caFile)
	token := f.token(driverOn("node-a"))

	t.Run("socket mode", func(t *testing.T) {
		fi, err := os.Lstat(sock)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 {
			t.Errorf("socket %s mode = %v; want a socket with 0660", sock, fi.Mode())
		}
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 1 {
			t.Errorf("socket directory holds %v (%v); want the socket only", entries, err)
		}
	})
	t.Run("client-go over the socket", func(t *testing.T) {
		cs, err := kubernetes.NewForConfig(unixConfig(sock, token))
		if err != nil {
			t.Fatal(err)
		}
		l, err := cs.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})
		if err != nil || len(l.Items) != 1 || l.Items[0].Name != "a-1" {
			t.Errorf("List(node-a) over the socket = %v, %v; want a-1", l, err)
		}
		_, err = cs.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{})
		wantStatus(t, "List() over the socket", err, http.StatusForbidden, "spec.nodeName=node-a")
	})
	t.Run("h2c over the socket", func(t *testing.T) {
		tr := &http.Transport{
			Protocols: new(http.Protocols),
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", sock)
			},
		}
		tr.Protocols.SetUnencryptedHTTP2(true)
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://localhost/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-a", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Errorf("GET over h2c = %d %s; want 200 over HTTP/2", resp.StatusCode, resp.Proto)
		}
	})
	t.Run("TLS with HTTP/2", func(t *testing.T) {
		_, addr, ok := strings.Cut(out.String(), "serving https://")
		addr, _, _ = strings.Cut(addr, "\n")
		if !ok || addr == "" {
			t.Fatalf("output %q has no serving line", out.String())
		}
		ca, err := os.ReadFile(caFile)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(ca)
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+addr+"/apis/resource.k8s.io/v1/resourceslices", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var st metav1.Status
		if resp.StatusCode != http.StatusForbidden || resp.ProtoMajor != 2 || json.Unmarshal(b, &st) != nil || !strings.Contains(st.Message, "spec.nodeName=node-a") {
			t.Errorf("GET over TLS = %d %s %s; want a 403 Status naming the selector, over HTTP/2", resp.StatusCode, resp.Proto, b)
		}
	})

	// A watch in progress ends when draproxy stops, and the socket goes.
	cs, err := kubernetes.NewForConfig(unixConfig(sock, token))
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.ResourceV1().ResourceSlices().Watch(t.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := stop(); err != nil {
		t.Fatalf("run() = %v after cancel; want nil", err)
	}
	select {
	case _, ok := <-w.ResultChan():
		for ok {
			_, ok = <-w.ResultChan()
		}
	case <-time.After(10 * time.Second):
		t.Error("the watch did not end within 10s of draproxy stopping")
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket after stop: %v; want it removed", err)
	}
}

func TestRunReplacesStaleSocket(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	sock := filepath.Join(shortDir(t), "draproxy.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // a stale socket file stays
	startRun(t, f, "--socket="+sock)

	file := filepath.Join(shortDir(t), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err = run(t.Context(), []string{"--kubeconfig=" + f.writeKubeconfig(t), "--audience=a", "--node-name=n", "--driver=" + testDriverFlags[0], "--socket=" + file}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("run(--socket=regular file) = %v; want an error saying it is not a socket", err)
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	base := []string{"--audience=a", "--node-name=n", "--driver=d.example.com=ns/sa"}
	tests := []struct {
		args []string
		want string
	}{
		{args: []string{"--audience=a", "--driver=d.example.com=ns/sa"}, want: "--node-name is required"},
		{args: []string{"--node-name=n", "--driver=d.example.com=ns/sa"}, want: "--audience is required"},
		{args: []string{"--audience=a", "--node-name=n"}, want: "--driver is required"},
		{args: append(base, "--driver=d.example.com"), want: "want NAME=NAMESPACE/SERVICEACCOUNT"},
		{args: append(base, "--driver=d.example.com=ns"), want: "want NAME=NAMESPACE/SERVICEACCOUNT"},
		{args: append(base, "--driver=D_X=ns/sa"), want: "driver name"},
		{args: append(base, "--driver=d.example.com=n.s/sa"), want: "namespace"},
		{args: append(base, "--request-timeout=0"), want: "--request-timeout must be positive"},
		{args: append(base, "--admission-policy-check-interval=0"), want: "must be positive"},
		{args: append(base, "--socket="), want: "--socket or --tls-listen is required"},
		{args: append(base, "--tls-listen=0.0.0.0:8443"), want: "must be a loopback address"},
		{args: append(base, "--tls-listen=10.0.0.1:8443"), want: "must be a loopback address"},
		{args: append(base, "--tls-listen=node.example.com:8443"), want: "must be a loopback address"},
		{args: append(base, "--tls-listen=127.0.0.1"), want: "--tls-listen"},
		{args: append(base, "--tls-cert-file=c"), want: "go together"},
		{args: append(base, "--authorization-always-allow-groups=system:masters"), want: "not supported"},
		{args: append(base, "--authorization-always-allow-paths=/healthz"), want: "unknown flag"},
		{args: append(base, "--pod-cache-ttl=-1s"), want: "must not be negative"},
		{args: append(base, "--max-request-body-bytes=0"), want: "must be positive"},
		{args: append(base, "--allow=list:resourceclaims.resource.k8s.io"), want: "checked by content"},
		{args: append(base, "extra"), want: "unexpected arguments"},
	}
	for _, tt := range tests {
		if _, err := parseFlags(tt.args, io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseFlags(%q) = %v; want an error containing %q", tt.args, err, tt.want)
		}
	}
	c, err := parseFlags(append(base, "--tls-listen=[::1]:0", "--allow=get:configmaps", "--allow=get,list:deviceclasses.resource.k8s.io"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.socket != "/var/run/draproxy/draproxy.sock" || len(c.rules) != 2 || c.podTTL != DefaultPodTTL || c.maxBody != DefaultMaxBodyBytes ||
		!c.requireAdmission || c.admissionPolicy != DefaultAdmissionPolicy || c.admissionBinding != DefaultAdmissionPolicy ||
		c.admissionInterval != DefaultAdmissionCheckInterval || c.requestTimeout != DefaultRequestTimeout || len(c.drivers.ids) != 1 {
		t.Errorf("parseFlags defaults = %+v", c)
	}
	if _, err := parseFlags(append(base, "--tls-listen=localhost:0"), io.Discard); err != nil {
		t.Errorf("parseFlags(--tls-listen=localhost:0) = %v", err)
	}
}
