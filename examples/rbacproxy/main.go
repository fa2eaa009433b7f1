// Command rbacproxy is a drop-in replacement for kube-rbac-proxy (v0.21):
// an HTTPS reverse proxy for one upstream that authenticates every request
// (a bearer token reviewed with TokenReview, a client certificate, or an
// OIDC token) and authorizes it with SubjectAccessReviews, built on
// reviewauth's library packages. It takes kube-rbac-proxy's flags and its
// --config-file format, so that switching is changing the image.
//
// Where kube-rbac-proxy is unsafe, rbacproxy is not, and says so at start
// or in its answers (the README's migration table lists every difference):
//
//   - client-sent X-Remote-* headers (and the --auth-header-* names), and
//     Impersonate-*, never reach the upstream;
//   - the upstream receives what was authorized: the --auth-header-*
//     identity is set after the hop-by-hop pass, so a client's
//     "Connection: X-Remote-User" cannot remove it, and the rewrites'
//     header (byHttpHeader) reaches it with the values that were
//     authorized; sent in two spellings (X-Namespace and X_Namespace, which
//     an upstream may read alike) it is refused with 400
//     (httpauth.Forwarder);
//   - every authenticated caller, client certificates included, is in
//     system:authenticated, as in kube-rbac-proxy and the API server;
//   - paths are cleaned before anything reads them ("//logs" is "/logs",
//     "%2e%2e" is refused with 400) and the upstream gets the path that
//     was authorized;
//   - an API server that cannot be asked is 503 with Retry-After, never
//     401 or 500;
//   - tokens must be minted for --auth-token-audiences: a token for the
//     API server's own audience is refused unless
//     --authentication-allow-api-server-audience says otherwise;
//   - --ignore-paths serves GET and HEAD without a credential (a presented
//     credential must be valid), other methods are authorized as on any
//     path, unless --ignore-paths-methods widens it;
//   - the static rules of --config-file honour user.groups.
//
// Reviews are cached and coalesced (a cold herd of 100 identical requests
// costs one SubjectAccessReview), malformed tokens cost none, and serving
// is hardened (see the serving package): a connection cap, header, body,
// per-write and idle timeouts, connections closed after a refusal without
// reading its body, HTTP/2 limits. Certificates and the client CA reload
// when their files change. Logging is a Kubernetes component's: at the
// default verbosity, refusals only (paced), never a token.
//
// Usage, as kube-rbac-proxy:
//
//	rbacproxy --secure-listen-address=0.0.0.0:8443 --upstream=http://127.0.0.1:8081/ \
//	  --auth-token-audiences=rbacproxy --config-file=/etc/rbacproxy/config.yaml \
//	  [--tls-cert-file=... --tls-private-key-file=...] [--client-ca-file=...] \
//	  [--proxy-endpoints-port=8444] [-v=2]
//
// It prints "listening on https://ADDR" once it serves.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/examples/internal/cli"
	"github.com/reviewauth/reviewauth/httpauth"
	"github.com/reviewauth/reviewauth/serving"
)

func main() {
	cli.Main("rbacproxy", func(ctx context.Context) error {
		return run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	})
}

// disabledFlags are the klog flags kube-rbac-proxy still accepts, hidden,
// with a warning that they do nothing; rbacproxy does the same, so that old
// manifests start.
var disabledFlags = []string{"logtostderr", "add-dir-header", "alsologtostderr", "log-backtrace-at", "log-dir",
	"log-file", "log-file-max-size", "one-output", "skip-headers", "skip-log-headers", "stderrthreshold"}

type config struct {
	secureListen, insecureListen          string
	upstream                              string
	upstreamForceH2C                      bool
	upstreamCA, upstreamCert, upstreamKey string
	configFile                            string
	allowPaths, ignorePaths               []string
	ignoreMethods                         []string
	proxyEndpointsPort                    int
	tlsReloadInterval                     time.Duration
	headers                               headerFields
	tokenAudiences                        []string
	oidc                                  oidcFlags
	kubeAPIQPS                            float32
	kubeAPIBurst                          int
	http2Disable                          bool
	http2MaxStreams, http2MaxSize         uint32
	flags                                 *cli.Flags
	fs                                    *pflag.FlagSet
}

