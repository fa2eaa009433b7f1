package serving

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	certutil "k8s.io/client-go/util/cert"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/reviewauth/reviewauth/httpauth"
)

// TLSFlags configure a server's certificates from the command line, with
// k8s.io/apiserver's (and kube-rbac-proxy's) flag names. The zero value
// serves a self-signed certificate with TLS 1.2 or later and Go's cipher
// suites. AddFlags registers the flags, [TLSFlags.Certificates] builds the
// [Certificates] they describe.
type TLSFlags struct {
	// CertFile and KeyFile are the serving certificate (PEM, with its
	// intermediates after it) and its key. Both or neither; neither means
	// a self-signed certificate, made at start, for SANs.
	CertFile, KeyFile string
	// MinVersion is the lowest TLS version accepted, by crypto/tls constant
	// name (VersionTLS12, VersionTLS13). Empty means VersionTLS12.
	MinVersion string
	// CipherSuites are the TLS 1.2 cipher suites accepted, by crypto/tls
	// constant name. Empty means Go's defaults. (TLS 1.3 suites are not
	// configurable.)
	CipherSuites []string
	// SANs are the DNS names and IP addresses the self-signed certificate
	// is valid for, besides localhost, the host name and the loopback
	// addresses: the Service DNS name clients dial, for instance. Ignored
	// with CertFile.
	SANs []string
	// SelfSignedCAFile, if not empty, is where the self-signed certificate
	// is written (PEM), for clients to trust.
	SelfSignedCAFile string
}

// AddFlags registers --tls-cert-file, --tls-private-key-file,
// --tls-min-version, --tls-cipher-suites, --tls-san and
// --self-signed-ca-file on fs.
func (f *TLSFlags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.CertFile, "tls-cert-file", f.CertFile,
		"File containing the x509 certificate for HTTPS (CA certificates, if any, concatenated after it). Reloaded when it changes. A self-signed certificate is made when unset.")
	fs.StringVar(&f.KeyFile, "tls-private-key-file", f.KeyFile, "File containing the private key of --tls-cert-file. Reloaded with it.")
	fs.StringVar(&f.MinVersion, "tls-min-version", f.MinVersion,
		"Minimum TLS version accepted. One of "+strings.Join(cliflag.TLSPossibleVersions(), ", ")+". Default VersionTLS12.")
	fs.StringSliceVar(&f.CipherSuites, "tls-cipher-suites", f.CipherSuites,
		"Comma-separated list of TLS 1.2 cipher suites, by Go constant name (https://golang.org/pkg/crypto/tls/#pkg-constants). Default: Go's.")
	fs.StringSliceVar(&f.SANs, "tls-san", f.SANs,
		"DNS names and IP addresses the self-signed serving certificate is valid for, besides localhost, the host name and the loopback addresses (such as the Service DNS name clients dial). Ignored with --tls-cert-file.")
	fs.StringVar(&f.SelfSignedCAFile, "self-signed-ca-file", f.SelfSignedCAFile,
		"Where to write the self-signed serving certificate (PEM), for clients to trust. Ignored with --tls-cert-file.")
}

// Validate reports flags that go together but are not, and unknown TLS
// versions and cipher suites, naming the flag.
func (f *TLSFlags) Validate() error {
	var errs []error
	if (f.CertFile == "") != (f.KeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file go together"))
	}
	if _, err := cliflag.TLSVersion(f.MinVersion); err != nil {
		errs = append(errs, fmt.Errorf("--tls-min-version: %w", err))
	}
	if _, err := cliflag.TLSCipherSuites(f.CipherSuites); err != nil {
		errs = append(errs, fmt.Errorf("--tls-cipher-suites: %w", err))
	}
	for _, s := range f.SANs {
		if s == "" || strings.ContainsAny(s, " /,") {
			errs = append(errs, fmt.Errorf("--tls-san: %q is neither a DNS name nor an IP address", s))
		}
	}
	return errors.Join(errs...)
}

// Certificates returns the [Certificates] the flags describe: name is
// the self-signed certificate's subject, clientCAFile the client CA bundle
// (httpauth.Flags.ClientCAFile; empty for none).
func (f *TLSFlags) Certificates(name, clientCAFile string) (*Certificates, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	minVersion, _ := cliflag.TLSVersion(f.MinVersion)
	suites, _ := cliflag.TLSCipherSuites(f.CipherSuites)
	return NewCertificates(CertificateOptions{
		CertFile: f.CertFile, KeyFile: f.KeyFile, ClientCAFile: clientCAFile,
		MinVersion: minVersion, CipherSuites: suites,
		SelfSigned: SelfSigned{Name: name, Hosts: f.SANs, CAFile: f.SelfSignedCAFile},
	})
}

