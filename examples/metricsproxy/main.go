// Command metricsproxy is a reverse proxy in front of a node's metrics
// endpoint, in the style of kube-rbac-proxy, built on reviewauth's httpauth.
//
// Every request is authenticated with a client certificate (when
// --client-ca-file is set) or a bearer token reviewed for --audience, mapped
// with the kubelet's path table (/metrics -> nodes/metrics, /logs/ ->
// nodes/log, ...) on --node-name, and authorized with a
// SubjectAccessReview. A Prometheus server bound only to nodes/metrics gets
// /metrics and is refused /logs/. Decisions are logged with klog, without
// tokens.
//
// Usage:
//
//	metricsproxy --upstream http://127.0.0.1:9100 --listen :8443 \
//	  --audience metricsproxy --node-name "$NODE_NAME" [--kubeconfig FILE] \
//	  [--tls-cert-file FILE --tls-private-key-file FILE] [--client-ca-file FILE] \
//	  [--authorization-always-allow-paths /healthz,/readyz]
//
// --authorization-always-allow-paths means what it means in the API server:
// GET and HEAD requests to those paths are served without authorization,
// and without a credential (as system:anonymous); a request that presents
// a credential must present a valid one; other methods are authorized like
// any request. (kube-rbac-proxy's --allow-paths, a list of the only paths
// proxied, is something else; this proxy has no such flag.)
//
// Once listening, metricsproxy prints "listening on https://ADDR" on
// standard output, so that a supervisor started with --listen 127.0.0.1:0
// can find the port.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/examples/internal/serving"
	"github.com/reviewauth/reviewauth/httpauth"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			os.Exit(2)
		}
		klog.ErrorS(err, "metricsproxy failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

type config struct {
	upstream, listen  string
	certFile, keyFile string
	fineGrained       bool
	review            serving.Flags
	http              httpauth.Flags
}

func parseFlags(args []string, output io.Writer) (*config, error) {
	var c config
	fs := pflag.NewFlagSet("metricsproxy", pflag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&c.upstream, "upstream", "", "URL of the metrics endpoint to proxy to, such as http://127.0.0.1:9100 (required)")
	fs.StringVar(&c.listen, "listen", ":8443", "address to serve HTTPS on")
	fs.StringVar(&c.certFile, "tls-cert-file", "", "serving certificate (PEM); a self-signed one is generated when unset")
	fs.StringVar(&c.keyFile, "tls-private-key-file", "", "private key of --tls-cert-file (PEM)")
	fs.BoolVar(&c.fineGrained, "kubelet-fine-grained-authz", false, "map paths like a kubelet with fine-grained authorization (KEP-2862, the kubelet's only mode since 1.36): /pods, /allocatedPods, /runningpods to nodes/pods, /healthz to nodes/healthz and /configz to nodes/configz, each or else nodes/proxy")
	c.review.AddFlags(fs) // --kubeconfig, --audience, --node-name, --authentication-*, --authorization-*, --metrics-listen
	c.http.AddFlags(fs)   // --client-ca-file, --authorization-always-allow-paths
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("metricsproxy: unexpected arguments %q", fs.Args())
	}
	switch {
	case c.upstream == "":
		return nil, errors.New("metricsproxy: --upstream is required")
	case c.review.Authz.NodeName == "":
		return nil, errors.New("metricsproxy: --node-name is required")
	case len(c.review.Audiences) == 0 && len(c.review.Authn.Audiences) == 0:
		return nil, errors.New("metricsproxy: --audience is required: callers must request tokens for this proxy's audience")
	case (c.certFile == "") != (c.keyFile == ""):
		return nil, errors.New("metricsproxy: --tls-cert-file and --tls-private-key-file go together")
	}
	if err := c.http.Validate(); err != nil {
		return nil, fmt.Errorf("metricsproxy: %w", err)
	}
	return &c, nil
}