func parseFlags(args []string, output io.Writer) (*config, error) {
	c := &config{flags: cli.New()}
	fs := pflag.NewFlagSet("rbacproxy", pflag.ContinueOnError)
	c.fs = fs
	fs.SetOutput(output)
	// kube-rbac-proxy's flags, with its names, meanings and defaults.
	fs.StringVar(&c.secureListen, "secure-listen-address", "", "The address the HTTPS server should listen on (required).")
	fs.StringVar(&c.insecureListen, "insecure-listen-address", "", "Not supported: rbacproxy serves HTTPS only (kube-rbac-proxy deprecated it).")
	_ = fs.MarkHidden("insecure-listen-address")
	fs.StringVar(&c.upstream, "upstream", "", "The upstream URL to proxy to once requests have successfully been authenticated and authorized (required).")
	fs.BoolVar(&c.upstreamForceH2C, "upstream-force-h2c", false, "Speak HTTP/2 without TLS (h2c, prior knowledge) to an http:// upstream, such as a gRPC server without TLS.")
	fs.StringVar(&c.upstreamCA, "upstream-ca-file", "", "The CA the upstream uses for TLS connection. Default: the host's roots.")
	fs.StringVar(&c.upstreamCert, "upstream-client-cert-file", "", "Client certificate to present to the upstream. Requires --upstream-client-key-file.")
	fs.StringVar(&c.upstreamKey, "upstream-client-key-file", "", "The key of --upstream-client-cert-file.")
	fs.StringVar(&c.configFile, "config-file", "", "kube-rbac-proxy configuration file: authorization.resourceAttributes, .rewrites and .static.")
	fs.StringSliceVar(&c.allowPaths, "allow-paths", nil, "Comma-separated path.Match patterns: only requests whose cleaned path matches one are served, others are 404. Cannot be used with --ignore-paths.")
	fs.StringSliceVar(&c.ignorePaths, "ignore-paths", nil, "Comma-separated path.Match patterns: requests whose cleaned path matches one are served without a credential for the methods of --ignore-paths-methods (a presented credential must be valid). Cannot be used with --allow-paths.")
	fs.StringSliceVar(&c.ignoreMethods, "ignore-paths-methods", []string{"GET", "HEAD"}, "Methods --ignore-paths applies to; other methods are authenticated and authorized. kube-rbac-proxy applies it to every method.")
	fs.IntVar(&c.proxyEndpointsPort, "proxy-endpoints-port", 0, "The port to serve /healthz, /livez and /readyz on, over HTTPS with the serving certificate, on the host of --secure-listen-address.")
	fs.DurationVar(&c.tlsReloadInterval, "tls-reload-interval", time.Minute, "[DEPRECATED, ignored] Certificates are reloaded when their files change, and checked every minute.")
	fs.BoolVar(&c.headers.enabled, "auth-header-fields-enabled", false, "Set the caller's name and groups in headers of the requests sent to the upstream.")
	fs.StringVar(&c.headers.user, "auth-header-user-field-name", "x-remote-user", "The header that tells the upstream the caller's name. Never taken from the client.")
	fs.StringVar(&c.headers.groups, "auth-header-groups-field-name", "x-remote-groups", "The header that tells the upstream the caller's groups. Never taken from the client.")
	fs.StringVar(&c.headers.sep, "auth-header-groups-field-separator", "|", "The separator of the groups in --auth-header-groups-field-name.")
	fs.StringSliceVar(&c.tokenAudiences, "auth-token-audiences", nil, "Comma-separated audiences a token must be minted for (required unless --authentication-allow-api-server-audience: a token for the API server's own audience could be replayed against it).")
	fs.Float32Var(&c.kubeAPIQPS, "kube-api-qps", 0, "QPS of the review clients (--authentication-qps and --authorization-qps).")
	fs.IntVar(&c.kubeAPIBurst, "kube-api-burst", 0, "Burst of the review clients (--authentication-burst and --authorization-burst).")
	fs.BoolVar(&c.http2Disable, "http2-disable", false, "Disable HTTP/2 support.")
	fs.Uint32Var(&c.http2MaxStreams, "http2-max-concurrent-streams", 100, "The maximum number of concurrent streams per HTTP/2 connection.")
	fs.Uint32Var(&c.http2MaxSize, "http2-max-size", 256*1024, "The maximum number of bytes that the server will accept for frame size and buffer per stream in a HTTP/2 request.")
	c.oidc.addFlags(fs)
	for _, name := range disabledFlags {
		fs.String(name, "", "[DISABLED] no effect")
		fs.Lookup(name).NoOptDefVal = "true"
		_ = fs.MarkHidden(name)
	}
	// reviewauth's and Kubernetes' own: -v, --vmodule, --logging-format,
	// --version, --kubeconfig, --tls-*, --client-ca-file, the
	// --authentication-* and --authorization-* of k8s.io/apiserver's
	// delegated options, --authentication-jwks-preverify, --metrics-listen,
	// --max-connections.
	c.flags.AddFlags(fs, true)
	c.flags.Review.AddHTTPFlags(fs)
	// --revocation-*: off by default, so that switching from
	// kube-rbac-proxy stays a change of image (watching RBAC needs list and
	// watch of it; deploy/revocation adds both).
	c.flags.AddRevocationFlags(fs, serving.RevocationFlags{})
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.flags.Version {
		return c, nil
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("rbacproxy: %w", err)
	}
	return c, nil
}

