package httpauth

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/client-go/util/cert"

	"github.com/reviewauth/reviewauth/internal/pathmatch"
)

// Flags configures the HTTP side of authentication and authorization from
// the command line, with the flag names k8s.io/apiserver uses:
// --client-ca-file and --authorization-always-allow-paths. The zero value
// accepts no client certificates and has no always-allow paths. AddFlags
// registers the flags, Validate checks them; pass AlwaysAllowPaths to
// [Options] and use [Flags.ClientCertificates] for its ClientCertificates.
// A Flags is not safe for concurrent use: flags are parsed once, before
// anything runs.
type Flags struct {
	// ClientCAFile is a PEM bundle of the CAs that sign client
	// certificates. Empty means client certificates are not accepted.
	ClientCAFile string

	// AlwaysAllowPaths is --authorization-always-allow-paths, for
	// [Options].AlwaysAllowPaths: paths served to GET and HEAD requests
	// without a credential (as the anonymous user) and without
	// authorization, exact or with a trailing "*". Default none: apiserver
	// allows /healthz, /readyz and /livez by default; here it is opt-in.
	// Stricter than apiserver, whose path authorizer allows every method
	// on these paths: here other methods are authenticated and authorized.
	AlwaysAllowPaths []string
}

// AddFlags registers --client-ca-file and --authorization-always-allow-paths
// on fs.
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.ClientCAFile, "client-ca-file", f.ClientCAFile,
		"If set, a client certificate signed by one of the authorities in this file is authenticated: its CommonName is the user, its Organizations the groups.")
	fs.StringSliceVar(&f.AlwaysAllowPaths, "authorization-always-allow-paths", f.AlwaysAllowPaths,
		"Paths served to GET and HEAD requests without authorization, exact or ending in '*', e.g. /healthz,/readyz,/livez. A request without a credential is served as system:anonymous; a presented credential must be valid. Other methods are authorized as on any path (stricter than kube-apiserver, which allows every method on these paths). Default none.")
}

// Validate reports a CA file that cannot be read or holds no certificate,
// and a malformed always-allow path, naming the flag.
func (f *Flags) Validate() error {
	var errs []error
	if _, err := pathmatch.New("always-allow path", f.AlwaysAllowPaths); err != nil {
		errs = append(errs, fmt.Errorf("--authorization-always-allow-paths: %w", err))
	}
	if f.ClientCAFile != "" {
		if raw, err := os.ReadFile(f.ClientCAFile); err != nil {
			errs = append(errs, fmt.Errorf("--client-ca-file: %w", err))
		} else if _, err := cert.ParseCertsPEM(raw); err != nil {
			errs = append(errs, fmt.Errorf("--client-ca-file: %s: %w", f.ClientCAFile, err))
		}
	}
	return errors.Join(errs...)
}

// ClientCertificates returns the client certificate authenticator the flags
// describe (see [NewClientCertAuthenticator]), or nil when --client-ca-file
// is unset.
func (f *Flags) ClientCertificates(opts ClientCertOptions) (authenticator.Request, error) {
	if f.ClientCAFile == "" {
		return nil, nil
	}
	pool, err := cert.NewPool(f.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("--client-ca-file: %w", err)
	}
	opts.ClientCA = pool
	return NewClientCertAuthenticator(opts)
}
