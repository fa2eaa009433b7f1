// Command controllerruntime is a controller-runtime v0.25.2 manager whose
// /metrics is protected the way kubebuilder scaffolds it, with one line
// changed: controller-runtime's filters.WithAuthenticationAndAuthorization
// replaced by reviewauth's serving.MetricsFilterProvider. The RBAC a
// scraper needs is the same (get on the nonResourceURL /metrics); what
// changes is the audience (required: the scraper presents a token for the
// metrics' audience, not its API server token), what an outage is answered
// with (503 with Retry-After, not 500), and what the API server pays
// (rejections cached, SubjectAccessReviews coalesced). reviewauth's own
// metrics are registered on controller-runtime's registry and served on
// /metrics with the controller's.
//
// The manager runs one trivial controller, which counts the ConfigMaps of
// --watch-namespace it reconciles (controllerruntime_example_reconciles_total),
// when that flag is set, and none otherwise.
//
//	controllerruntime --kubeconfig=... --metrics-bind-address=:8443 --metrics-audience=my-operator-metrics
//
// --metrics-auth=controller-runtime serves the same manager with
// controller-runtime's own filter, for comparison (the end-to-end suite runs
// both side by side). When the metrics server accepts connections the
// program prints "listening on https://ADDRESS" on standard output.
//
// It runs as a service account that may create TokenReviews and
// SubjectAccessReviews (the ClusterRole system:auth-delegator, or the rules
// kubebuilder's metrics_auth_role scaffolds) and, with --watch-namespace,
// get, list and watch ConfigMaps there.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/serving"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "controllerruntime:", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	metricsAddr      string
	secureMetrics    bool
	enableHTTP2      bool
	metricsCertPath  string
	metricsCertName  string
	metricsCertKey   string
	metricsAuth      string
	metricsAudience  string
	allowAPIAudience bool
	watchNamespace   string
}

func parseFlags(args []string, out io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("controllerruntime", flag.ContinueOnError)
	fs.SetOutput(out)
	// --kubeconfig, read by ctrl.GetConfig, as in kubebuilder's scaffold.
	crconfig.RegisterFlags(fs)
	// The metrics flags kubebuilder scaffolds.
	fs.StringVar(&c.metricsAddr, "metrics-bind-address", ":8443", "address of the metrics endpoint (a port of its own; 0 disables the metrics server)")
	fs.BoolVar(&c.secureMetrics, "metrics-secure", true, "serve metrics over HTTPS, authenticated and authorized (--metrics-auth)")
	fs.BoolVar(&c.enableHTTP2, "enable-http2", false, "serve metrics over HTTP/2 too (off, as kubebuilder scaffolds, for the HTTP/2 rapid-reset and stream-cancellation CVEs)")
	fs.StringVar(&c.metricsCertPath, "metrics-cert-path", "", "directory of the metrics server's certificate; a self-signed one when empty")
	fs.StringVar(&c.metricsCertName, "metrics-cert-name", "tls.crt", "file name of the metrics server's certificate")
	fs.StringVar(&c.metricsCertKey, "metrics-cert-key", "tls.key", "file name of the metrics server's key")
	// What this example adds.
	fs.StringVar(&c.metricsAuth, "metrics-auth", "reviewauth", "who protects /metrics with --metrics-secure: reviewauth (serving.MetricsFilterProvider) or controller-runtime (filters.WithAuthenticationAndAuthorization, for comparison)")
	fs.StringVar(&c.metricsAudience, "metrics-audience", "", "audience the scrapers' tokens must be issued for (required with --metrics-auth=reviewauth)")
	fs.BoolVar(&c.allowAPIAudience, "metrics-allow-api-server-audience", false,
		"DANGEROUS: accept the scrapers' API server tokens (no --metrics-audience), as controller-runtime's filter does; a token for the API server is a credential the operator could replay. Only for migrating scrapers that cannot yet present a token for --metrics-audience.")
	fs.StringVar(&c.watchNamespace, "watch-namespace", "", "namespace whose ConfigMaps the example controller reconciles; no controller when empty")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case c.metricsAuth != "reviewauth" && c.metricsAuth != "controller-runtime":
		return nil, fmt.Errorf("--metrics-auth=%q: want reviewauth or controller-runtime", c.metricsAuth)
	case c.metricsAuth == "reviewauth" && c.secureMetrics && c.metricsAudience == "" && !c.allowAPIAudience:
		return nil, errors.New("--metrics-audience is required: the audience of the tokens the scrapers present (or, dangerously, --metrics-allow-api-server-audience)")
	case c.metricsAudience != "" && c.allowAPIAudience:
		return nil, errors.New("--metrics-allow-api-server-audience is only for scrapers without an audience: unset it or --metrics-audience")
	case c.metricsAuth != "reviewauth" && (c.metricsAudience != "" || c.allowAPIAudience):
		return nil, errors.New("--metrics-audience and --metrics-allow-api-server-audience apply to --metrics-auth=reviewauth only")
	}
	return c, nil
}

