package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserverapi "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Environment of the peers' processes.
const (
	envKubeconfig = "FLOOD_KUBECONFIG"
	envCert       = "FLOOD_CERT"
	envKey        = "FLOOD_KEY"
	envUpstream   = "FLOOD_UPSTREAM"
)

// serveKRP serves as kube-rbac-proxy v0.21 does with
// --secure-listen-address, --upstream, --auth-token-audiences,
// --allow-paths=/metrics,/metrics/* and certificate files: an http.Server
// whose only settings are the handler and a TLS config (TLS 1.2 or later,
// client certificates requested), HTTP/2 configured with x/net's
// http2.ConfigureServer (IdleTimeout 90 s, 100 streams, 256 KiB frames and
// per-stream buffers), served on tls.NewListener; no connection cap, no
// header, read, write or idle timeout for HTTP/1. Requests go through
// k8s.io/apiserver's delegating authenticator (TokenReview, cache 2 m,
// the default webhook retry backoff) and authorizer (SubjectAccessReview,
// 5 m allowed / 30 s denied), with client-go's default rate limit (5 QPS,
// burst 10: kube-rbac-proxy sets none unless --kube-api-qps), then to the
// upstream through httputil's reverse proxy.
func serveKRP(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(envKubeconfig))
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:               &apiserverapi.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                2 * time.Minute,
		TokenAccessReviewClient: client.AuthenticationV1(),
		APIAudiences:            authenticator.Audiences{proxyAud},
		WebhookRetryBackoff:     options.DefaultAuthWebhookRetryBackoff(),
	}.New()
	if err != nil {
		return err
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       options.DefaultAuthWebhookRetryBackoff(),
	}.New()
	if err != nil {
		return err
	}
	up, err := url.Parse(os.Getenv(envUpstream))
	if err != nil {
		return err
	}
	proxy := httputil.NewSingleHostReverseProxy(up)
	allowPaths := []string{"/metrics", "/metrics/*"}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allowed := false
		for _, p := range allowPaths {
			if ok, _ := path.Match(p, r.URL.Path); ok {
				allowed = true
				break
			}
		}
		if !allowed {
			http.NotFound(w, r)
			return
		}
		ctx := authenticator.WithAudiences(r.Context(), authenticator.Audiences{proxyAud})
		res, ok, err := authn.AuthenticateRequest(r.WithContext(ctx))
		if err != nil || !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		verb := "get"
		if r.Method != http.MethodGet {
			verb = "create"
		}
		decision, _, err := authz.Authorize(r.Context(), authorizer.AttributesRecord{User: res.User, Verb: verb, Path: r.URL.Path})
		if err != nil || decision != authorizer.DecisionAllow {
			http.Error(w, "Forbidden", http.StatusForbidden)
			return
		}
		r.Header.Del("Authorization")
		proxy.ServeHTTP(w, r)
	})
	mux := http.NewServeMux()
	mux.Handle("/", handler)
	cert, err := tls.LoadX509KeyPair(os.Getenv(envCert), os.Getenv(envKey))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, ClientAuth: tls.RequestClientCert}}
	const maxSize = 256 * 1024
	if err := http2.ConfigureServer(srv, &http2.Server{
		IdleTimeout: 90 * time.Second, MaxConcurrentStreams: 100, MaxReadFrameSize: maxSize,
		MaxUploadBufferPerStream: maxSize, MaxUploadBufferPerConnection: maxSize * 100,
	}); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(tls.NewListener(ln, srv.TLSConfig)); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveUpstreamSidecar serves as external-snapshot-metadata v0.2.0's
