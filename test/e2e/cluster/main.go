package cluster

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// DisableEnv is the environment variable that skips the suite when set to
// "0". Any other value, or none, runs it; then a binary that cannot be built
// or a cluster that cannot start fails the run.
const DisableEnv = "REVIEWAUTH_E2E"

// KeepEnv is the environment variable that, set to "1", makes [Main] keep
// the cluster's temporary directory (logs, etcd data, keys) for debugging.
const KeepEnv = "REVIEWAUTH_E2E_KEEP"

var (
	sharedMu   sync.Mutex
	shared     *Cluster
	skipReason string
)

// Main runs a suite package's tests against one shared cluster; call it
// from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(cluster.Main(m, cluster.Options{})) }
//
// It builds or finds the binaries ([Binaries], bounded by 20 minutes),
// starts the cluster ([Start]), runs the tests, prints the API server's log
// tail to stderr if they failed, tears the cluster down and checks for
// leaked goroutines. When REVIEWAUTH_E2E=0 the tests still run but
// [Get] skips each of them with a message saying so. Any failure to build
// or start returns 1: a broken environment fails, it never skips.
func Main(m *testing.M, opts Options) int {
	if os.Getenv(DisableEnv) == "0" {
		skipReason = "e2e suite disabled by " + DisableEnv + "=0"
		fmt.Fprintln(os.Stderr, "e2e: SKIP:", skipReason)
		return m.Run()
	}
	if os.Getenv(KeepEnv) == "1" {
		opts.KeepDir = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if opts.KubeAPIServer == "" || opts.Etcd == "" {
		start := time.Now()
		kube, etcd, err := Binaries(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: FAIL: cannot build or find kube-apiserver %s and etcd %s (set %s=0 to skip the suite): %v\n", KubeVersion, EtcdVersion, DisableEnv, err)
			return 1
		}
		if opts.KubeAPIServer == "" {
			opts.KubeAPIServer = kube
		}
		if opts.Etcd == "" {
			opts.Etcd = etcd
		}
		fmt.Fprintf(os.Stderr, "e2e: binaries ready in %v\n", time.Since(start).Round(time.Millisecond))
	}
	start := time.Now()
	c, err := Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: FAIL: cannot start the cluster (kube-apiserver %s, etcd %s): %v\n", KubeVersion, EtcdVersion, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: cluster up at %s in %v (dir %s; %s=1 keeps it)\n", c.URL(), time.Since(start).Round(time.Millisecond), c.Dir(), KeepEnv)
	sharedMu.Lock()
	shared = c
	sharedMu.Unlock()

	code := m.Run()

	if code != 0 {
		fmt.Fprintf(os.Stderr, "e2e: tests failed; kube-apiserver log tail:\n%s\n--- end of log tail ---\n", c.LogTail(60))
	}
	sharedMu.Lock()
	shared = nil
	sharedMu.Unlock()
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(leakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: FAIL: leaked goroutines:", err)
			code = 1
		}
	}
	return code
}

// leakOptions ignores goroutines that client-go and klog start once per
// process and never stop.
func leakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Type).updateUnfinishedWorkLoop"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*delayingType).waitingLoop"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/transport.(*dynamicClientCert).run"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/transport.(*tlsTransportCache).get.func1"),
	}
}

// Get returns the cluster started by [Main] for the calling test, or skips
// the test when the suite is disabled by REVIEWAUTH_E2E=0. It fails the
// test if Main is not in use.
func Get(t testing.TB) *Cluster {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	sharedMu.Lock()
	c := shared
	sharedMu.Unlock()
	if c == nil {
		t.Fatal("cluster: no shared cluster: the package's TestMain must call cluster.Main")
	}
	return c
}
