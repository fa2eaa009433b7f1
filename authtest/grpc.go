package authtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"time"

	"google.golang.org/grpc/credentials"
)

// testServerNames are the names the certificate of TransportCredentials
// is valid for.
var testServerNames = []string{"bufnet", "localhost", "127.0.0.1", "::1"}

// TransportCredentials returns gRPC transport credentials for a test server
// and its clients: TLS 1.3, with a throwaway self-signed certificate, valid
// for a day for the names "bufnet" (the authority of a client dialing
// "passthrough:///bufnet", the usual target of a bufconn test), "localhost",
// 127.0.0.1 and ::1, that only the returned client credentials
// trust. Give server to grpc.NewServer (grpc.Creds) and client to
// grpc.NewClient (grpc.WithTransportCredentials), over a
// google.golang.org/grpc/test/bufconn listener or loopback TCP.
//
// They exist so that tests can use call credentials that require
// transport security, such as grpcauth.PerRPCCredentials and grpc's
// credentials/oauth, exactly as production code does, instead of setting
// the authorization metadata by hand over insecure credentials (which such
// call credentials refuse, and should): nothing in the code under test is
// weakened for the test. The client verifies the server's certificate
// against the call's authority, so dial a target whose authority is one of
// those names ("passthrough:///bufnet" with a bufconn dialer).
//
// Every call makes a new key and certificate (a few hundred microseconds);
// make one pair per test server. The credentials are safe for concurrent
// use. An error means no key or certificate could be made.
func TransportCredentials() (server, client credentials.TransportCredentials, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("authtest: TransportCredentials: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("authtest: TransportCredentials: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "authtest gRPC server", Organization: []string{"authtest"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // its own root, as httptest's certificate
	}
	for _, n := range testServerNames {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("authtest: TransportCredentials: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("authtest: TransportCredentials: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	server = credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}},
		MinVersion:   tls.VersionTLS13,
	})
	client = credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13})
	return server, client, nil
}
