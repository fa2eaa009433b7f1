// Package serving holds what the example programs share: reviewauth's flags
// (the library's authn, authz and httpauth Flags, plus the short forms
// --kubeconfig and --audience), building the authenticator and authorizer
// from them, and the /metrics endpoint.
package serving

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/metrics"
)

// Flags are the reviewauth flags every example takes.
type Flags struct {
	Authn authn.Flags
	Authz authz.Flags

	// Kubeconfig is the short form of --authentication-kubeconfig and
	// --authorization-kubeconfig: it sets whichever of them is unset.
	Kubeconfig string
	// Audiences are added to --authentication-audiences.
	Audiences []string
	// MetricsListen is where /metrics is served; empty means nowhere.
	MetricsListen string

	// Warnings receives Build's warnings. Nil means standard error.
	Warnings io.Writer
}

// AddFlags registers the flags on fs.
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	f.Authn.AddFlags(fs)
	f.Authz.AddFlags(fs)
	fs.StringVar(&f.Kubeconfig, "kubeconfig", f.Kubeconfig,
		"kubeconfig for TokenReviews and SubjectAccessReviews (sets --authentication-kubeconfig and --authorization-kubeconfig when they are unset); in-cluster configuration when empty")
	fs.StringSliceVar(&f.Audiences, "audience", f.Audiences,
		"audience callers' tokens must be issued for (repeatable); added to --authentication-audiences")
	fs.StringVar(&f.MetricsListen, "metrics-listen", f.MetricsListen,
		"address to serve Prometheus metrics on, at /metrics (for example 127.0.0.1:9090); not served when empty")
}

// Built is what Build returns.
type Built struct {
	Authenticator *authn.Authenticator
	// Authorizer is the chain the flags describe (always-allow groups and
	// paths, node locality, SubjectAccessReview).
	Authorizer authorizer.Authorizer
	// SAR is the SubjectAccessReview authorizer alone.
	SAR      *authz.Authorizer
	Metrics  *metrics.Metrics
	Registry *prometheus.Registry
}

// SelfCheckTimeout bounds Build's start-up check of the service's own
// credentials.
const SelfCheckTimeout = 15 * time.Second

// Build validates the flags, builds the authenticator, the authorizer and
// the metrics registry, and checks that the service's own credentials may
// create the reviews it will send (authn.SelfCheck and authz.SelfCheck).
// When the API server says they may not (or refuses them), Build fails
// fast with its message, which names the identity and the ClusterRole it
// needs (system:auth-delegator): without it every request would be
// answered 503. When the API server cannot be asked, Build writes a
// warning to f.Warnings and goes on: the API server may come up later, and
// until it does reviews report "could not check".
func (f *Flags) Build() (*Built, error) {
	if f.Authn.Client.Kubeconfig == "" {
		f.Authn.Client.Kubeconfig = f.Kubeconfig
	}
	if f.Authz.Client.Kubeconfig == "" {
		f.Authz.Client.Kubeconfig = f.Kubeconfig
	}
	f.Authn.Audiences = append(f.Authn.Audiences, f.Audiences...)
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f.Authn.Metrics = m
	f.Authz.Metrics = m
	if err := errors.Join(f.Authn.Validate(), f.Authz.Validate()); err != nil {
		return nil, err
	}
	an, err := f.Authn.New()
	if err != nil {
		return nil, err
	}
	sar, err := f.Authz.NewAuthorizer()
	if err != nil {
		return nil, err
	}
	chain, err := f.Authz.Chain(sar)
	if err != nil {
		return nil, err
	}
	warn := f.Warnings
	if warn == nil {
		warn = os.Stderr
	}
	if err := f.selfCheck(warn); err != nil {
		return nil, err
	}
	return &Built{Authenticator: an, Authorizer: chain, SAR: sar, Metrics: m, Registry: reg}, nil
}

// selfCheck runs authn.SelfCheck and authz.SelfCheck on the configured
// clients. It returns their refusals, and writes to warn that the API
// server could not be asked.
func (f *Flags) selfCheck(warn io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), SelfCheckTimeout)
	defer cancel()
	var errs []error
	for _, c := range []struct {
		config func() (*rest.Config, error)
		check  func(context.Context, *rest.Config) error
	}{{f.Authn.RESTConfig, authn.SelfCheck}, {f.Authz.RESTConfig, authz.SelfCheck}} {
		cfg, err := c.config()
		if err != nil {
			return err
		}
		switch err := c.check(ctx, cfg); {
		case errors.Is(err, reviewauth.ErrRefused):
			errs = append(errs, err)
		case err != nil:
			fmt.Fprintf(warn, "warning: %v; starting anyway: requests will be answered 503 until the API server answers\n", err)
		}
	}
	return errors.Join(errs...)
}

// Start is Build followed by ServeMetrics on --metrics-listen, writing the
// metrics address to out. Defer wait: it stops the metrics server
// and waits for it.
func (f *Flags) Start(ctx context.Context, out io.Writer) (b *Built, wait func(), err error) {
	b, err = f.Build()
	if err != nil {
		return nil, nil, err
	}
	wait, err = ServeMetrics(ctx, f.MetricsListen, b.Registry, out)
	if err != nil {
		return nil, nil, err
	}
	return b, wait, nil
}

// ServeMetrics serves reg at /metrics on addr and writes
// "metrics on http://ADDR/metrics" to out. It returns at once; the server
// runs until ctx is done or stop is called, and stop waits for it to end,
// so it is safe to defer on every return path. An empty addr serves
// nothing.
func ServeMetrics(ctx context.Context, addr string, reg *prometheus.Registry, out io.Writer) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "metrics on http://%s/metrics\n", ln.Addr())
	ctx, cancel := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
		<-served
	}()
	return func() { cancel(); <-stopped }, nil
}
