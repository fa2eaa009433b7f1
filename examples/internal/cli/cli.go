// Package cli holds what the example programs share beyond the library's
// serving package: Kubernetes-style logging flags (k8s.io/component-base:
// -v, --vmodule, --logging-format=text|json), --version, and the
// --metrics-listen port that serves /metrics and the health endpoints.
package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/version"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/serving"
)

// Main runs an example program's run function with a context that is
// cancelled on SIGINT or SIGTERM, and exits as a Kubernetes component does:
// an error is logged through klog (in the format the logging flags chose,
// once run applied them) and exits 1; pflag.ErrHelp, after the usage was
// printed (--help, -h), exits 0, as kube-rbac-proxy, every cobra-based
// Kubernetes component and Go's flag package do; success flushes the log
// and returns.
func Main(name string, run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err != nil {
		klog.ErrorS(err, name+" failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func init() {
	// Tests run an example's run() more than once per process, always with
	// the same logging configuration; a program runs it once.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
}

// Flags are the flags every example takes besides its own.
type Flags struct {
	// Review are reviewauth's flags (authn, authz, --kubeconfig,
	// --audience, --authentication-jwks-preverify; httpauth's with
	// AddHTTPFlags).
	Review serving.Flags
	// TLS are the serving certificate flags.
	TLS serving.TLSFlags
	// Logs are component-base's logging flags.
	Logs *logsapi.LoggingConfiguration
	// Version is --version; VersionRaw is --version=raw, which prints
	// every field of [BuildInfo] as Kubernetes components print theirs.
	Version, VersionRaw bool
	// MetricsListen is where /metrics, /healthz, /livez and /readyz are
	// served, over plain HTTP; empty means nowhere.
	MetricsListen string
	// MaxConnections is --max-connections, for serving.ServerOptions and
	// serving.GRPCOptions.
	MaxConnections int
}

// New returns Flags with component-base's logging defaults.
func New() *Flags { return &Flags{Logs: logsapi.NewLoggingConfiguration()} }

// AddFlags registers the logging flags, --version, --metrics-listen,
// --max-connections and the review flags on fs; the TLS flags when tls is
// true.
func (f *Flags) AddFlags(fs *pflag.FlagSet, tls bool) {
	f.AddBaseFlags(fs)
	f.Review.AddFlags(fs)
	if tls {
		f.TLS.AddFlags(fs)
	}
}

// AddRevocationFlags registers --revocation-watch, --revocation-namespaces
// and --revocation-as-node (serving.Flags.AddRevocationFlags) with
// defaults as their default values.
func (f *Flags) AddRevocationFlags(fs *pflag.FlagSet, defaults serving.RevocationFlags) {
	f.Review.Revocation = defaults
	f.Review.AddRevocationFlags(fs)
}

// NodeAgentRevocation is the default revocation of the node-local
// examples: this node's pods and its Node, read as the node, so that a
// deleted pod's token stops working within seconds, and the RBAC kinds
// (clusterroles, roles) the service's SubjectAccessReviews rest on, so
// that a removed permission does too. Watching the pods and the Node costs
// the API server what the kubelet's own watch of its pods costs, and the
// Node authorizer confines the reads to this node's objects; RBAC is read
// with the service's own credentials (a node may not read it), cluster-wide.
func NodeAgentRevocation(rbac ...string) serving.RevocationFlags {
	return serving.RevocationFlags{Watch: append([]string{"pods", "node"}, rbac...), AsNode: true}
}

// AddBaseFlags registers the logging flags, --version, --metrics-listen and
// --max-connections only.
func (f *Flags) AddBaseFlags(fs *pflag.FlagSet) {
	logsapi.AddFlags(f.Logs, fs)
	fs.Var(versionValue{&f.Version, &f.VersionRaw}, "version", "Print the version and exit (--version, or --version=raw for every field, as kube-rbac-proxy and Kubernetes components take it).")
	fs.Lookup("version").NoOptDefVal = "true"
	fs.StringVar(&f.MetricsListen, "metrics-listen", f.MetricsListen,
		"Address to serve Prometheus metrics on, at /metrics, with /healthz, /livez and /readyz (for example 127.0.0.1:9090); plain HTTP. Not served when empty.")
	fs.IntVar(&f.MaxConnections, "max-connections", 0,
		"Most client connections kept open at once; past it, a new connection is admitted by closing one that made no progress (see serving.LimitListener). 0 means serving.DefaultBudget: a third of the open-file limit less 128 (as many connections again may wait to be admitted), or a quarter of the memory limit (GOMEMLIMIT, the cgroup's, else the machine's) at 128 KiB a connection, whichever is smaller; the log line at start says which.")
}

// versionValue is --version: a boolean that also takes "raw", as
// component-base's verflag does.
type versionValue struct{ p, raw *bool }

func (v versionValue) String() string {
	if v.p != nil && *v.p {
		return "true"
	}
	return "false"
}

func (v versionValue) Set(s string) error {
	switch s {
	case "true", "raw":
		*v.p = true
		*v.raw = s == "raw"
	case "false":
		*v.p, *v.raw = false, false
	default:
		return fmt.Errorf("want true, false or raw, got %q", s)
	}
	return nil
}

func (v versionValue) Type() string { return "version" }

// ApplyLogging applies the logging flags to klog (component-base's
// ValidateAndApply). Call it once the flags are parsed, before logging.
func (f *Flags) ApplyLogging() error {
	if err := logsapi.ValidateAndApply(f.Logs, nil); err != nil {
		return fmt.Errorf("logging flags: %w", err)
	}
	return nil
}

// Version returns "name VERSION (COMMIT, GOVERSION)" from [BuildInfo]:
// "rbacproxy v0.3.0 (0123abcd..., go1.26.8)", with "-dirty" after the
// commit of a build from a modified tree.
func Version(name string) string {
	info := BuildInfo()
	commit := info.GitCommit
	if commit == "" {
		commit = "unknown commit"
	}
	return fmt.Sprintf("%s %s (%s, %s)", name, info.GitVersion, commit, info.GoVersion)
}

// BuildInfo returns what the running program's build information (the
// module and version control data Go embeds) says about it, in the
// fields Kubernetes components report their version in.
func BuildInfo() version.Info {
	bi, _ := debug.ReadBuildInfo()
	return VersionInfo(bi)
}

// VersionInfo returns the version bi describes: GitVersion is the main
// module's version (the go command makes it from the repository's tags,
// or a pseudo-version, with "+dirty" for a modified tree; "(devel)" when
// it had no version control data); GitCommit the revision, with "-dirty"
// for a modified tree; GitTreeState "clean" or "dirty" (empty when
// unknown); BuildDate the commit's time (the build's inputs, so that
// builds are reproducible); GoVersion, Compiler and Platform the
// toolchain's and target's. A nil bi gives "(devel)" and the toolchain
// fields only.
func VersionInfo(bi *debug.BuildInfo) version.Info {
	info := version.Info{GitVersion: "(devel)", GoVersion: runtime.Version(), Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		return info
	}
	if bi.Main.Version != "" {
		info.GitVersion = bi.Main.Version
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	goos, goarch := "", ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.GitCommit = s.Value
		case "vcs.modified":
			info.GitTreeState = map[bool]string{true: "dirty", false: "clean"}[s.Value == "true"]
		case "vcs.time":
			info.BuildDate = s.Value
		case "-compiler":
			info.Compiler = s.Value
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	if info.GitCommit != "" && info.GitTreeState == "dirty" {
		info.GitCommit += "-dirty"
	}
	if goos != "" && goarch != "" {
		info.Platform = goos + "/" + goarch
	}
	return info
}

// ErrVersion is returned by Start after printing the version: the program
// exits successfully.
var ErrVersion = errors.New("version printed")

// Started is what Start returns.
type Started struct {
	Built  *serving.Built
	Health *serving.Health
	stop   func()
}

// Stop stops the metrics server and waits for it; safe to defer.
func (s *Started) Stop() { s.stop() }

// Start prints the version and returns ErrVersion if --version was given;
// otherwise it applies the logging flags, builds the review parts
// (serving.Flags.Build), runs the revoker when --revocation-watch names
// something, and serves /metrics and the health endpoints on
// --metrics-listen, printing "metrics on http://ADDR/metrics" to out.
// The revoker and the metrics server run until ctx is done or Stop is
// called.
func (f *Flags) Start(ctx context.Context, name string, out io.Writer) (*Started, error) {
	if f.VersionRaw {
		fmt.Fprintf(out, "%#v\n", BuildInfo())
		return nil, ErrVersion
	}
	if f.Version {
		fmt.Fprintln(out, Version(name))
		return nil, ErrVersion
	}
	if err := f.ApplyLogging(); err != nil {
		return nil, err
	}
	built, err := f.Review.Build(ctx)
	if err != nil {
		return nil, err
	}
	s := &Started{Built: built, Health: &serving.Health{}, stop: func() {}}
	if built.Revoker != nil {
		// The revoker (--revocation-watch) runs until ctx is done or Stop.
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = built.Revoker.Run(rctx)
		}()
		s.stop = func() { cancel(); <-done }
	}
	if f.MetricsListen == "" {
		return s, nil
	}
	ln, err := net.Listen("tcp", f.MetricsListen)
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	srv, err := serving.NewHTTPServer(built.Handler(s.Health), serving.ServerOptions{MaxConnections: 64})
	if err != nil {
		ln.Close()
		s.stop()
		return nil, err
	}
	fmt.Fprintf(out, "metrics on http://%s/metrics\n", ln.Addr())
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx, ln); err != nil {
			klog.FromContext(ctx).Error(err, "Metrics server failed")
		}
	}()
	stopRevoker := s.stop
	s.stop = func() { cancel(); <-done; stopRevoker() }
	return s, nil
}