// run parses args, serves until ctx is done, then shuts down gracefully. It
// writes "listening on https://ADDR" to stdout once the listener is open.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	c, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	upstream, err := url.Parse(c.upstream)
	if err != nil || (upstream.Scheme != "http" && upstream.Scheme != "https") || upstream.Host == "" {
		return fmt.Errorf("metricsproxy: --upstream %q is not an http(s) URL", c.upstream)
	}

	built, waitMetrics, err := c.review.Start(ctx, stdout)
	if err != nil {
		return fmt.Errorf("metricsproxy: %w", err)
	}
	defer waitMetrics()
	opts := httpauth.Options{
		Authenticator:    built.Authenticator,
		Authorizer:       built.Authorizer,
		Attributes:       httpauth.Kubelet(c.review.Authz.NodeName),
		AlwaysAllowPaths: c.http.AlwaysAllowPaths,
		Metrics:          built.Metrics,
	}
	if c.fineGrained {
		opts.Attributes = httpauth.KubeletFineGrained(c.review.Authz.NodeName)
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.http.ClientCAFile != "" {
		if opts.ClientCertificates, err = c.http.ClientCertificates(httpauth.ClientCertOptions{}); err != nil {
			return fmt.Errorf("metricsproxy: %w", err)
		}
		// Request, but do not verify, client certificates in the handshake:
		// the authenticator verifies them (once per chain, cached) and
		// answers 401 for an invalid one, and clients without one can
		// still use a bearer token.
		tlsConfig.ClientAuth = tls.RequestClientCert
	}
	if c.certFile != "" {
		cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			return fmt.Errorf("metricsproxy: loading the serving certificate: %w", err)
		}
		tlsConfig.Certificates = []tls.Certificate{cert}
	} else {
		cert, err := serving.Certificate("", "", "", "metricsproxy", nil)
		if err != nil {
			return err
		}
		tlsConfig.Certificates = []tls.Certificate{cert}
		klog.InfoS("Serving with a self-signed certificate; set --tls-cert-file and --tls-private-key-file in production")
	}

	protect, err := httpauth.New(opts)
	if err != nil {
		return fmt.Errorf("metricsproxy: %w", err)
	}
	proxy := &httputil.ReverseProxy{
		// r.URL.Path here is the cleaned path that was authorized; SetURL
		// joins it to the upstream's path, so the upstream serves exactly
		// what was authorized.
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			klog.ErrorS(err, "Upstream request failed", "path", r.URL.Path)
			w.WriteHeader(http.StatusBadGateway)
		},
	}

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("metricsproxy: %w", err)
	}
	srv := &http.Server{
		Handler:           logDecisions(protect(markAuthorized(proxy))),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
	}
	if _, err := fmt.Fprintf(stdout, "listening on https://%s\n", ln.Addr()); err != nil {
		ln.Close()
		return fmt.Errorf("metricsproxy: %w", err)
	}
	klog.InfoS("Serving", "address", ln.Addr().String(), "upstream", upstream.Redacted(), "node", c.review.Authz.NodeName, "audiences", built.Authenticator.Audiences(), "alwaysAllowPaths", c.http.AlwaysAllowPaths)

	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("metricsproxy: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	if serveErr := <-errc; !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	if err != nil {
		return fmt.Errorf("metricsproxy: shutting down: %w", err)
	}
	return nil
}

// decision is filled in as a request goes through the middleware.
type decision struct {
	code       int
	authorized bool
	user       string
}

type decisionKey struct{}

type statusRecorder struct {
	http.ResponseWriter
	d *decision
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.d.code == 0 {
		s.d.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.d.code == 0 {
		s.d.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// logDecisions logs one line per request: who, what, and whether it was
// authorized. It never logs headers, so never a token.
func logDecisions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := &decision{}
		start := time.Now()
		path := r.URL.Path
		next.ServeHTTP(&statusRecorder{ResponseWriter: w, d: d}, r.WithContext(context.WithValue(r.Context(), decisionKey{}, d)))
		verdict := "denied"
		if d.authorized {
			verdict = "allowed"
		}
		klog.InfoS("Request", "decision", verdict, "user", d.user, "method", r.Method, "path", path, "code", d.code, "remote", r.RemoteAddr, "duration", time.Since(start))
	})
}

// markAuthorized runs after authorization: it records the identity for the
// decision log.
func markAuthorized(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, ok := r.Context().Value(decisionKey{}).(*decision); ok {
			d.authorized = true
			if u, ok := request.UserFrom(r.Context()); ok {
				d.user = u.GetName()
			}
		}
		next.ServeHTTP(w, r)
	})
}