// sidecar does: grpc.NewServer with grpc.Creds (TLS, no client
// certificates) and nothing else, grpc.health.v1, and the SnapshotMetadata
// API whose calls each read the SnapshotMetadataService for the audience
// (--audience unset), send a TokenReview and a SubjectAccessReview (get
// volumesnapshots in the namespace), and read the VolumeSnapshot and its
// content, all live, before streaming the metadata (here three messages,
// as our sidecar's fake backend sends for one snapshot). One departure:
// the upstream's API client runs at client-go's 5 QPS (burst 10), which
// alone would hold our legitimate clients' 20 calls a second (5 API calls
// each) to one a second; it runs unthrottled here, so that the row
// measures grpc-go's serving, not the client's rate limit.
func serveUpstreamSidecar(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(envKubeconfig))
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = -1, 0
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(os.Getenv(envCert), os.Getenv(envKey))
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.NoClientCert})))
	api.RegisterSnapshotMetadataServer(srv, &upstreamSidecar{client: client})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	go func() { <-ctx.Done(); srv.Stop() }()
	return srv.Serve(ln)
}

type upstreamSidecar struct {
	api.UnimplementedSnapshotMetadataServer
	client kubernetes.Interface
}

func (s *upstreamSidecar) GetMetadataAllocated(req *api.GetMetadataAllocatedRequest, stream grpc.ServerStreamingServer[api.GetMetadataAllocatedResponse]) error {
	ctx := stream.Context()
	if req.GetSecurityToken() == "" || req.GetNamespace() == "" || req.GetSnapshotName() == "" {
		return status.Error(codes.InvalidArgument, "invalid request")
	}
	// The audience, from the SnapshotMetadataService, on every call.
	var sms struct {
		Spec struct {
			Audience string `json:"audience"`
		} `json:"spec"`
	}
	if err := s.get(ctx, "/apis/cbt.storage.k8s.io/v1alpha1/snapshotmetadataservices/"+driver, &sms); err != nil {
		return status.Errorf(codes.Internal, "failed to find the SnapshotMetadataService: %v", err)
	}
	tr, err := s.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: req.GetSecurityToken(), Audiences: []string{sms.Spec.Audience}}}, metav1.CreateOptions{})
	if err != nil {
		return status.Errorf(codes.Internal, "failed to authenticate: %v", err)
	}
	if !tr.Status.Authenticated {
		return status.Error(codes.Unauthenticated, "unauthenticated user")
	}
	u := tr.Status.User
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := s.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: req.GetNamespace(), Verb: "get", Group: snapGroup, Resource: "volumesnapshots"}}},
		metav1.CreateOptions{})
	if err != nil {
		return status.Errorf(codes.Internal, "failed to authorize: %v", err)
	}
	if !sar.Status.Allowed {
		return status.Error(codes.PermissionDenied, "permission denied")
	}
	var vs struct {
		Status struct {
			BoundVolumeSnapshotContentName string `json:"boundVolumeSnapshotContentName"`
		} `json:"status"`
	}
	if err := s.get(ctx, "/apis/"+snapGroup+"/v1/namespaces/"+req.GetNamespace()+"/volumesnapshots/"+req.GetSnapshotName(), &vs); err != nil {
		return status.Errorf(codes.Unavailable, "failed to get VolumeSnapshot: %v", err)
	}
	var vsc map[string]any
	if err := s.get(ctx, "/apis/"+snapGroup+"/v1/volumesnapshotcontents/"+vs.Status.BoundVolumeSnapshotContentName, &vsc); err != nil {
		return status.Errorf(codes.Unavailable, "failed to get VolumeSnapshotContent: %v", err)
	}
	for page := range int64(3) {
		var blocks []*api.BlockMetadata
		for i := range int64(14) {
			blocks = append(blocks, &api.BlockMetadata{ByteOffset: (page*14 + i) << 20, SizeBytes: 1 << 20})
		}
		if err := stream.Send(&api.GetMetadataAllocatedResponse{BlockMetadataType: api.BlockMetadataType_FIXED_LENGTH,
			VolumeCapacityBytes: 64 << 20, BlockMetadata: blocks}); err != nil {
			return err
		}
	}
	return nil
}

// get reads the object at path into v.
func (s *upstreamSidecar) get(ctx context.Context, path string, v any) error {
	body, err := s.client.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
	if err != nil {
		return err
	}
	return jsonUnmarshal(body, v)
}
