package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// DefaultAudience is the API server's own audience and issuer when
// [Options] leaves them empty, as in a kubeadm cluster.
const DefaultAudience = "https://kubernetes.default.svc"

// Options configures [Start]. The zero value starts the pinned binaries built
// by build.sh with the flags listed on [Start].
type Options struct {
	// KubeAPIServer and Etcd are the binaries' paths. Empty means
	// [Binaries] finds or builds them.
	KubeAPIServer, Etcd string
	// APIAudiences is --api-audiences; empty means [DefaultAudience].
	APIAudiences []string
	// Issuer is --service-account-issuer; empty means [DefaultAudience].
	Issuer string
	// ExtraAPIServerFlags are appended to the kube-apiserver command line;
	// a later flag overrides an earlier one.
	ExtraAPIServerFlags []string
	// StartTimeout bounds starting etcd and the API server until /readyz
	// answers ok, and each [Cluster.Restart]. Zero means 60s.
	StartTimeout time.Duration
	// Verbosity is kube-apiserver's --v. Zero means 1.
	Verbosity int
	// AuditUserGroups are groups whose users' requests the audit log
	// ([Cluster.AuditEvents]) holds, every one at level Metadata (who,
	// what, the answer's code and the authorization decision) and their
	// SubjectAccessReviews at level Request (the review's spec: whom they
	// asked about; a TokenReview's body, which holds a token, never).
	// "system:serviceaccounts:NS" selects the ServiceAccounts of the
	// namespace NS. Empty: only the resource.k8s.io API group is audited.
	AuditUserGroups []string
	// KeepDir keeps the temporary directory (logs, etcd data, keys) after
	// [Cluster.Close], for debugging; Close prints nothing, the directory is
	// [Cluster.Dir].
	KeepDir bool
}

// Cluster is a running etcd and kube-apiserver on 127.0.0.1. It is safe for
// concurrent use, except that [Cluster.Stop], [Cluster.Restart] and
// [Cluster.Close] must not race each other.
type Cluster struct {
	opts       Options
	dir        string
	url        string
	adminToken string
	servingCA  *CA
	clientCA   *CA
	admin      *rest.Config
	adminHTTP  *http.Client
	clientset  *kubernetes.Clientset
	etcd       *process
	apiserver  *process
	probe      *http.Client

	mapperMu sync.Mutex
	mapper   *restmapper.DeferredDiscoveryRESTMapper // see resourceFor
	restarts atomic.Int64

	closeOnce sync.Once
	closeErr  error
}