// SANsFor returns the host of a listen address as a --tls-san, when it is
// a specific IP or name (not a wildcard), for self-signed certificates.
func SANsFor(addr string) []string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return nil
	}
	return []string{strings.Trim(host, "[]")}
}

// ProxyBuffers is the httputil.BufferPool of the examples' reverse
// proxies: it lends them the 32 KiB buffer they copy each response body
// through, which httputil.ReverseProxy would otherwise allocate for every
// response (BenchmarkProxy in examples/rbacproxy, BenchmarkDRAProxy in
// examples/draproxy). Safe for concurrent use.
var ProxyBuffers httputil.BufferPool = proxyBuffers{}

type proxyBuffers struct{}

var proxyBufferPool = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (proxyBuffers) Get() []byte { return proxyBufferPool.Get().(*[32 << 10]byte)[:] }

func (proxyBuffers) Put(b []byte) {
	if cap(b) == 32<<10 {
		proxyBufferPool.Put((*[32 << 10]byte)(b[:32<<10]))
	}
}

// UpstreamTransport returns the transport of a reverse proxy to one
// upstream: http.DefaultTransport's settings (proxy from the environment,
// dial and handshake timeouts), with tlsConfig, and as many idle
// connections kept to the upstream as a busy proxy uses (the default, 2,
// would open a new connection for most requests under concurrency).
func UpstreamTransport(tlsConfig *tls.Config) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = tlsConfig
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 128
	return t
}
