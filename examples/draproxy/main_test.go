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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
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
// admission policies for them (which draproxy checks with
// --require-admission-policy), and returns its output once it listens and
// a stop function that cancels it and returns run's result.
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

// TestRunSocket: the socket belongs to draproxy. A stale socket (one no
// one serves) is replaced; a socket someone serves, a regular file, a
// directory or a symbolic link at the path is refused with an error
// naming it, and left as it is; a socket directory draproxy does not own,
// or that its group or others may write in, is refused.
// --chown-socket-dir makes a directory draproxy's alone, mode 0755.
func TestRunSocket(t *testing.T) {
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

	runOn := func(path string) error {
		return run(t.Context(), append(runArgs(t, f), "--socket="+path), io.Discard)
	}
	dir := shortDir(t)
	live := filepath.Join(dir, "live.sock")
	other, err := net.Listen("unix", live) // another process's server
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(live, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path, want string
	}{
		{live, "served by another process"},
		{file, "is a regular file, not a socket"},
		{sub, "is a directory, not a socket"},
		{link, "is a symbolic link, not a socket"},
	} {
		if err := runOn(tt.path); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(--socket=%s) = %v; want an error containing %q", filepath.Base(tt.path), err, tt.want)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "x" {
		t.Errorf("the file at --socket after the refusal: %q, %v; want it untouched", b, err)
	}
	if c, err := net.Dial("unix", live); err != nil {
		t.Errorf("the live socket after the refusal: %v; want it still served", err)
	} else {
		c.Close()
	}

	// The directory.
	open := shortDir(t)
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := runOn(filepath.Join(open, "d.sock")); err == nil || !strings.Contains(err.Error(), "writable by its group or others") {
		t.Errorf("run(--socket in a 0777 directory) = %v; want a refusal", err)
	}
	groupWritable := shortDir(t)
	if err := os.Chmod(groupWritable, 0o770); err != nil {
		t.Fatal(err)
	}
	if err := runOn(filepath.Join(groupWritable, "d.sock")); err == nil || !strings.Contains(err.Error(), "writable by its group or others") {
		t.Errorf("run(--socket in a 0770 directory) = %v; want a refusal", err)
	}
	notOurs := "/" // root's, unless the test runs as root
	if os.Geteuid() == 0 {
		notOurs = shortDir(t)
		if err := os.Chown(notOurs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	if err := runOn(filepath.Join(notOurs, "d.sock")); err == nil || !strings.Contains(err.Error(), "not by draproxy's") {
		t.Errorf("run(--socket in %s, another user's) = %v; want a refusal", notOurs, err)
	}
	if _, err := os.Lstat(filepath.Join(notOurs, "d.sock")); !os.IsNotExist(err) {
		t.Errorf("a socket was made in another user's directory: %v", err)
	}

	// --chown-socket-dir: as root, to another user; otherwise to itself.
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 {
		uid, gid = 65532, 65532
	}
	prep := shortDir(t)
	if err := os.Chmod(prep, 0o777); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	owner := strconv.Itoa(uid) + ":" + strconv.Itoa(gid)
	if err := run(t.Context(), []string{"--chown-socket-dir=" + owner, "--socket=" + filepath.Join(prep, "draproxy.sock")}, &out); err != nil {
		t.Fatalf("run(--chown-socket-dir) = %v", err)
	}
	fi, err := os.Stat(prep)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o755 || int(st.Uid) != uid || int(st.Gid) != gid || !strings.Contains(out.String(), "owned by "+owner) {
		t.Errorf("after --chown-socket-dir=%s: %v owned by %d:%d, output %q; want 0755 owned by %s", owner, fi.Mode(), st.Uid, st.Gid, out.String(), owner)
	}
}

// TestRunIdentity: draproxy starts only with credentials that can act as
// its node: a ServiceAccount token bound to a pod on --node-name, whose
// RBAC lets it act as the node for everything it forwards and reads; else
// it says why.
func TestRunIdentity(t *testing.T) {
	t.Parallel()
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}
	for _, tt := range []struct {
		name   string
		self   *user.DefaultInfo
		denied string
		want   string
	}{
		{name: "bound to no pod", self: proxyOn(""), want: "carries no authentication.kubernetes.io/node-name extra"},
		{name: "another node", self: proxyOn("node-b"), want: `bound to node "node-b", and --node-name is "node-a"`},
		{name: "not a ServiceAccount", self: admin, want: `authenticates as "admin", not as a ServiceAccount`},
		{name: "no impersonate:associated-node", self: proxyOn("node-a"), denied: "impersonate:associated-node", want: "may not impersonate:associated-node on nodes.authentication.k8s.io"},
		{name: "no patch as the node", self: proxyOn("node-a"), denied: "impersonate-on:associated-node:patch", want: "may not impersonate-on:associated-node:patch on resourceslices.resource.k8s.io"},
		{name: "no pod reads as the node", self: proxyOn("node-a"), denied: "impersonate-on:associated-node:get", want: "impersonate-on:associated-node:get on pods"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := startFakeAPI(t)
			f.self.Store(tt.self)
			if tt.denied != "" {
				f.denied.Store(tt.denied, true)
			}
			sock := filepath.Join(shortDir(t), "draproxy.sock")
			err := run(t.Context(), append(runArgs(t, f), "--socket="+sock), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `cannot act as node "node-a"`) {
				t.Errorf("run() = %v; want an error containing %q", err, tt.want)
			}
			if _, err := os.Lstat(sock); !os.IsNotExist(err) {
				t.Errorf("the socket after a refused start: %v; want none", err)
			}
		})
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
		{args: append(base, "--chown-socket-dir=65532"), want: "want UID:GID"},
		{args: append(base, "--chown-socket-dir=a:b"), want: "want UID:GID"},
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
	if c.socket != "/var/run/draproxy/draproxy.sock" || len(c.rules) != 2 || c.maxBody != DefaultMaxBodyBytes ||
		c.requireAdmission || c.admissionInterval != DefaultAdmissionCheckInterval || c.requestTimeout != DefaultRequestTimeout || len(c.drivers.ids) != 1 {
		t.Errorf("parseFlags defaults = %+v", c)
	}
	if _, err := parseFlags(append(base, "--tls-listen=localhost:0"), io.Discard); err != nil {
		t.Errorf("parseFlags(--tls-listen=localhost:0) = %v", err)
	}
	// The revoker watches the RBAC the drivers' reviews rest on: draproxy
	// forwards as its node, so nothing else ends a removed permission
	// before the Allow TTL.
	if r := c.review.Revocation; !slices.Equal(r.Watch, []string{"pods", "node", "clusterroles", "roles"}) || !r.AsNode || len(r.Namespaces) > 0 {
		t.Errorf("revocation defaults = %+v; want pods, node, clusterroles, roles, as the node, every namespace", r)
	}
}