// Start starts etcd and kube-apiserver on free 127.0.0.1 ports with a fresh
// temporary directory, and returns once /readyz answers ok. ctx bounds only
// the start. On error nothing is left running and the error carries the
// tail of the API server's log.
//
// The API server runs with --etcd-servers, --bind-address=127.0.0.1,
// --advertise-address=127.0.0.1, --secure-port, --tls-cert-file (signed by a
// generated serving CA), --client-ca-file ([Cluster.ClientCA]),
// --token-auth-file (one admin token in group system:masters),
// --service-account-issuer, --service-account-signing-key-file and
// --service-account-key-file (a generated RSA 2048 key), --api-audiences,
// --authorization-mode=Node,RBAC and --enable-admission-plugins=NodeRestriction
// (added to the default plugins: the Node authorizer and NodeRestriction
// hold a node's requests to its node, as in a kubeadm cluster),
// --endpoint-reconciler-type=none,
// --service-cluster-ip-range=10.0.0.0/24, --permit-port-sharing,
// --profiling=false, and an audit log of the resource.k8s.io API group
// and of [Options.AuditUserGroups] ([Cluster.AuditEvents]), then
// [Options.ExtraAPIServerFlags].
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 60 * time.Second
	}
	if len(opts.APIAudiences) == 0 {
		opts.APIAudiences = []string{DefaultAudience}
	}
	if opts.Issuer == "" {
		opts.Issuer = DefaultAudience
	}
	if opts.Verbosity == 0 {
		opts.Verbosity = 1
	}
	if opts.KubeAPIServer == "" || opts.Etcd == "" {
		kube, etcd, err := Binaries(ctx)
		if err != nil {
			return nil, err
		}
		if opts.KubeAPIServer == "" {
			opts.KubeAPIServer = kube
		}
		if opts.Etcd == "" {
			opts.Etcd = etcd
		}
	}

	sweepStaleDirs()
	dir, err := os.MkdirTemp("", tempPrefix)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c := &Cluster{opts: opts, dir: dir}
	if err := os.WriteFile(c.path(ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("cluster: %w", err)
	}
	defer func() {
		if err != nil {
			tail := c.LogTail(40)
			_ = c.Close()
			if tail != "" {
				err = fmt.Errorf("%w\n--- kube-apiserver log tail ---\n%s", err, tail)
			}
		}
	}()

	if err := c.writeFiles(); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdClient := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	etcdPeer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	c.url = "https://127.0.0.1:" + strconv.Itoa(ports[2])

	c.etcd = &process{
		name:    "etcd",
		path:    opts.Etcd,
		logPath: filepath.Join(dir, "etcd.log"),
		args: []string{
			"--name=e2e",
			"--data-dir=" + filepath.Join(dir, "etcd"),
			"--listen-client-urls=" + etcdClient,
			"--advertise-client-urls=" + etcdClient,
			"--listen-peer-urls=" + etcdPeer,
			"--initial-advertise-peer-urls=" + etcdPeer,
			"--initial-cluster=e2e=" + etcdPeer,
			"--unsafe-no-fsync=true",
			"--log-level=warn",
		},
	}
	c.apiserver = &process{
		name:    "kube-apiserver",
		path:    opts.KubeAPIServer,
		logPath: filepath.Join(dir, "kube-apiserver.log"),
		args: append([]string{
			"--etcd-servers=" + etcdClient,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(ports[2]),
			"--permit-port-sharing=true",
			"--cert-dir=" + filepath.Join(dir, "certs"),
			"--tls-cert-file=" + c.path("serving.crt"),
			"--tls-private-key-file=" + c.path("serving.key"),
			"--client-ca-file=" + c.path("client-ca.crt"),
			"--token-auth-file=" + c.path("tokens.csv"),
			"--service-account-issuer=" + opts.Issuer,
			"--service-account-signing-key-file=" + c.path("sa.key"),
			"--service-account-key-file=" + c.path("sa.key"),
			"--api-audiences=" + strings.Join(opts.APIAudiences, ","),
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			"--endpoint-reconciler-type=none",
			"--service-cluster-ip-range=10.0.0.0/24",
			"--profiling=false",
			"--v=" + strconv.Itoa(opts.Verbosity),
		}, append(c.auditFlags(), opts.ExtraAPIServerFlags...)...),
	}

	c.admin = &rest.Config{
		Host:            c.url,
		BearerToken:     c.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.servingCA.CertPEM},
		QPS:             -1, // setup traffic is never client-throttled
		Timeout:         30 * time.Second,
		UserAgent:       "reviewauth-e2e-admin",
	}
	if c.adminHTTP, err = rest.HTTPClientFor(c.admin); err != nil {
		return nil, fmt.Errorf("cluster: admin client: %w", err)
	}
	if c.clientset, err = kubernetes.NewForConfigAndClient(c.admin, c.adminHTTP); err != nil {
		return nil, fmt.Errorf("cluster: admin clientset: %w", err)
	}
	c.probe = &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.servingCA.Pool()}, DisableKeepAlives: true},
	}

	sctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if err := c.etcd.start(); err != nil {
		return nil, err
	}
	if err := c.waitReady(sctx, c.etcd, etcdClient+"/health", ""); err != nil {
		return nil, err
	}
	if err := c.startAPIServer(sctx); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) path(name string) string { return filepath.Join(c.dir, name) }