func (c *config) validate() error {
	var errs []error
	if c.fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", c.fs.Args()))
	}
	if c.insecureListen != "" {
		errs = append(errs, errors.New("--insecure-listen-address is not supported: rbacproxy serves HTTPS only, so that tokens never cross the network in the clear"))
	}
	if c.secureListen == "" {
		errs = append(errs, errors.New("--secure-listen-address is required"))
	}
	if u, err := url.Parse(c.upstream); c.upstream == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--upstream %q: an http(s) URL is required", c.upstream))
	} else if c.upstreamForceH2C && u.Scheme != "http" {
		errs = append(errs, errors.New("--upstream-force-h2c needs an http:// upstream"))
	}
	if (c.upstreamCert == "") != (c.upstreamKey == "") {
		errs = append(errs, errors.New("--upstream-client-cert-file and --upstream-client-key-file go together"))
	}
	if len(c.allowPaths) > 0 && len(c.ignorePaths) > 0 {
		errs = append(errs, errors.New("cannot use --allow-paths and --ignore-paths together"))
	}
	if c.proxyEndpointsPort < 0 || c.proxyEndpointsPort > 65535 {
		errs = append(errs, fmt.Errorf("--proxy-endpoints-port %d: not a port", c.proxyEndpointsPort))
	}
	if c.headers.enabled && (c.headers.user == "" || c.headers.groups == "") {
		errs = append(errs, errors.New("--auth-header-user-field-name and --auth-header-groups-field-name must not be empty"))
	}
	review := &c.flags.Review
	review.Audiences = append(review.Audiences, c.tokenAudiences...)
	if c.kubeAPIQPS > 0 {
		review.Authn.Client.QPS, review.Authz.Client.QPS = c.kubeAPIQPS, c.kubeAPIQPS
	}
	if c.kubeAPIBurst > 0 {
		review.Authn.Client.Burst, review.Authz.Client.Burst = c.kubeAPIBurst, c.kubeAPIBurst
	}
	if len(review.Audiences) == 0 && len(review.Authn.Audiences) == 0 && !review.Authn.AllowAPIServerAudience {
		errs = append(errs, errors.New("--auth-token-audiences is required: have clients request tokens for this proxy's audience. "+
			"kube-rbac-proxy accepts tokens for the API server's own audience when it is unset, and a proxy that does can replay them against the API server; "+
			"--authentication-allow-api-server-audience keeps that behaviour (DANGEROUS)"))
	}
	errs = append(errs, c.oidc.validate(), c.flags.TLS.Validate(), review.Validate())
	return errors.Join(errs...)
}

