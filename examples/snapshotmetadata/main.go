// Command snapshotmetadata is a sidecar that serves the Kubernetes
// SnapshotMetadata gRPC API (github.com/kubernetes-csi/external-snapshot-metadata/pkg/api)
// with reviewauth's cached delegated authentication and authorization,
// following the contract of the upstream sidecar (external-snapshot-metadata
// v0.2.0).
//
// Every call carries a service-account token in its security_token field,
// requested by the backup application for this sidecar's audience. The
// sidecar reviews it with TokenReview and that audience, then checks with
// SubjectAccessReviews that the caller may get the VolumeSnapshots it asks
// about: snapshot_name for GetMetadataAllocated; target_snapshot_name, and
// the VolumeSnapshots base_snapshot_id resolves to, for GetMetadataDelta
// (all must be allowed; see [Snapshots.Base] for the decision table of the
// base). Both reviews are cached, and a client that mints a token per call
// (the upstream iterator does) still costs one SubjectAccessReview per
// snapshot per TTL: the token's credential-id is not part of the cache key.
// Then it checks the target VolumeSnapshot as upstream does (it exists, is
// ready, and belongs to --driver; see [Snapshots.Target]), and streams block
// metadata from a pluggable backend; this program uses a deterministic fake.
//
// The audience is the spec.audience of the SnapshotMetadataService object
// named after the driver (cbt.storage.k8s.io/v1alpha1), which clients read
// to get their tokens, so it is set in one place. --audience is needed only
// when there is no such object; if both are set they must agree, or the
// sidecar does not start. The object is read at start.
//
// Calls refused with PermissionDenied or Unauthenticated are logged at the
// default verbosity (user, namespace, snapshot and its role, reason; never
// the token), at most 20 lines at once and one per 200ms after that.
//
// Usage:
//
//	snapshotmetadata --driver=DRIVER [--audience=AUDIENCE] \
//	    [--listen=:50051] [--kubeconfig=PATH] \
//	    [--tls-cert-file=PATH --tls-private-key-file=PATH] [--self-signed-ca-file=PATH]
//
// Without --kubeconfig it uses the in-cluster configuration. Its identity
// needs what the upstream sidecar's ClusterRole grants, plus watch: create
// tokenreviews and subjectaccessreviews (system:auth-delegator); get, list
// and watch volumesnapshots and volumesnapshotcontents; get its driver's
// snapshotmetadataservice. Without a certificate it serves with a
// self-signed one (for a quickstart: it logs that it is not for
// production), valid for --tls-san (the Service DNS name that the
// SnapshotMetadataService object's address names) and written to
// --self-signed-ca-file if given, so that clients can trust it; a
// certificate from --tls-cert-file is reloaded when its files change. It
// prints "listening on ADDRESS" once it accepts connections, and stops
// gracefully on SIGINT or SIGTERM.
//
// Serving is hardened (serving.GRPCServerOptions): a connection cap
// (--max-connections), a handshake timeout, keepalive enforcement, idle
// connections closed, bounded streams and metadata. It logs like a
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
	"slices"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	snapshotclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	smsclient "github.com/kubernetes-csi/external-snapshot-metadata/client/clientset/versioned"

	"github.com/reviewauth/reviewauth/examples/internal/cli"
	"github.com/reviewauth/reviewauth/grpcauth"
	"github.com/reviewauth/reviewauth/serving"
)

func main() {
	cli.Main("snapshotmetadata", func(ctx context.Context) error {
		return run(ctx, os.Args[1:], deps{backend: FakeBackend{}}, func(addr net.Addr) {
			fmt.Printf("listening on %s\n", addr)
		})
	})
}

// config is the parsed command line.
type config struct {
	listen      string
	driver      string
	syncTimeout time.Duration
	flags       *cli.Flags
	review      *serving.Flags
}

