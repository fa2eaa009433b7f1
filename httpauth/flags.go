package httpauth

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/client-go/util/cert"
)

// Flags configures client certificate authentication from the command
// line, with the flag name k8s.io/apiserver uses. The zero value accepts no
// client certificates.
type Flags struct {
	// ClientCAFile is a PEM bundle of the CAs that sign client
	// certificates. Empty means client certificates are not accepted.
	ClientCAFile string
}

// AddFlags registers --client-ca-file on fs.
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.ClientCAFile, "client-ca-file", f.ClientCAFile,
		"If set, a client certificate signed by one of the authorities in this file is authenticated: its CommonName is the user, its Organizations the groups.")
}

// Validate reports a CA file that cannot be read or holds no certificate,
// naming the flag.
func (f *Flags) Validate() error {
	if f.ClientCAFile == "" {
		return nil
	}
	raw, err := os.ReadFile(f.ClientCAFile)
	if err != nil {
		return fmt.Errorf("--client-ca-file: %w", err)
	}
	if _, err := cert.ParseCertsPEM(raw); err != nil {
		return fmt.Errorf("--client-ca-file: %s: %w", f.ClientCAFile, err)
	}
	return nil
}

// ClientCertificates returns the client certificate authenticator the flags
// describe (see [NewClientCertAuthenticator]), or nil when --client-ca-file
// is unset.
func (f *Flags) ClientCertificates(opts ClientCertOptions) (authenticator.Request, error) {
	if f.ClientCAFile == "" {
		return nil, nil
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	pool, err := cert.NewPool(f.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("--client-ca-file: %w", err)
	}
	opts.ClientCA = pool
	return NewClientCertAuthenticator(opts)
}