// CertificateOptions configures [NewCertificates].
type CertificateOptions struct {
	// CertFile and KeyFile are the serving certificate and key (PEM). They
	// are watched and reloaded when they change, with k8s.io/apiserver's
	// dynamic certificate controller: a new pair is used from the next TLS
	// handshake on; a pair that does not load (half written, mismatched)
	// is ignored and the previous one kept. Empty means a self-signed
	// certificate, see SelfSigned.
	CertFile, KeyFile string
	// ClientCAFile is a PEM bundle of the CAs that sign client
	// certificates, watched and reloaded like the serving certificate. The
	// handshake asks for a client certificate, naming these CAs, but does
	// not require or verify one: [Certificates.ClientCertificates]
	// authenticates it, so that clients without one may still present a
	// bearer token. Empty means client certificates are not asked for.
	ClientCAFile string
	// MinVersion is the lowest TLS version accepted. Zero means TLS 1.2.
	MinVersion uint16
	// CipherSuites are the TLS 1.2 cipher suites accepted. Nil means Go's.
	CipherSuites []uint16
	// SelfSigned describes the certificate made when CertFile is empty.
	SelfSigned SelfSigned
}

// SelfSigned describes a self-signed serving certificate: an ECDSA P-256
// key and a certificate valid for a year, for localhost, the host name, the
// loopback addresses and Hosts. It is its own CA, so that a client can
// trust it by itself.
type SelfSigned struct {
	// Name is the certificate's subject common name, with " (self-signed)"
	// appended.
	Name string
	// Hosts are further DNS names and IP addresses it is valid for.
	Hosts []string
	// CAFile, if not empty, is where the certificate is written (PEM).
	CAFile string
}

// Certificates are a server's certificates: the serving certificate and,
// optionally, the CAs of client certificates, both reloaded from their
// files when they change (k8s.io/apiserver's
// dynamiccertificates.DynamicServingCertificateController, fed by
// DynamicCertKeyPairContent and DynamicFileCAContent). They are loaded
// once, synchronously, by [NewCertificates]; they are watched while at
// least one [Certificates.Run] runs, which [HTTPServer.Serve] and
// [ServeGRPC] do for as long as they serve. When the last Run returns, the
// controllers stop for good: Certificates serve one lifetime, after which
// they keep serving what they last loaded. Those controllers hold a few
// goroutines from construction on (their work queues'); Run's end, or
// [Certificates.Close] for Certificates never run, ends them. Certificates
// are safe for concurrent use.
type Certificates struct {
	controller *dynamiccertificates.DynamicServingCertificateController
	serving    dynamiccertificates.CertKeyContentProvider
	clientCA   *dynamiccertificates.DynamicFileCAContent
	base       *tls.Config
	selfSigned []byte // DER of the self-signed certificate, if one was made

	caListeners fanout

	mu      sync.Mutex
	running int
	done    bool // the controllers have stopped for good
	stop    context.CancelFunc
	stopped chan struct{}
}

// NewCertificates loads the certificates opts describe, or makes the
// self-signed one, and reports what cannot be loaded.
func NewCertificates(opts CertificateOptions) (*Certificates, error) {
	c := &Certificates{}
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		return nil, errors.New("serving: CertFile and KeyFile go together")
	}
	if opts.CertFile != "" {
		content, err := dynamiccertificates.NewDynamicServingContentFromFiles("serving-cert", opts.CertFile, opts.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("serving: loading the serving certificate: %w", err)
		}
		c.serving = content
	} else {
		certPEM, keyPEM, der, err := selfSign(opts.SelfSigned)
		if err != nil {
			return nil, err
		}
		if opts.SelfSigned.CAFile != "" {
			if err := os.WriteFile(opts.SelfSigned.CAFile, certPEM, 0o644); err != nil {
				return nil, fmt.Errorf("serving: writing the self-signed certificate: %w", err)
			}
		}
		content, err := dynamiccertificates.NewStaticCertKeyContent("self-signed", certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("serving: %w", err)
		}
		c.serving, c.selfSigned = content, der
	}
	minVersion := opts.MinVersion
	if minVersion == 0 {
		minVersion = tls.VersionTLS12
	}
	c.base = &tls.Config{MinVersion: minVersion, CipherSuites: opts.CipherSuites}
	var clientCA dynamiccertificates.CAContentProvider
	if opts.ClientCAFile != "" {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", opts.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("serving: loading the client CA: %w", err)
		}
		c.clientCA, clientCA = ca, ca
		// Ask for a client certificate, naming these CAs, but neither
		// require nor verify one in the handshake: the authenticator
		// verifies it (answering 401 for a bad one), and clients without
		// one can still present a token.
		c.base.ClientAuth = tls.RequestClientCert
		ca.AddListener(&c.caListeners)
	}
	c.controller = dynamiccertificates.NewDynamicServingCertificateController(c.base, clientCA, c.serving, nil, nil)
	if c.clientCA != nil {
		c.clientCA.AddListener(c.controller)
	}
	c.serving.AddListener(c.controller)
	if err := c.controller.RunOnce(); err != nil {
		return nil, fmt.Errorf("serving: %w", err)
	}
	return c, nil
}

// SelfSignedCertificate returns the self-signed certificate (DER), or nil
// when the certificate is loaded from files.
func (c *Certificates) SelfSignedCertificate() []byte { return c.selfSigned }