// writeFiles generates the keys, certificates and token file.
func (c *Cluster) writeFiles() error {
	var err error
	if c.servingCA, err = NewCA("reviewauth-e2e-serving-ca"); err != nil {
		return err
	}
	if c.clientCA, err = NewCA("reviewauth-e2e-client-ca"); err != nil {
		return err
	}
	servingCert, servingKey, err := c.servingCA.Issue(CertOptions{
		CommonName: "kube-apiserver",
		DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPs:        []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		Server:     true,
		NotAfter:   time.Now().Add(24 * time.Hour),
	})
	if err != nil {
		return err
	}
	saKey, err := newServiceAccountKey()
	if err != nil {
		return err
	}
	c.adminToken = randomHex(32)
	files := map[string][]byte{
		"serving.crt":    servingCert,
		"serving.key":    servingKey,
		"serving-ca.crt": c.servingCA.CertPEM,
		"client-ca.crt":  c.clientCA.CertPEM,
		"sa.key":         saKey,
		// token,user,uid,"group1,group2"
		"tokens.csv":        []byte(c.adminToken + `,admin,admin-uid,"system:masters"` + "\n"),
		"audit-policy.yaml": []byte(auditPolicy(c.opts.AuditUserGroups)),
	}
	for name, b := range files {
		if err := os.WriteFile(c.path(name), b, 0o600); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	return nil
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	if err := c.apiserver.start(); err != nil {
		return err
	}
	if err := c.waitReady(ctx, c.apiserver, c.url+"/readyz", c.adminToken); err != nil {
		c.apiserver.stop(0)
		return err
	}
	return nil
}

// waitReady polls url every 100ms until it answers 200, the process exits,
// or ctx ends.
func (c *Cluster) waitReady(ctx context.Context, p *process, url, token string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.probe.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-p.exited():
			return fmt.Errorf("cluster: %s exited before ready: %v", p.name, p.exitErr())
		case <-ctx.Done():
			return fmt.Errorf("cluster: %s not ready at %s (last: %s): %w", p.name, url, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// URL returns the API server's base URL, https://127.0.0.1:PORT. It stays
// the same across [Cluster.Restart].
func (c *Cluster) URL() string { return c.url }

// Dir returns the cluster's temporary directory: logs, etcd data, keys.
func (c *Cluster) Dir() string { return c.dir }

// APIAudiences returns the API server's --api-audiences.
func (c *Cluster) APIAudiences() []string { return append([]string(nil), c.opts.APIAudiences...) }

// Issuer returns the API server's --service-account-issuer.
func (c *Cluster) Issuer() string { return c.opts.Issuer }

// ServingCA returns the CA that signed the API server's serving
// certificate; every config from this package already trusts it.
func (c *Cluster) ServingCA() *CA { return c.servingCA }

// ClientCA returns the CA of --client-ca-file: certificates it issues
// authenticate as CN (user) and O (groups), see [CA.Issue] and
// [Cluster.UserConfig].
func (c *Cluster) ClientCA() *CA { return c.clientCA }

// AdminConfig returns a new copy of a config for the admin user (group
// system:masters, token authentication) with client-side throttling off and
// a 30s request timeout. The caller may modify the copy.
func (c *Cluster) AdminConfig() *rest.Config { return rest.CopyConfig(c.admin) }

// Clientset returns the admin clientset built from [Cluster.AdminConfig].
func (c *Cluster) Clientset() *kubernetes.Clientset { return c.clientset }

// AnonymousConfig returns a config that trusts the serving CA and carries
// no credential, with client-go's default throttling (5 QPS, burst 10) and a
// 30s timeout. Build on it for other credentials.
func (c *Cluster) AnonymousConfig() *rest.Config {
	return &rest.Config{
		Host:            c.url,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.servingCA.CertPEM},
		Timeout:         30 * time.Second,
	}
}

// TokenConfig returns [Cluster.AnonymousConfig] with a bearer token.
func (c *Cluster) TokenConfig(token string) *rest.Config {
	cfg := c.AnonymousConfig()
	cfg.BearerToken = token
	return cfg
}

// UserConfig returns [Cluster.AnonymousConfig] with a fresh client
// certificate from [Cluster.ClientCA] for user with groups: the API server
// authenticates it as that user (plus system:authenticated).
func (c *Cluster) UserConfig(user string, groups ...string) (*rest.Config, error) {
	cert, key, err := c.clientCA.Issue(CertOptions{CommonName: user, Organizations: groups})
	if err != nil {
		return nil, err
	}
	cfg := c.AnonymousConfig()
	cfg.CertData, cfg.KeyData = cert, key
	return cfg, nil
}

// Running reports whether the API server process is running (it may not
// be ready yet).
func (c *Cluster) Running() bool { return c.apiserver != nil && c.apiserver.running() }

// Stop stops the API server (SIGTERM, then SIGKILL after 10s) and waits for
// it to exit, leaving etcd running: every request fails until
// [Cluster.Restart]. Stopping a stopped API server is a no-op. Use
// [Cluster.Kill] for an abrupt outage and [Cluster.Close] for teardown.
func (c *Cluster) Stop() { c.apiserver.stop(10 * time.Second) }

// Kill stops the API server with SIGKILL, with no graceful shutdown.
func (c *Cluster) Kill() { c.apiserver.stop(0) }

// Restart stops the API server if it runs, starts it again with the same
// data, ports, keys and flags, and waits until /readyz answers ok, within
// [Options.StartTimeout] and ctx. Tokens issued before keep validating.
// The API server's metrics counters start again from zero.
func (c *Cluster) Restart(ctx context.Context) error {
	c.restarts.Add(1)
	c.Stop()
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	if err := c.startAPIServer(ctx); err != nil {
		return fmt.Errorf("%w\n--- kube-apiserver log tail ---\n%s", err, c.LogTail(40))
	}
	return nil
}

// Restarts returns how many times [Cluster.Restart] was called. After a
// restart the API server's RBAC authorizer refuses everything for a
// moment, until its caches are filled.
func (c *Cluster) Restarts() int64 { return c.restarts.Load() }

// LogTail returns the last n lines of the API server's log (all runs,
// each starting with a "=== cluster: starting" line).
func (c *Cluster) LogTail(n int) string {
	if c.apiserver == nil {
		return ""
	}
	return c.apiserver.tail(n)
}

// EtcdLogTail returns the last n lines of etcd's log.
func (c *Cluster) EtcdLogTail(n int) string {
	if c.etcd == nil {
		return ""
	}
	return c.etcd.tail(n)
}

// Close stops the API server and etcd (process groups, SIGTERM then
// SIGKILL) and removes the temporary directory unless [Options.KeepDir].
// It is idempotent and safe to call on a partly started cluster.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		if c.apiserver != nil {
			c.apiserver.stop(5 * time.Second)
		}
		if c.etcd != nil {
			c.etcd.stop(5 * time.Second)
		}
		if c.probe != nil {
			c.probe.CloseIdleConnections()
		}
		if c.adminHTTP != nil {
			utilnet.CloseIdleConnectionsFor(c.adminHTTP.Transport)
		}
		if !c.opts.KeepDir && c.dir != "" {
			if err := os.RemoveAll(c.dir); err != nil {
				c.closeErr = errors.Join(c.closeErr, fmt.Errorf("cluster: %w", err))
			}
		}
	})
	return c.closeErr
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("cluster: free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

const (
	tempPrefix = "reviewauth-e2e-"
	ownerFile  = "owner.pid"
)

// sweepStaleDirs removes temporary directories left by test binaries that
// died without Close (SIGKILL, go test -timeout). Their etcd and API server
// died with them (Pdeathsig).
func sweepStaleDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue // not ours, or still being created
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) == nil {
			continue // owner alive (or unknown): leave it
		}
		_ = os.RemoveAll(d)
	}
}
