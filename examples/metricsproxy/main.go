// Command metricsproxy is a reverse proxy in front of a node's metrics
// endpoint, in the style of kube-rbac-proxy, built on reviewauth's httpauth.
//
// Every request is authenticated with a client certificate (when
// --client-ca-file is set) or a bearer token reviewed for --audience, mapped
// with the kubelet's path table (/metrics -> nodes/metrics, /logs/ ->
// nodes/log, ...) on --node-name, and authorized with a
// SubjectAccessReview. A Prometheus server bound only to nodes/metrics gets
// /metrics and is refused /logs/.
//
// Usage:
//
//	metricsproxy --upstream http://127.0.0.1:9100 --listen :8443 \
//	  --audience metricsproxy --node-name "$NODE_NAME" [--kubeconfig FILE] \
//	  [--tls-cert-file FILE --tls-private-key-file FILE] [--client-ca-file FILE] \
//	  [--authorization-always-allow-paths /healthz,/readyz] [--forward-identity] \
//	  [--metrics-listen 127.0.0.1:9090] [-v N] [--logging-format text|json]
//
// Serving is hardened as the library's serving.HTTPServer is (connection
// cap --max-connections, header, body, per-write and idle timeouts,
// connections closed after a refusal without reading its body, HTTP/2
// limits); the serving certificate and the client CA are reloaded when
// their files change; without a certificate it makes a self-signed one,
// valid for --tls-san names too.
//
// Logging is a Kubernetes component's (-v, --vmodule,
// --logging-format=text|json): at the default verbosity refusals are
// logged (user, the cleaned path, the reason), at most 20 at once and one
// a second after that; allowed requests from -v=4; never a token.
// --metrics-listen serves /metrics, /healthz, /livez and /readyz;
// --version prints the version.
//
// Client-sent identity and impersonation headers (X-Remote-*,
// Impersonate-*, in any spelling) never reach the upstream. With
// --forward-identity the upstream is told who the caller is, in the
// front-proxy headers X-Remote-User, X-Remote-Uid, X-Remote-Group and
// X-Remote-Extra-*, set on the forwarded request after the hop-by-hop pass
// (httpauth.Forwarder), so that a client's "Connection: X-Remote-User"
// cannot remove them; every authenticated caller, certificate or token,
// carries system:authenticated among its groups, as on the kubelet.
//
// --authorization-always-allow-paths serves GET and HEAD requests to those
// paths without authorization, and without a credential (as
// system:anonymous), as the API server does; a request that presents a
// credential must present a valid one; other methods are authorized like
// any request (stricter than the API server, whose path authorizer allows
// every method there). (kube-rbac-proxy's --allow-paths, a list of the only paths
// proxied, is something else; this proxy has no such flag.)
//
// Revocation within seconds (--revocation-watch, default
// pods,node,clusterroles; --revocation-as-node, default true): a revoker
// watches this node's pods and Node, read as the node, and the
// ClusterRoles and ClusterRoleBindings that decide nodes/*, so that a
// deleted pod's token and a removed permission stop working within seconds
// rather than at the end of the caches' TTLs (reviewauth_revocation_synced
// says whether it is in sync; while not, the TTLs apply). It needs the
// RBAC of deploy/revocation-rbac.yaml.
//
// Once listening, metricsproxy prints "listening on https://ADDR" on
// standard output, so that a supervisor started with --listen 127.0.0.1:0
// can find the port.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/examples/internal/cli"
	"github.com/reviewauth/reviewauth/httpauth"
	"github.com/reviewauth/reviewauth/serving"
)

func main() {
	cli.Main("metricsproxy", func(ctx context.Context) error {
		return run(ctx, os.Args[1:], os.Stdout)
	})
}

type config struct {
	upstream, listen string
	fineGrained      bool
	forwardIdentity  bool
	flags            *cli.Flags
}