// ServerConfig returns the TLS configuration of a server that negotiates
// nextProtos with ALPN (such as "h2" and "http/1.1"): every handshake gets
// the certificates as they are then.
func (c *Certificates) ServerConfig(nextProtos ...string) *tls.Config {
	protos := append([]string(nil), nextProtos...)
	return &tls.Config{
		MinVersion: c.base.MinVersion,
		NextProtos: protos,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			cfg, err := c.controller.GetConfigForClient(hello)
			if err != nil {
				return nil, err
			}
			// GetConfigForClient returns a copy; set the protocols of this
			// server on it.
			cfg.NextProtos = protos
			return cfg, nil
		},
	}
}

// ClientCertificates returns the authenticator of client certificates
// signed by the client CA (see [httpauth.NewClientCertAuthenticator], with
// opts; its ClientCA is set here), or nil when there is no client CA. When
// the CA file changes, the next request is verified against the new CAs
// and nothing verified against the old ones is reused: the authenticator,
// and its cache, are rebuilt.
func (c *Certificates) ClientCertificates(opts httpauth.ClientCertOptions) (authenticator.Request, error) {
	if c.clientCA == nil {
		return nil, nil
	}
	r := &reloadingCertAuthenticator{ca: c.clientCA, opts: opts}
	if err := r.reload(); err != nil {
		return nil, err
	}
	c.caListeners.add(r)
	return r, nil
}

// Run watches the certificate files until ctx is done, and returns when it
// no longer does. Runs may overlap: the files are watched while any runs,
// by one set of controllers, stopped with the last Run.
func (c *Certificates) Run(ctx context.Context) {
	c.acquire(ctx)
	<-ctx.Done()
	c.release()
}

// Close stops the controllers if no Run is running; it is for
// Certificates that were never served, and is a no-op otherwise. Run does
// not watch the files after Close.
func (c *Certificates) Close() {
	c.mu.Lock()
	if c.running > 0 || c.done {
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.Run(ctx)
}

func (c *Certificates) acquire(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running++
	if c.running > 1 || c.done {
		return
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopped := make(chan struct{})
	c.stop, c.stopped = cancel, stopped
	var wg sync.WaitGroup
	if r, ok := c.serving.(dynamiccertificates.ControllerRunner); ok {
		wg.Go(func() { r.Run(runCtx, 1) })
	}
	if c.clientCA != nil {
		wg.Go(func() { c.clientCA.Run(runCtx, 1) })
	}
	wg.Go(func() { c.controller.Run(1, runCtx.Done()) })
	go func() { wg.Wait(); close(stopped) }()
}

func (c *Certificates) release() {
	c.mu.Lock()
	c.running--
	if c.running > 0 {
		c.mu.Unlock()
		return
	}
	stop, stopped := c.stop, c.stopped
	c.stop, c.stopped = nil, nil
	c.done = true
	c.mu.Unlock()
	if stop != nil {
		stop()
		<-stopped
	}
}

// fanout passes the client CA controller's change notifications on to
// the authenticators built since; it is safe for concurrent use, which
// the controller's own listener list is not.
type fanout struct {
	mu        sync.Mutex
	listeners []dynamiccertificates.Listener
}

func (f *fanout) add(l dynamiccertificates.Listener) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listeners = append(f.listeners, l)
}

func (f *fanout) Enqueue() {
	f.mu.Lock()
	ls := append([]dynamiccertificates.Listener(nil), f.listeners...)
	f.mu.Unlock()
	for _, l := range ls {
		l.Enqueue()
	}
}

// reloadingCertAuthenticator is httpauth's client certificate
// authenticator, rebuilt (with an empty cache) whenever the CA bundle
// changes.
type reloadingCertAuthenticator struct {
	ca      *dynamiccertificates.DynamicFileCAContent
	opts    httpauth.ClientCertOptions
	current atomic.Pointer[authenticator.Request]
}

func (r *reloadingCertAuthenticator) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	return (*r.current.Load()).AuthenticateRequest(req)
}

// Enqueue is called by the CA controller when the bundle changed.
func (r *reloadingCertAuthenticator) Enqueue() {
	// The controller stores only bundles that parse as this does (it
	// logs the ones it refuses); should one not, the previous
	// authenticator stays.
	_ = r.reload()
}

func (r *reloadingCertAuthenticator) reload() error {
	pool, err := certutil.NewPoolFromBytes(r.ca.CurrentCABundleContent())
	if err != nil {
		return fmt.Errorf("serving: client CA: %w", err)
	}
	opts := r.opts
	opts.ClientCA = pool
	a, err := httpauth.NewClientCertAuthenticator(opts)
	if err != nil {
		return err
	}
	r.current.Store(&a)
	return nil
}

// selfSign makes the self-signed certificate s describes.
func selfSign(s SelfSigned) (certPEM, keyPEM, der []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("serving: generating a key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("serving: generating a serial: %w", err)
	}
	name := s.Name
	if name == "" {
		name = "reviewauth"
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name + " (self-signed)"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // so that clients can trust it as its own CA
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if h, err := os.Hostname(); err == nil && h != "" && h != "localhost" {
		tmpl.DNSNames = append(tmpl.DNSNames, h)
	}
	for _, h := range s.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("serving: self-signing: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("serving: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	return certPEM, keyPEM, der, nil
}
