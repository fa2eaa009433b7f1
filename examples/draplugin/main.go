// Command draplugin is a node-local gRPC service in the style of a DRA
// (Dynamic Resource Allocation) plugin, protected by reviewauth.
//
// It accepts a call only when both hold:
//   - the caller's service-account token, reviewed with this plugin's
//     audience, is bound to a pod on this node: its
//     authentication.kubernetes.io/node-name extra equals --node-name
//     (authz.NodeLocal), so drivers on one node never serve callers from
//     another;
//   - a SubjectAccessReview allows the caller to get the ResourceClaim the
//     call names.
//
// Usage:
//
//	draplugin --node-name=NODE --audience=AUDIENCE \
//	    [--listen=unix:///var/lib/kubelet/plugins/example/plugin.sock | --listen=HOST:PORT] \
//	    [--kubeconfig=PATH] [--tls-cert-file=PATH --tls-private-key-file=PATH]
//
// On a Unix socket it uses grpc's local credentials, which callers' tokens
// may travel over (grpcauth.PerRPCCredentials accepts them); on TCP it
// serves TLS, with a self-signed certificate (valid for --tls-san too) when
// none is given, and reloads a given one when its files change. Without
// --kubeconfig it uses the in-cluster configuration. It prints
// "listening on ADDRESS" once it accepts connections.
//
// A revoker (--revocation-watch, default pods,node,clusterroles,roles;
// --revocation-as-node, default true) watches this node's pods and Node,
// read as the node, so that a deleted pod's token stops working within
// seconds rather than at the end of the token cache's TTL, and
// ClusterRoles, Roles and their bindings, read with the plugin's own
// credentials (a node may not read RBAC), so that a removed permission to
// get a claim does too rather than at the end of the Allow TTL: claims are
// namespaced, so ClusterRoleBindings and RoleBindings grant them. It needs
// the plugin's pod-bound token and RBAC like
// examples/draproxy/deploy/revocation-rbac.yaml; without them it stays out
// of sync and the TTLs apply.
//
// Serving is hardened (serving.GRPCServerOptions: connection cap
// --max-connections, handshake timeout, keepalive enforcement, idle
// connections closed, bounded streams and metadata). It logs like a
// Kubernetes component (-v, --vmodule, --logging-format=text|json), serves
// grpc.health.v1, and /metrics, /healthz, /livez and /readyz on
// --metrics-listen; --version prints the version.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/local"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/examples/internal/cli"
	"github.com/reviewauth/reviewauth/grpcauth"
	"github.com/reviewauth/reviewauth/serving"
)

func main() {
	cli.Main("draplugin", func(ctx context.Context) error {
		return run(ctx, os.Args[1:], func(a net.Addr) { fmt.Printf("listening on %s\n", a) })
	})
}

type config struct {
	listen, nodeUID string
	flags           *cli.Flags
	review          *serving.Flags
}

func parseFlags(args []string, out io.Writer) (config, error) {
	c := config{flags: cli.New()}
	c.review = &c.flags.Review
	fs := pflag.NewFlagSet("draplugin", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.listen, "listen", "unix:///run/draplugin/plugin.sock", "unix:///path for a Unix socket, or HOST:PORT for TLS over TCP")
	c.flags.AddFlags(fs, true) // logging, --version, --metrics-listen, --max-connections, --kubeconfig, --audience, --node-name (required: only callers bound to it are served), --authentication-*, --authorization-*, --tls-* (for TCP)
	// --revocation-*: this node's pods and Node (as the node), and the RBAC
	// its SubjectAccessReviews rest on: a get of a namespaced claim, which
	// ClusterRoleBindings and RoleBindings grant.
	c.flags.AddRevocationFlags(fs, cli.NodeAgentRevocation("clusterroles", "roles"))
	fs.StringVar(&c.nodeUID, "node-uid", "", "UID of this node; when set, callers' node-uid must match too")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.flags.Version {
		return c, nil
	}
	if err := c.flags.TLS.Validate(); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	case c.review.Authz.NodeName == "":
		return c, errors.New("--node-name is required")
	case len(c.review.Audiences) == 0 && len(c.review.Authn.Audiences) == 0:
		return c, errors.New("--audience is required")
	}
	return c, nil
}

// run serves until ctx is done. ready, if not nil, is called with the
// listening address once the server accepts connections.
func run(ctx context.Context, args []string, ready func(net.Addr)) error {
	c, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	started, err := c.flags.Start(ctx, "draplugin", os.Stdout)
	if errors.Is(err, cli.ErrVersion) {
		return nil
	}
	if err != nil {
		return err
	}
	defer started.Stop()
	built := started.Built
	opts := grpcauth.Options{
		Authenticator: built.Authenticator,
		// Node locality first: a caller from another node is refused
		// without a SubjectAccessReview.
		Authorizer: authz.All(authz.NodeLocal(authz.NodeLocalOptions{NodeName: c.review.Authz.NodeName, NodeUID: c.nodeUID}), built.Authorizer),
		Rules:      rules(),
		Skip:       grpcauth.HealthAndReflection,
		Metrics:    built.Metrics,
	}
	ic, err := grpcauth.New(opts)
	if err != nil {
		return err
	}

	gopts := serving.GRPCOptions{MaxConnections: c.flags.MaxConnections, Metrics: built.Metrics}
	var lis net.Listener
	if path, ok := strings.CutPrefix(c.listen, "unix://"); ok {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if lis, err = net.Listen("unix", path); err != nil {
			return err
		}
		gopts.Credentials = local.NewCredentials()
	} else {
		c.flags.TLS.SANs = append(c.flags.TLS.SANs, cli.SANsFor(c.listen)...)
		certs, err := c.flags.TLS.Certificates("draplugin", "")
		if err != nil {
			return err
		}
		defer certs.Close()
		if lis, err = net.Listen("tcp", c.listen); err != nil {
			return err
		}
		gopts.Certificates = certs
	}
	defer lis.Close()

	srv := grpc.NewServer(append(serving.GRPCServerOptions(gopts),
		grpc.ChainUnaryInterceptor(ic.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(ic.StreamServerInterceptor()))...)
	srv.RegisterService(serviceDesc(prepareOn(c.review.Authz.NodeName)), nil)
	healthSrv := health.NewServer()
	healthpb.RegisterHealthServer(srv, healthSrv)

	// Ready once the listener is open: connections queue until Serve.
	started.Health.SetReady(true)
	if ready != nil {
		ready(lis.Addr())
	}
	defer context.AfterFunc(ctx, func() {
		started.Health.SetReady(false)
		healthSrv.Shutdown()
	})()
	return serving.ServeGRPC(ctx, srv, lis, gopts)
}
