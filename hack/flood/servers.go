package main

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"os"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/reviewauth/reviewauth/internal/reliability"
)

// server is one of the servers a run attacks.
type server struct {
	name string
	grpc bool
	// start runs it as a process.
	start func(e *env) (*proc, error)
}

var servers = []*server{
	{name: "rbacproxy", start: func(e *env) (*proc, error) {
		return e.startProc("rbacproxy", e.bins["rbacproxy"], []string{
			"--secure-listen-address=127.0.0.1:0", "--upstream=" + e.info.Upstream, "--kubeconfig=" + e.info.Kubeconfig,
			"--auth-token-audiences=" + proxyAud, "--allow-paths=/metrics,/metrics/*",
			"--tls-cert-file=" + e.certFile, "--tls-private-key-file=" + e.keyFile,
		}, nil)
	}},
	{name: "kube-rbac-proxy", start: func(e *env) (*proc, error) {
		return e.startSelf(roleKRP)
	}},
	{name: "snapshotmetadata", grpc: true, start: func(e *env) (*proc, error) {
		return e.startProc("snapshotmetadata", e.bins["snapshotmetadata"], []string{
			"--listen=127.0.0.1:0", "--kubeconfig=" + e.info.Kubeconfig, "--driver=" + driver,
			"--tls-cert-file=" + e.certFile, "--tls-private-key-file=" + e.keyFile,
		}, nil)
	}},
	{name: "upstream-sidecar", grpc: true, start: func(e *env) (*proc, error) {
		return e.startSelf(roleUpstreamSidecar)
	}},
}

// startSelf runs this program as a peer.
func (e *env) startSelf(role string) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return e.startProc(role, self, nil, []string{envRole + "=" + role, envKubeconfig + "=" + e.info.Kubeconfig,
		envCert + "=" + e.certFile, envKey + "=" + e.keyFile, envUpstream + "=" + e.info.Upstream})
}

func serverNames() []string {
	var out []string
	for _, s := range servers {
		out = append(out, s.name)
	}
	return out
}

func serverByName(name string) *server {
	for _, s := range servers {
		if s.name == name {
			return s
		}
	}
	return nil
}

// kind is an attack.
type kind struct {
	name  string // for -kinds
	title string // for the table
	http  reliability.Attack
	grpc  reliability.Attack
}

var kinds = []*kind{
	{name: "idle", title: "idle TLS", http: reliability.HTTPIdle},
	{name: "slowloris", title: "slowloris", http: reliability.HTTPSlowloris},
	{name: "post", title: "body-less POST", http: reliability.HTTPBodylessPost},
	{name: "notls", title: "TCP without TLS", http: reliability.NoTLS, grpc: reliability.NoTLS},
	{name: "nopreface", title: "TLS without preface", http: reliability.NoPreface, grpc: reliability.NoPreface},
	{name: "preface", title: "preface, no streams", http: reliability.PrefaceOnly, grpc: reliability.PrefaceOnly},
	{name: "streams", title: "streams, no request", grpc: reliability.EmptyStreams},
	{name: "reset", title: "rapid reset", http: reliability.RapidReset, grpc: reliability.RapidReset},
	{name: "junk", title: "junk tokens", http: reliability.JunkHTTPAttack, grpc: reliability.JunkGRPCAttack},
}

func kindNames() []string {
	var out []string
	for _, k := range kinds {
		out = append(out, k.name)
	}
	return out
}

func kindByName(name string) *kind {
	for _, k := range kinds {
		if k.name == name {
			return k
		}
	}
	return nil
}

// kinds are the attacks that apply to s (gRPC servers refuse HTTP/1.1).
func (s *server) kinds() []*kind {
	var out []*kind
	for _, k := range kinds {
		if s.attack(k) != "" {
			out = append(out, k)
		}
	}
	return out
}

// attack is k for s, or "".
func (s *server) attack(k *kind) reliability.Attack {
	if s.grpc {
		return k.grpc
	}
	return k.http
}

const (
	grpcMethod = "/snapshotmetadata.SnapshotMetadata/GetMetadataAllocated"
	httpPath   = "/metrics"
)

// spec is the attack of kind k on s at addr.
func (e *env) spec(s *server, k *kind, addr string) reliability.AttackSpec {
	spec := reliability.AttackSpec{Addr: addr, Kind: s.attack(k), Path: httpPath}
	if s.grpc {
		spec.Path = grpcMethod
	}
	switch spec.Kind {
	case reliability.JunkHTTPAttack:
		spec.URL, spec.Genuine = "https://"+addr+httpPath, e.scraperToken
	case reliability.JunkGRPCAttack:
		spec.PerConn, spec.Genuine = 4, e.scraperToken
		spec.Namespace, spec.Name = snapshotNS, snapshotName
	}
	return spec
}

// clients are a server's legitimate clients: a call on a new connection,
// and one on a connection kept open (closed by closeFn).
func (e *env) clients(s *server, addr string) (newCall, keptCall func(ctx context.Context) error, closeFn func(), err error) {
	if !s.grpc {
		url := "https://" + addr + httpPath
		tlsCfg := &tls.Config{RootCAs: e.caPool}
		fresh := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}}
		kept := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
		get := func(c *http.Client) func(ctx context.Context) error {
			return reliability.HTTPGet(c, url, "Bearer "+e.scraperToken, http.StatusOK)
		}
		return get(fresh), get(kept), kept.CloseIdleConnections, nil
	}
	creds := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: e.caPool}))
	call := func(ctx context.Context, cc *grpc.ClientConn) error {
		tok, err := e.tokens["backup"].get(ctx)
		if err != nil {
			return err
		}
		st, err := api.NewSnapshotMetadataClient(cc).GetMetadataAllocated(ctx,
			&api.GetMetadataAllocatedRequest{SecurityToken: tok, Namespace: snapshotNS, SnapshotName: snapshotName})
		if err != nil {
			return err
		}
		for {
			if _, err := st.Recv(); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
	}
	keptConn, err := grpc.NewClient(addr, creds)
	if err != nil {
		return nil, nil, nil, err
	}
	newCall = func(ctx context.Context) error {
		cc, err := grpc.NewClient(addr, creds)
		if err != nil {
			return err
		}
		defer cc.Close()
		return call(ctx, cc)
	}
	keptCall = func(ctx context.Context) error { return call(ctx, keptConn) }
	return newCall, keptCall, func() { keptConn.Close() }, nil
}