func parseFlags(args []string, out io.Writer) (config, error) {
	c := config{flags: cli.New()}
	c.review = &c.flags.Review
	fs := pflag.NewFlagSet("snapshotmetadata", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.listen, "listen", ":50051", "TCP address to serve on")
	fs.StringVar(&c.driver, "driver", "", "name of the CSI driver whose snapshots this sidecar serves, and of its SnapshotMetadataService object (required)")
	c.flags.AddFlags(fs, true)                                // logging, --version, --metrics-listen, --max-connections, --kubeconfig, --audience, --authentication-*, --authorization-*, --tls-*, --self-signed-ca-file
	c.flags.AddRevocationFlags(fs, serving.RevocationFlags{}) // --revocation-*
	fs.DurationVar(&c.syncTimeout, "cache-sync-timeout", time.Minute, "how long to wait at start for the VolumeSnapshot and VolumeSnapshotContent caches; the sidecar does not start without them")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.flags.Version {
		return c, nil
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	case c.driver == "":
		return c, errors.New("--driver is required: it names the CSI driver and its SnapshotMetadataService object")
	case c.syncTimeout <= 0:
		return c, errors.New("--cache-sync-timeout must be positive")
	}
	if err := c.flags.TLS.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// explicitAudiences are the audiences given on the command line.
func (c *config) explicitAudiences() []string {
	var out []string
	for _, a := range append(slices.Clone(c.review.Authn.Audiences), c.review.Audiences...) {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// kubeconfig is the kubeconfig for reading snapshots and the
// SnapshotMetadataService object: --kubeconfig, else the authorization or
// authentication one; empty means in-cluster.
func (c *config) kubeconfig() string {
	for _, k := range []string{c.review.Kubeconfig, c.review.Authz.Client.Kubeconfig, c.review.Authn.Client.Kubeconfig} {
		if k != "" {
			return k
		}
	}
	return ""
}

// deps are what run uses besides the command line; tests replace them.
type deps struct {
	backend Backend
	// snapshots and services read VolumeSnapshot(Content)s and
	// SnapshotMetadataServices. Nil: built from the kubeconfig.
	snapshots snapshotclient.Interface
	services  smsclient.Interface
	// clock paces the refusal log. Nil: the real clock.
	clock clock.PassiveClock
}

// run serves until ctx is done, then stops gracefully. ready, if not nil,
// is called with the listening address once the server accepts connections.
func run(ctx context.Context, args []string, d deps, ready func(net.Addr)) error {
	c, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	if c.flags.Version {
		fmt.Println(cli.Version("snapshotmetadata"))
		return nil
	}
	if err := c.flags.ApplyLogging(); err != nil {
		return err
	}
	if d.snapshots == nil || d.services == nil {
		cfg, err := restConfig(c.kubeconfig())
		if err != nil {
			return err
		}
		if d.snapshots == nil {
			if d.snapshots, err = snapshotclient.NewForConfig(cfg); err != nil {
				return err
			}
		}
		if d.services == nil {
			if d.services, err = smsclient.NewForConfig(cfg); err != nil {
				return err
			}
		}
	}
	audience, err := resolveAudience(ctx, d.services, c.driver, c.explicitAudiences())
	if err != nil {
		return err
	}
	c.review.Authn.Audiences, c.review.Audiences = nil, []string{audience}
	started, err := c.flags.Start(ctx, "snapshotmetadata", os.Stdout)
	if err != nil {
		return err
	}
	defer started.Stop()
	built := started.Built

	snaps, stopSnapshots, err := startSnapshots(ctx, d.snapshots, c.driver, c.syncTimeout)
	if err != nil {
		return err
	}
	defer stopSnapshots()

	c.flags.TLS.SANs = append(c.flags.TLS.SANs, cli.SANsFor(c.listen)...)
	certs, err := c.flags.TLS.Certificates("snapshotmetadata", "")
	if err != nil {
		return err
	}
	defer certs.Close()
	if c.flags.TLS.CertFile == "" {
		klog.FromContext(ctx).Info("Serving with a self-signed certificate; set --tls-cert-file and --tls-private-key-file in production")
	}
	lis, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	defer lis.Close()

	refusals := newRefusalLog(klog.FromContext(ctx), d.clock)
	opts := grpcauth.Options{
		Authenticator: built.Authenticator,
		Authorizer:    namingAuthorizer{inner: built.Authorizer, refusals: refusals},
		Rules:         rules(snaps, refusals),
		Skip:          grpcauth.HealthAndReflection,
		Metrics:       built.Metrics,
	}
	ic, err := grpcauth.New(opts)
	if err != nil {
		return err
	}
	gopts := serving.GRPCOptions{Certificates: certs, MaxConnections: c.flags.MaxConnections, Metrics: built.Metrics}
	srv := grpc.NewServer(append(serving.GRPCServerOptions(gopts),
		grpc.ChainUnaryInterceptor(ic.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(logUnauthenticated(refusals), ic.StreamServerInterceptor()),
	)...)
	api.RegisterSnapshotMetadataServer(srv, &server{backend: d.backend, snapshots: snaps})
	healthSrv := health.NewServer()
	healthpb.RegisterHealthServer(srv, healthSrv)

	// Ready once the listener is open: connections queue until Serve.
	started.Health.SetReady(true)
	if ready != nil {
		ready(lis.Addr())
	}
	stopHealth := context.AfterFunc(ctx, func() {
		// Tell health checkers first; running streams get the shutdown
		// timeout to finish.
		started.Health.SetReady(false)
		healthSrv.Shutdown()
	})
	defer stopHealth()
	return serving.ServeGRPC(ctx, srv, lis, gopts)
}

// restConfig loads kubeconfig, or the in-cluster configuration when it is
// empty.
func restConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	// A refused target is confirmed with a live GET: leave room for a few.
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

// resolveAudience returns the audience the sidecar accepts tokens for: the
// spec.audience of the SnapshotMetadataService object named driver, which
// clients read to request their tokens. explicit, the --audience and
// --authentication-audiences values, must then be empty or that audience
// alone. Without the object (NotFound, which includes its CRD not being
// installed), explicit must name exactly one audience. Any other failure to
// read the object stops the start: the flags could not be checked.
func resolveAudience(ctx context.Context, services smsclient.Interface, driver string, explicit []string) (string, error) {
	sms, err := services.CbtV1alpha1().SnapshotMetadataServices().Get(ctx, driver, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if len(explicit) != 1 {
			return "", fmt.Errorf("there is no SnapshotMetadataService %q to read the audience from: --audience must name exactly one audience, got %q", driver, explicit)
		}
		klog.FromContext(ctx).Info("No SnapshotMetadataService object: using --audience; clients that follow the upstream contract will not find this sidecar", "driver", driver, "audience", explicit[0])
		return explicit[0], nil
	case err != nil:
		return "", fmt.Errorf("reading SnapshotMetadataService %q (it holds the audience): %w", driver, err)
	}
	audience := sms.Spec.Audience
	if audience == "" {
		return "", fmt.Errorf("SnapshotMetadataService %q has no spec.audience", driver)
	}
	for _, a := range explicit {
		if a != audience {
			return "", fmt.Errorf("--audience %q disagrees with spec.audience %q of SnapshotMetadataService %q: clients request tokens for the latter; set one or the other", a, audience, driver)
		}
	}
	return audience, nil
}
