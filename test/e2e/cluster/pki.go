package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CA is a certificate authority generated for one [Cluster]. The cluster's
// kube-apiserver trusts [Cluster.ClientCA] for client certificates
// (--client-ca-file): a certificate it issues authenticates as CN (user) with
// O (groups). CA is safe for concurrent use; its fields must not be modified.
type CA struct {
	// Cert is the CA certificate.
	Cert *x509.Certificate
	// Key is the CA private key (ECDSA P-256).
	Key crypto.Signer
	// CertPEM is Cert, PEM-encoded.
	CertPEM []byte
}

// NewCA generates a self-signed ECDSA P-256 CA named cn, valid for 24
// hours, for certificates a test serves or presents outside the cluster.
func NewCA(cn string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("cluster: generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("cluster: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("cluster: parse CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: pemEncode("CERTIFICATE", der)}, nil
}

// Pool returns a new pool holding only the CA certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// CertOptions describes a leaf certificate issued by [CA.Issue]. The zero
// value is a client certificate with an empty subject valid for one hour.
type CertOptions struct {
	// CommonName is the subject CN: the user name for client certificates.
	CommonName string
	// Organizations is the subject O: the groups for client certificates.
	Organizations []string
	// DNSNames and IPs are the SANs; set them for serving certificates.
	DNSNames []string
	IPs      []net.IP
	// Server adds the server-auth extended key usage; client auth is always set.
	Server bool
	// NotBefore defaults to one minute ago; NotAfter defaults to NotBefore+1h.
	// Set them to mint expired or not-yet-valid certificates.
	NotBefore, NotAfter time.Time
}

// Issue mints a leaf certificate signed by ca with a fresh ECDSA P-256 key
// and returns them PEM-encoded. It is safe for concurrent use.
func (ca *CA) Issue(o CertOptions) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: generate key: %w", err)
	}
	nb := o.NotBefore
	if nb.IsZero() {
		nb = time.Now().Add(-time.Minute)
	}
	na := o.NotAfter
	if na.IsZero() {
		na = nb.Add(time.Hour)
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if o.Server {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: o.CommonName, Organization: o.Organizations},
		NotBefore:    nb,
		NotAfter:     na,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: create certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: marshal key: %w", err)
	}
	return pemEncode("CERTIFICATE", der), pemEncode("PRIVATE KEY", kder), nil
}

// ClientCert mints a client certificate for user with groups and returns it
// ready for a tls.Config. It is safe for concurrent use.
func (ca *CA) ClientCert(user string, groups ...string) (tls.Certificate, error) {
	c, k, err := ca.Issue(CertOptions{CommonName: user, Organizations: groups})
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(c, k)
}

// newServiceAccountKey generates the RSA key the apiserver signs service
// account tokens with (RS256, like a default cluster).
func newServiceAccountKey() (keyPEM []byte, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("cluster: generate service account key: %w", err)
	}
	return pemEncode("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)), nil
}

func pemEncode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return n
}
