// Command backupclient is a backup application's client for the Kubernetes
// SnapshotMetadata gRPC API, such as the snapshotmetadata example sidecar.
//
// It gets a token for its service account from the TokenRequest API, with
// the sidecar's audience, through a reviewauth grpcauth.TokenRequestSource
// that caches it and refreshes it before it expires, and puts it in the
// request's security_token field, as the API requires. It prints the block
// metadata, one "offset size" line per block.
//
// Usage:
//
//	backupclient --address=HOST:PORT --ca-file=PATH --audience=AUDIENCE \
//	    --service-account-namespace=NS --service-account=NAME \
//	    --namespace=NS --snapshot=NAME [--base-snapshot-id=ID] [--kubeconfig=PATH]
//
// With --base-snapshot-id it asks for the blocks changed since that
// snapshot (GetMetadataDelta), otherwise for the allocated blocks
// (GetMetadataAllocated). Without --kubeconfig it uses the in-cluster
// configuration.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/reviewauth/reviewauth/grpcauth"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "backupclient:", err)
		os.Exit(1)
	}
}

type config struct {
	kubeconfig, address, caFile, audience string
	saNamespace, saName                   string
	namespace, snapshot, baseSnapshotID   string
	maxResults                            int
	lifetime                              time.Duration
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("backupclient", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig for the TokenRequest API; in-cluster configuration when empty")
	fs.StringVar(&c.address, "address", "", "address of the SnapshotMetadata service (required)")
	fs.StringVar(&c.caFile, "ca-file", "", "CA certificate (PEM) that verifies the service; the system roots when empty")
	fs.StringVar(&c.audience, "audience", "", "audience of the service's tokens (required)")
	fs.StringVar(&c.saNamespace, "service-account-namespace", "default", "namespace of the service account to get tokens for")
	fs.StringVar(&c.saName, "service-account", "", "service account to get tokens for (required)")
	fs.StringVar(&c.namespace, "namespace", "", "namespace of the VolumeSnapshots (required)")
	fs.StringVar(&c.snapshot, "snapshot", "", "VolumeSnapshot name (required)")
	fs.StringVar(&c.baseSnapshotID, "base-snapshot-id", "", "CSI handle of the base snapshot, for changed blocks")
	fs.IntVar(&c.maxResults, "max-results", 0, "blocks per response; 0 lets the service decide")
	fs.DurationVar(&c.lifetime, "token-lifetime", 10*time.Minute, "requested token lifetime")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for _, req := range []struct{ v, name string }{
		{c.address, "--address"}, {c.audience, "--audience"}, {c.saName, "--service-account"},
		{c.namespace, "--namespace"}, {c.snapshot, "--snapshot"},
	} {
		if req.v == "" {
			return c, fmt.Errorf("%s is required", req.name)
		}
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return c, nil
}

func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", path)
}

func run(ctx context.Context, args []string, out io.Writer) error {
	c, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	cfg, err := restConfig(c.kubeconfig)
	if err != nil {
		return fmt.Errorf("API server configuration: %w", err)
	}
	tokens, err := grpcauth.NewTokenRequestSourceForConfig(cfg, grpcauth.TokenRequestOptions{
		Namespace:      c.saNamespace,
		ServiceAccount: c.saName,
		Audiences:      []string{c.audience},
		Lifetime:       c.lifetime,
	})
	if err != nil {
		return err
	}

	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.caFile != "" {
		pemBytes, err := os.ReadFile(c.caFile)
		if err != nil {
			return err
		}
		tlsConfig.RootCAs = x509.NewCertPool()
		if !tlsConfig.RootCAs.AppendCertsFromPEM(pemBytes) {
			return fmt.Errorf("%s holds no PEM certificate", c.caFile)
		}
	}
	conn, err := grpc.NewClient(c.address, grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig)))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := api.NewSnapshotMetadataClient(conn)

	// The token goes in the message, not in the metadata: the API says so.
	// A TokenRequestSource never hands out an expired token; a long backup
	// asks it again for each call and gets the refreshed one.
	tok, err := tokens.TokenContext(ctx)
	if err != nil {
		return fmt.Errorf("getting a token: %w", err)
	}
	token := tok.AccessToken
	if c.baseSnapshotID == "" {
		stream, err := client.GetMetadataAllocated(ctx, &api.GetMetadataAllocatedRequest{
			SecurityToken: token, Namespace: c.namespace, SnapshotName: c.snapshot, MaxResults: int32(c.maxResults),
		})
		if err != nil {
			return err
		}
		return printBlocks(out, stream.Recv)
	}
	stream, err := client.GetMetadataDelta(ctx, &api.GetMetadataDeltaRequest{
		SecurityToken: token, Namespace: c.namespace, BaseSnapshotId: c.baseSnapshotID,
		TargetSnapshotName: c.snapshot, MaxResults: int32(c.maxResults),
	})
	if err != nil {
		return err
	}
	return printBlocks(out, stream.Recv)
}

// response is what both RPCs stream.
type response interface {
	GetBlockMetadata() []*api.BlockMetadata
}

// printBlocks writes one "offset size" line per block until the stream ends.
func printBlocks[T response](out io.Writer, recv func() (T, error)) error {
	for {
		resp, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, b := range resp.GetBlockMetadata() {
			if _, err := fmt.Fprintf(out, "%d %d\n", b.GetByteOffset(), b.GetSizeBytes()); err != nil {
				return err
			}
		}
	}
}