// run parses args and serves until ctx is done, then shuts down
// gracefully. It writes "listening on https://ADDR" to stdout once it
// serves; --help prints the usage to stdout, as kube-rbac-proxy (cobra)
// does, and returns pflag.ErrHelp (cli.Main exits 0); flag errors are
// returned.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	started, err := c.flags.Start(ctx, "rbacproxy", stdout)
	if errors.Is(err, cli.ErrVersion) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("rbacproxy: %w", err)
	}
	defer started.Stop()
	logger := klog.FromContext(ctx)
	for _, name := range disabledFlags {
		if c.fs.Changed(name) {
			logger.Info("Flag removed from klog, ignored (as by kube-rbac-proxy)", "flag", "--"+name)
		}
	}
	if c.fs.Changed("tls-reload-interval") {
		logger.Info("--tls-reload-interval is ignored: certificates are reloaded when their files change, and checked every minute")
	}

	srv, endpoints, cleanup, err := c.build(ctx, started)
	if err != nil {
		return fmt.Errorf("rbacproxy: %w", err)
	}
	defer cleanup()
	ln, err := net.Listen("tcp", c.secureListen)
	if err != nil {
		return fmt.Errorf("rbacproxy: --secure-listen-address: %w", err)
	}
	var epLn net.Listener
	if endpoints != nil {
		host, _, _ := net.SplitHostPort(c.secureListen)
		if epLn, err = net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(c.proxyEndpointsPort))); err != nil {
			ln.Close()
			return fmt.Errorf("rbacproxy: --proxy-endpoints-port: %w", err)
		}
		fmt.Fprintf(stdout, "proxy endpoints on https://%s\n", epLn.Addr())
	}
	started.Health.SetReady(true) // the listener is open: connections queue until Serve
	fmt.Fprintf(stdout, "listening on https://%s\n", ln.Addr())
	logger.Info("Serving", "address", ln.Addr().String(), "upstream", c.upstream, "audiences", started.Built.Authenticator.Audiences(),
		"oidc", c.oidc.issuerURL, "configFile", c.configFile, "maxConnections", srv.MaxConnections())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() {
		errs[0] = srv.Serve(ctx, ln)
		cancel()
	})
	if endpoints != nil {
		wg.Go(func() {
			errs[1] = endpoints.Serve(ctx, epLn)
			cancel()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rbacproxy: %w", err)
	}
	return nil
}

// build makes the servers: the proxy's and, with --proxy-endpoints-port,
// the health endpoints'. cleanup releases what they did not serve.
func (c *config) build(ctx context.Context, started *cli.Started) (srv, endpoints *serving.HTTPServer, cleanup func(), err error) {
	authzCfg := &authorizationConfig{}
	if c.configFile != "" {
		var warnings []string
		if authzCfg, warnings, err = loadConfig(c.configFile); err != nil {
			return nil, nil, nil, err
		}
		for _, w := range warnings {
			klog.FromContext(ctx).Info("Warning: "+w, "configFile", c.configFile)
		}
	}
	c.flags.TLS.SANs = append(c.flags.TLS.SANs, cli.SANsFor(c.secureListen)...)
	certs, err := c.flags.TLS.Certificates("rbacproxy", c.flags.Review.HTTP.ClientCAFile)
	if err != nil {
		return nil, nil, nil, err
	}
	if c.flags.TLS.CertFile == "" {
		klog.FromContext(ctx).Info("Serving with a self-signed certificate; set --tls-cert-file and --tls-private-key-file in production")
	}
	transport, err := c.upstreamTransport()
	if err != nil {
		certs.Close()
		return nil, nil, nil, err
	}
	var tokens authenticator.Token = started.Built.Authenticator
	if c.oidc.enabled() {
		// OIDC tokens of the issuer are verified locally; every other
		// token goes to the TokenReview. An OIDC token that fails is not
		// passed on.
		oidcTokens, err := c.oidc.authenticator(ctx)
		if err != nil {
			certs.Close()
			return nil, nil, nil, err
		}
		tokens = tokenunion.NewFailOnError(oidcTokens, started.Built.Authenticator)
	}
	var az authorizer.Authorizer = started.Built.Authorizer
	if len(authzCfg.Static) > 0 {
		az = authz.First(staticAuthorizer(authzCfg.Static), started.Built.Authorizer)
	}
	m, err := newMapper(authzCfg)
	if err != nil {
		certs.Close()
		return nil, nil, nil, err
	}
	h, err := c.handler(started.Built, certs, transport, tokens, az, m)
	if err != nil {
		certs.Close()
		return nil, nil, nil, err
	}
	srv, err = serving.NewHTTPServer(h, serving.ServerOptions{
		Certificates:         certs,
		MaxConnections:       c.flags.MaxConnections,
		MaxConcurrentStreams: int(c.http2MaxStreams),
		MaxReadFrameSize:     int(c.http2MaxSize),
		DisableHTTP2:         c.http2Disable,
		Health:               started.Health,
		Metrics:              started.Built.Metrics,
	})
	if err == nil && c.proxyEndpointsPort != 0 {
		endpoints, err = serving.NewHTTPServer(started.Health, serving.ServerOptions{Certificates: certs, MaxConnections: 64, DisableHTTP2: c.http2Disable})
	}
	if err != nil {
		certs.Close()
		return nil, nil, nil, err
	}
	return srv, endpoints, certs.Close, nil
}

// handler is the proxy's handler for the given parts. It is the one place
// httpauth.New is called.
func (c *config) handler(built *serving.Built, certs *serving.Certificates, transport http.RoundTripper,
	tokens authenticator.Token, az authorizer.Authorizer, m *mapper) (http.Handler, error) {
	opts, err := built.HTTPOptions(m, certs)
	if err != nil {
		return nil, err
	}
	opts.Authenticator, opts.Authorizer = tokens, az
	// Besides the identity headers httpauth always deletes: every X-Remote-*
	// (kube-rbac-proxy's X-Remote-Groups among them) and the
	// --auth-header-* names, in every spelling, on every path.
	opts.StripHeaders = []string{"X-Remote-*"}
	for _, h := range []string{c.headers.user, c.headers.groups} {
		if h != "" {
			opts.StripHeaders = append(opts.StripHeaders, h)
		}
	}
	var fo httpauth.ForwarderOptions
	if c.headers.enabled {
		fo.Identity = c.headers
	}
	if m.header != "" {
		// kube-rbac-proxy's rewrites read every value of the header: each
		// is authorized.
		fo.DecisionHeaders = []httpauth.DecisionHeader{{Name: m.header, Multiple: true}}
	}
	if opts.Forwarder, err = httpauth.NewForwarder(fo); err != nil {
		return nil, fmt.Errorf("--auth-header-* or authorization.rewrites.byHttpHeader: %w", err)
	}
	protect, err := httpauth.New(opts)
	if err != nil {
		return nil, err
	}
	var ignore func(http.Handler) http.Handler
	if len(c.ignorePaths) > 0 {
		// The always-allow path of this middleware is every path: the
		// handler sends it only requests whose path matches --ignore-paths.
		ignored := opts
		ignored.AlwaysAllowPaths = []string{"/*"}
		ignored.AlwaysAllowMethods = c.ignoreMethods
		if ignore, err = httpauth.New(ignored); err != nil {
			return nil, fmt.Errorf("--ignore-paths-methods: %w", err)
		}
	}
	u, _ := url.Parse(c.upstream)
	return newHandler(proxyOptions{
		upstream:      u,
		transport:     transport,
		allowPaths:    c.allowPaths,
		ignorePaths:   c.ignorePaths,
		ignoreMethods: c.ignoreMethods,
		forwarder:     opts.Forwarder,
		reencodeQuery: m.query != "",
	}, protect, ignore)
}

// upstreamTransport is the transport to --upstream: TLS with
// --upstream-ca-file (else the host's roots) and the client certificate,
// or h2c with --upstream-force-h2c.
func (c *config) upstreamTransport() (*http.Transport, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.upstreamCA != "" {
		raw, err := os.ReadFile(c.upstreamCA)
		if err != nil {
			return nil, fmt.Errorf("--upstream-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(raw) {
			return nil, fmt.Errorf("--upstream-ca-file %s: no certificate", c.upstreamCA)
		}
		tlsConfig.RootCAs = pool
	}
	if c.upstreamCert != "" {
		pair, err := tls.LoadX509KeyPair(c.upstreamCert, c.upstreamKey)
		if err != nil {
			return nil, fmt.Errorf("--upstream-client-cert-file: %w", err)
		}
		tlsConfig.Certificates = []tls.Certificate{pair}
	}
	t := cli.UpstreamTransport(tlsConfig)
	if c.upstreamForceH2C {
		t.Protocols = new(http.Protocols)
		t.Protocols.SetUnencryptedHTTP2(true)
	}
	return t, nil
}
