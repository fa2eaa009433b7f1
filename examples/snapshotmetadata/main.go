// Command snapshotmetadata is a sidecar that serves the Kubernetes
// SnapshotMetadata gRPC API (github.com/kubernetes-csi/external-snapshot-metadata/pkg/api)
// with reviewauth's cached delegated authentication and authorization.
//
// Every call carries a service-account token in its security_token field,
// requested by the backup application for this sidecar's audience. The
// sidecar reviews it with TokenReview and that audience, then checks with
// SubjectAccessReviews that the caller may get the VolumeSnapshots it asks
// about: snapshot_name for GetMetadataAllocated; target_snapshot_name and
// the snapshot behind base_snapshot_id for GetMetadataDelta (both must be
// allowed). Both reviews are cached. Block metadata comes from a pluggable
// backend; this program uses a deterministic fake.
//
// Usage:
//
//	snapshotmetadata --audience=snapshotmetadata.example.com \
//	    [--listen=:50051] [--kubeconfig=PATH] \
//	    [--tls-cert-file=PATH --tls-private-key-file=PATH] [--self-signed-ca-file=PATH]
//
// Without --kubeconfig it uses the in-cluster configuration. Without a
// certificate it serves with a self-signed one, written to
// --self-signed-ca-file if given, so that clients can trust it. It prints
// "listening on ADDRESS" once it accepts connections, and stops gracefully
// on SIGINT or SIGTERM.
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
	"syscall"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/reviewauth/reviewauth/examples/internal/serving"
	"github.com/reviewauth/reviewauth/grpcauth"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], FakeBackend{}, func(addr net.Addr) {
		fmt.Printf("listening on %s\n", addr)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "snapshotmetadata:", err)
		os.Exit(1)
	}
}

// config is the parsed command line.
type config struct {
	listen       string
	certFile     string
	keyFile      string
	selfSignedCA string
	review       serving.Flags
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := pflag.NewFlagSet("snapshotmetadata", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.listen, "listen", ":50051", "TCP address to serve on")
	c.review.AddFlags(fs) // --kubeconfig, --audience (required), --authentication-*, --authorization-*, --metrics-listen
	fs.StringVar(&c.certFile, "tls-cert-file", "", "TLS certificate (PEM); a self-signed one when empty")
	fs.StringVar(&c.keyFile, "tls-private-key-file", "", "TLS private key (PEM)")
	fs.StringVar(&c.selfSignedCA, "self-signed-ca-file", "", "where to write the self-signed certificate, for clients to trust")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	case len(c.review.Audiences) == 0 && len(c.review.Authn.Audiences) == 0:
		return c, errors.New("--audience is required: tokens must be issued for this sidecar, not for the API server")
	case (c.certFile == "") != (c.keyFile == ""):
		return c, errors.New("--tls-cert-file and --tls-private-key-file go together")
	}
	return c, nil
}

// run serves until ctx is done, then stops gracefully. ready, if not nil,
// is called with the listening address once the server accepts connections.
func run(ctx context.Context, args []string, backend Backend, ready func(net.Addr)) error {
	c, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	built, waitMetrics, err := c.review.Start(ctx, os.Stdout)
	if err != nil {
		return err
	}
	defer waitMetrics()

	lis, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	defer lis.Close()
	cert, err := serving.Certificate(c.certFile, c.keyFile, c.selfSignedCA, "snapshotmetadata", lis.Addr())
	if err != nil {
		return err
	}

	opts := grpcauth.Options{
		Authenticator: built.Authenticator,
		Authorizer:    built.Authorizer,
		Rules:         rules(backend),
		Skip:          grpcauth.HealthAndReflection,
		Metrics:       built.Metrics,
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})),
		grpc.ChainUnaryInterceptor(grpcauth.UnaryServerInterceptor(opts)),
		grpc.ChainStreamInterceptor(grpcauth.StreamServerInterceptor(opts)),
	)
	api.RegisterSnapshotMetadataServer(srv, &server{backend: backend})
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
	// Let running streams finish, but not forever.
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		srv.Stop()
		<-stopped
	}
	return <-errc
}