// reconciles counts the example controller's reconciles, on
// controller-runtime's registry like any operator metric.
var reconciles = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "controllerruntime_example_reconciles_total",
	Help: "ConfigMaps reconciled by the example controller.",
})

func init() { metrics.Registry.MustRegister(reconciles) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	logger := zap.New(zap.WriteTo(stderr))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger) // client-go's and reviewauth's global lines
	// As kubebuilder's scaffold: --kubeconfig, KUBECONFIG, in-cluster or
	// ~/.kube/config, with client-side rate limiting off (QPS -1).
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("API server configuration: %w", err)
	}

	mgr, err := newManager(cfg, c)
	if err != nil {
		return err
	}
	if c.secureMetrics && c.metricsAddr != "0" {
		go announce(ctx, logger, c.metricsAddr, stdout)
	}
	return mgr.Start(ctx)
}

// newManager builds the manager c describes, with its metrics server and,
// with --watch-namespace, the example controller.
func newManager(cfg *rest.Config, c *config) (ctrl.Manager, error) {
	// As kubebuilder's cmd/main.go scaffolds it.
	var tlsOpts []func(*tls.Config)
	if !c.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(cfg *tls.Config) { cfg.NextProtos = []string{"http/1.1"} })
	}
	metricsServerOptions := metricsserver.Options{
		BindAddress:   c.metricsAddr,
		SecureServing: c.secureMetrics,
		TLSOpts:       tlsOpts,
	}
	if c.secureMetrics {
		switch c.metricsAuth {
		case "reviewauth":
			// The one line that replaces kubebuilder's
			// metricsServerOptions.FilterProvider = filters.WithAuthenticationAndAuthorization:
			metricsServerOptions.FilterProvider = serving.MetricsFilterProvider[metricsserver.Filter](metricsFilterOptions(c))
		case "controller-runtime":
			metricsServerOptions.FilterProvider = filters.WithAuthenticationAndAuthorization
		}
	}
	if c.metricsCertPath != "" {
		metricsServerOptions.CertDir = c.metricsCertPath
		metricsServerOptions.CertName = c.metricsCertName
		metricsServerOptions.KeyName = c.metricsCertKey
	}
	opts := ctrl.Options{
		Metrics:                metricsServerOptions,
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	}
	if c.watchNamespace != "" {
		opts.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{c.watchNamespace: {}}}
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if c.watchNamespace != "" {
		err := ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).Named("configmaps").
			Complete(reconcilerFunc(func(context.Context, ctrl.Request) (ctrl.Result, error) {
				reconciles.Inc()
				return ctrl.Result{}, nil
			}))
		if err != nil {
			return nil, fmt.Errorf("creating the controller: %w", err)
		}
	}
	return mgr, nil
}

// metricsFilterOptions are reviewauth's options for the metrics filter:
// the audience, and its metrics on controller-runtime's registry.
func metricsFilterOptions(c *config) serving.MetricsFilterOptions {
	return serving.MetricsFilterOptions{
		Authentication: authn.Options{Audiences: nonEmpty(c.metricsAudience), AllowAPIServerAudience: c.allowAPIAudience},
		Registerer:     metrics.Registry,
	}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// reconcilerFunc adapts a function to reconcile.Reconciler.
type reconcilerFunc func(context.Context, ctrl.Request) (ctrl.Result, error)

func (f reconcilerFunc) Reconcile(ctx context.Context, r ctrl.Request) (ctrl.Result, error) {
	return f(ctx, r)
}

// announce prints "listening on https://ADDRESS" once the metrics server
// completes a TLS handshake, for supervisors and the end-to-end suite, or
// gives up when ctx ends.
func announce(ctx context.Context, log logr.Logger, addr string, out io.Writer) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		log.Error(err, "Cannot announce the metrics server", "address", addr)
		return
	}
	if host == "" {
		host = "127.0.0.1"
	}
	target := net.JoinHostPort(host, port)
	dialer := &tls.Dialer{NetDialer: &net.Dialer{Timeout: time.Second},
		Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // only asks whether it is up
	for {
		conn, err := dialer.DialContext(ctx, "tcp", target)
		if err == nil {
			_ = conn.Close()
			fmt.Fprintf(out, "listening on https://%s\n", target)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}
