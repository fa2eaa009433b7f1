package httpauth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// testCA is a certificate authority for tests: a root, or an intermediate
// signed by its parent.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serial atomic.Int64

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sign(t testing.TB, tmpl *x509.Certificate, pub *ecdsa.PublicKey, parent *testCA, selfKey *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	parentCert, parentKey := tmpl, selfKey
	if parent != nil {
		parentCert, parentKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, pub, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newRootCA returns a self-signed root valid from notBefore to notAfter.
func newRootCA(t testing.TB, name string, notBefore, notAfter time.Time) *testCA {
	key := newKey(t)
	c := sign(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}, &key.PublicKey, nil, key)
	return &testCA{cert: c, key: key}
}

// intermediate returns a CA signed by ca.
func (ca *testCA) intermediate(t testing.TB, name string, notBefore, notAfter time.Time) *testCA {
	key := newKey(t)
	c := sign(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}, &key.PublicKey, ca, nil)
	return &testCA{cert: c, key: key}
}

// client returns a client certificate with CN cn and O groups, signed by ca.
func (ca *testCA) client(t testing.TB, cn string, groups []string, notBefore, notAfter time.Time) (*x509.Certificate, *ecdsa.PrivateKey) {
	key := newKey(t)
	c := sign(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: groups},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, &key.PublicKey, ca, nil)
	return c, key
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// withCerts returns r as if it had arrived over TLS with chain presented.
func withCerts(r *http.Request, chain ...*x509.Certificate) *http.Request {
	r.TLS = &tls.ConnectionState{HandshakeComplete: true, PeerCertificates: chain}
	return r
}
