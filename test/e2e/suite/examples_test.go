package suite_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// The example programs under test, built once per run from the examples
// module (see buildExamples).
const (
	snapshotMetadataBin = "snapshotmetadata"
	metricsProxyBin     = "metricsproxy"
	draPluginBin        = "draplugin"
)

// Bounds of the example processes' life cycle.
const (
	exampleBuildTimeout = 10 * time.Minute
	exampleStartTimeout = 30 * time.Second
	exampleStopTimeout  = 15 * time.Second
)

// exampleBuildEnv is the environment the suite builds the examples
// module's programs in, with -trimpath: as hack/image builds them for
// their images (static, no build machine's paths), so that the suite runs
// what the images ship, and shares one compile with hack/image and with
// hack/test.sh's vet of the module.
var exampleBuildEnv = []string{"GOWORK=off", "CGO_ENABLED=0"}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// examplesDir returns the examples module's directory, found from this
// file's location (test/e2e/suite -> examples).
func examplesDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "examples")
}

// buildExamples builds the example programs once, into a temporary
// directory that [cleanupExamples] removes, and returns the directory. A
// build failure fails every test that needs them.
func buildExamples(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		start := time.Now()
		binDir, buildErr = os.MkdirTemp("", "reviewauth-e2e-examples-")
		if buildErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), exampleBuildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "-C", examplesDir(), "build", "-trimpath", "-o", binDir+string(filepath.Separator),
			"./"+snapshotMetadataBin, "./"+metricsProxyBin, "./"+draPluginBin)
		cmd.Env = append(os.Environ(), exampleBuildEnv...)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build of the examples in %s: %v\n%s", examplesDir(), err, out)
			return
		}
		fmt.Fprintf(os.Stderr, "e2e: examples built in %v\n", time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// cleanupExamples removes the built example programs.
func cleanupExamples() {
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

var (
	helpMu sync.Mutex
	helps  = map[string]string{}
)

// exampleHasFlag reports whether the example program name lists flag
// (such as "--authentication-token-webhook-cache-ttl") in its --help
// output, so that the suite can use flags the examples gain without
// failing on builds that lack them.
func exampleHasFlag(t testing.TB, name, flag string) bool {
	t.Helper()
	helpMu.Lock()
	defer helpMu.Unlock()
	help, ok := helps[name]
	if !ok {
		ctx, cancel := context.WithTimeout(t.Context(), exampleStartTimeout)
		defer cancel()
		// --help exits non-zero; only the output matters.
		out, _ := exec.CommandContext(ctx, filepath.Join(buildExamples(t), name), "--help").CombinedOutput()
		help = string(out)
		helps[name] = help
	}
	// flag prints "-name type", pflag "--name type".
	re := regexp.MustCompile(`(^|\s)--?` + regexp.QuoteMeta(strings.TrimLeft(flag, "-")) + `[\s=]`)
	return re.MatchString(help)
}

// syncBuffer is a bytes.Buffer safe for concurrent use, collecting a
// process's output.
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

// listenWatcher collects standard output and reports the address of the
// first "listening on ADDRESS" line.
type listenWatcher struct {
	syncBuffer
	once  sync.Once
	ready chan string
}

func (w *listenWatcher) Write(p []byte) (int, error) {
	n, err := w.syncBuffer.Write(p)
	out := w.String()
	if i := strings.Index(out, "listening on "); i >= 0 {
		if line, _, ok := strings.Cut(out[i+len("listening on "):], "\n"); ok {
			w.once.Do(func() { w.ready <- strings.TrimSpace(line) })
		}
	}
	return n, err
}

// example is a running example program.
type example struct {
	name string
	// addr is what the program printed after "listening on ".
	addr   string
	cmd    *exec.Cmd
	stdout *listenWatcher
	stderr *syncBuffer
}

// startExample runs the example program name with args until the test
// ends (SIGTERM, then SIGKILL after exampleStopTimeout), and returns once it
// prints its listening line. On a failed test it logs the program's output.
func startExample(t testing.TB, name string, args ...string) *example {
	t.Helper()
	bin := filepath.Join(buildExamples(t), name)
	e := &example{name: name, stdout: &listenWatcher{ready: make(chan string, 1)}, stderr: &syncBuffer{}}
	e.cmd = exec.Command(bin, args...)
	if env := exampleEnvFor(t.Name()); len(env) > 0 {
		e.cmd.Env = append(os.Environ(), env...)
	}
	e.cmd.Stdout, e.cmd.Stderr = e.stdout, e.stderr
	if err := e.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- e.cmd.Wait() }()
	t.Cleanup(func() {
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil && !t.Failed() {
				t.Errorf("%s exited with %v after SIGTERM; want success\n%s", name, err, e.stderr.String())
			}
		case <-time.After(exampleStopTimeout):
			_ = e.cmd.Process.Kill()
			<-exited
			t.Errorf("%s did not stop within %v of SIGTERM; killed", name, exampleStopTimeout)
		}
		if t.Failed() {
			t.Logf("%s stderr (tail):\n%s", name, tail(e.stderr.String(), 40))
		}
	})
	select {
	case e.addr = <-e.stdout.ready:
	case err := <-exited:
		exited <- err
		t.Fatalf("%s %q exited before listening: %v\n%s", name, args, err, e.stderr.String())
	case <-time.After(exampleStartTimeout):
		t.Fatalf("%s did not print its listening line within %v\n%s", name, exampleStartTimeout, e.stderr.String())
	}
	return e
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// reviewerKubeconfig makes the identity an example runs as in a real
// cluster: a ServiceAccount bound to the built-in ClusterRole
// system:auth-delegator (create tokenreviews and subjectaccessreviews) and
// to clusterRoles, and nothing else, and writes a kubeconfig with a
// TokenRequest token for it.
func reviewerKubeconfig(t testing.TB, c *cluster.Cluster, name string, clusterRoles ...string) string {
	t.Helper()
	ns := c.UniqueNamespace(t, name)
	c.CreateServiceAccount(t, ns, name)
	for _, role := range append([]string{"system:auth-delegator"}, clusterRoles...) {
		c.BindClusterRole(t, "", role, cluster.ServiceAccountSubject(ns, name))
	}
	user := "system:serviceaccount:" + ns + ":" + name
	for _, res := range []authorizationv1.ResourceAttributes{
		{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"},
		{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"},
	} {
		c.WaitForAccess(t, authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &res}, true)
	}
	// Two hours: longer than any run, so it survives API server restarts.
	tok := c.RequestToken(t, ns, name, cluster.TokenOptions{ExpirationSeconds: 7200})

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: c.URL(), CertificateAuthorityData: c.ServingCA().CertPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tok}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: name}
	cfg.CurrentContext = "e2e"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeFile writes b to a new file in a test temporary directory and
// returns its path.
func writeFile(t testing.TB, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// servingCert mints a serving certificate for 127.0.0.1 and localhost
// from a fresh CA, writes it and its key to files, and returns their paths
// and a pool trusting the CA.
func servingCert(t testing.TB) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	ca, err := cluster.NewCA(cluster.UniqueName("e2e-serving-ca"))
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue(cluster.CertOptions{
		CommonName: "e2e-example", DNSNames: []string{"localhost"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "serving.crt", cert), writeFile(t, "serving.key", key), ca.Pool()
}

// tlsConfig returns a client TLS configuration trusting roots and
// presenting certs.
func tlsConfig(roots *x509.CertPool, certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12}
}

// shortTempDir returns a temporary directory with a short path, for Unix
// sockets (whose paths are limited to about 100 bytes), removed when the
// test ends.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// ctxFor bounds one call made by a test.
func ctxFor(t testing.TB, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}

var (
	exampleEnvMu sync.Mutex
	exampleEnv   = map[string][]string{} // by test name
)

// setExampleEnv adds env (NAME=VALUE) to the environment of the example
// programs the test and its subtests start, and to theirs only.
func setExampleEnv(t testing.TB, env ...string) {
	exampleEnvMu.Lock()
	defer exampleEnvMu.Unlock()
	exampleEnv[t.Name()] = append(exampleEnv[t.Name()], env...)
	t.Cleanup(func() {
		exampleEnvMu.Lock()
		defer exampleEnvMu.Unlock()
		delete(exampleEnv, t.Name())
	})
}

// exampleEnvFor is what setExampleEnv set for the test named name and
// the tests it is a subtest of.
func exampleEnvFor(name string) []string {
	exampleEnvMu.Lock()
	defer exampleEnvMu.Unlock()
	var env []string
	for test, e := range exampleEnv {
		if name == test || strings.HasPrefix(name, test+"/") {
			env = append(env, e...)
		}
	}
	return env
}
