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
// serves TLS, with a self-signed certificate when none is given. Without
// --kubeconfig it uses the in-cluster configuration. It prints
// "listening on ADDRESS" once it accepts connections.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/local"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/examples/internal/serving"
	"github.com/reviewauth/reviewauth/grpcauth"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], func(a net.Addr) { fmt.Printf("listening on %s\n", a) }); err != nil {
		fmt.Fprintln(os.Stderr, "draplugin:", err)
		os.Exit(1)
	}
}

type config struct {
	listen, nodeUID                 string
	certFile, keyFile, selfSignedCA string
	review                          serving.Flags
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := pflag.NewFlagSet("draplugin", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.listen, "listen", "unix:///run/draplugin/plugin.sock", "unix:///path for a Unix socket, or HOST:PORT for TLS over TCP")
	c.review.AddFlags(fs) // --kubeconfig, --audience, --node-name (required: only callers bound to it are served), --authentication-*, --authorization-*, --metrics-listen
	fs.StringVar(&c.nodeUID, "node-uid", "", "UID of this node; when set, callers' node-uid must match too")
	fs.StringVar(&c.certFile, "tls-cert-file", "", "TLS certificate for TCP; self-signed when empty")
	fs.StringVar(&c.keyFile, "tls-private-key-file", "", "TLS private key for TCP")
	fs.StringVar(&c.selfSignedCA, "self-signed-ca-file", "", "where to write the self-signed certificate")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	case c.review.Authz.NodeName == "":
		return c, errors.New("--node-name is required")
	case len(c.review.Audiences) == 0 && len(c.review.Authn.Audiences) == 0:
		return c, errors.New("--audience is required")
	case (c.certFile == "") != (c.keyFile == ""):
		return c, errors.New("--tls-cert-file and --tls-private-key-file go together")
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
	built, waitMetrics, err := c.review.Start(ctx, os.Stdout)
	if err != nil {
		return err
	}
	defer waitMetrics()
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

	var (
		lis   net.Listener
		creds credentials.TransportCredentials
	)
	if path, ok := strings.CutPrefix(c.listen, "unix://"); ok {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if lis, err = net.Listen("unix", path); err != nil {
			return err
		}
		creds = local.NewCredentials()
	} else {
		if lis, err = net.Listen("tcp", c.listen); err != nil {
			return err
		}
		cert, err := serving.Certificate(c.certFile, c.keyFile, c.selfSignedCA, "draplugin", nil)
		if err != nil {
			lis.Close()
			return err
		}
		creds = credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	defer lis.Close()

	srv := grpc.NewServer(grpc.Creds(creds),
		grpc.ChainUnaryInterceptor(ic.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(ic.StreamServerInterceptor()))
	srv.RegisterService(serviceDesc(prepareOn(c.review.Authz.NodeName)), nil)
	healthpb.RegisterHealthServer(srv, health.NewServer())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	if ready != nil {
		ready(lis.Addr())
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	srv.GracefulStop()
	return <-errc
}