func parseFlags(args []string, output io.Writer) (*config, error) {
	c := config{flags: cli.New()}
	fs := pflag.NewFlagSet("metricsproxy", pflag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&c.upstream, "upstream", "", "URL of the metrics endpoint to proxy to, such as http://127.0.0.1:9100 (required)")
	fs.StringVar(&c.listen, "listen", ":8443", "address to serve HTTPS on")
	fs.BoolVar(&c.fineGrained, "kubelet-fine-grained-authz", false, "map paths like a kubelet with fine-grained authorization (KEP-2862, the kubelet's only mode since 1.36): /pods, /allocatedPods, /runningpods to nodes/pods, /healthz to nodes/healthz and /configz to nodes/configz, each or else nodes/proxy")
	fs.BoolVar(&c.forwardIdentity, "forward-identity", false, "tell the upstream who the caller is, in the front-proxy headers X-Remote-User, X-Remote-Uid, X-Remote-Group and X-Remote-Extra-* (as client-go writes them and the API server's requestheader authenticator reads them); client-sent ones never pass either way")
	c.flags.AddFlags(fs, true)      // logging, --version, --metrics-listen, --max-connections, --kubeconfig, --audience, --node-name, --authentication-*, --authorization-*, --tls-*
	c.flags.Review.AddHTTPFlags(fs) // --client-ca-file, --authorization-always-allow-paths
	// --revocation-*: this node's pods and Node (as the node), and the
	// ClusterRoles and ClusterRoleBindings that decide nodes/* (cluster-scoped:
	// RoleBindings cannot grant them).
	c.flags.AddRevocationFlags(fs, cli.NodeAgentRevocation("clusterroles"))
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.flags.Version {
		return &c, nil
	}
	review := &c.flags.Review
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("metricsproxy: unexpected arguments %q", fs.Args())
	case c.upstream == "":
		return nil, errors.New("metricsproxy: --upstream is required")
	case review.Authz.NodeName == "":
		return nil, errors.New("metricsproxy: --node-name is required")
	case len(review.Audiences) == 0 && len(review.Authn.Audiences) == 0:
		return nil, errors.New("metricsproxy: --audience is required: callers must request tokens for this proxy's audience")
	}
	if err := errors.Join(c.flags.TLS.Validate(), review.HTTP.Validate()); err != nil {
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
	if !c.flags.Version && (err != nil || (upstream.Scheme != "http" && upstream.Scheme != "https") || upstream.Host == "") {
		return fmt.Errorf("metricsproxy: --upstream %q is not an http(s) URL", c.upstream)
	}
	started, err := c.flags.Start(ctx, "metricsproxy", stdout)
	if errors.Is(err, cli.ErrVersion) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("metricsproxy: %w", err)
	}
	defer started.Stop()
	node := c.flags.Review.Authz.NodeName

	c.flags.TLS.SANs = append(c.flags.TLS.SANs, cli.SANsFor(c.listen)...)
	certs, err := c.flags.TLS.Certificates("metricsproxy", c.flags.Review.HTTP.ClientCAFile)
	if err != nil {
		return fmt.Errorf("metricsproxy: %w", err)
	}
	defer certs.Close()
	if c.flags.TLS.CertFile == "" {
		klog.FromContext(ctx).Info("Serving with a self-signed certificate; set --tls-cert-file and --tls-private-key-file in production")
	}
	mapper := httpauth.Kubelet(node)
	if c.fineGrained {
		mapper = httpauth.KubeletFineGrained(node)
	}
	opts, err := started.Built.HTTPOptions(mapper, certs)
	if err != nil {
		return fmt.Errorf("metricsproxy: %w", err)
	}
	var fo httpauth.ForwarderOptions
	if c.forwardIdentity {
		fo.Identity = httpauth.FrontProxyHeaders()
	}
	if opts.Forwarder, err = httpauth.NewForwarder(fo); err != nil {
		return fmt.Errorf("metricsproxy: %w", err)
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
			// Last, after the hop-by-hop pass: the identity, whatever
			// the client's Connection header named.
			opts.Forwarder.Header(pr.Out.Header, pr.In)
		},
		Transport: cli.UpstreamTransport(nil),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			klog.FromContext(r.Context()).Error(err, "Upstream request failed", "path", r.URL.Path)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	srv, err := serving.NewHTTPServer(protect(proxy), serving.ServerOptions{
		Certificates:   certs,
		MaxConnections: c.flags.MaxConnections,
		Health:         started.Health,
		Metrics:        started.Built.Metrics,
	})
	if err != nil {
		return fmt.Errorf("metricsproxy: %w", err)
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("metricsproxy: %w", err)
	}
	started.Health.SetReady(true) // the listener is open: connections queue until Serve
	if _, err := fmt.Fprintf(stdout, "listening on https://%s\n", ln.Addr()); err != nil {
		ln.Close()
		return fmt.Errorf("metricsproxy: %w", err)
	}
	klog.FromContext(ctx).Info("Serving", "address", ln.Addr().String(), "upstream", upstream.Redacted(), "node", node,
		"audiences", started.Built.Authenticator.Audiences(), "alwaysAllowPaths", c.flags.Review.HTTP.AlwaysAllowPaths, "maxConnections", srv.MaxConnections())
	if err := srv.Serve(ctx, ln); err != nil {
		return fmt.Errorf("metricsproxy: %w", err)
	}
	return nil
}
