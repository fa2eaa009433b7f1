package grpcauth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/credentials/local"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/reviewauth/reviewauth/grpcauth"
)

func staticToken(tok string) oauth2.TokenSource {
	return oauth2.StaticTokenSource(&oauth2.Token{AccessToken: tok})
}

// serveUnix serves the test service on a Unix socket with creds and returns
// the socket's address.
func serveUnix(t *testing.T, opts grpcauth.Options, creds credentials.TransportCredentials) string {
	t.Helper()
	// Unix socket paths are short: t.TempDir() can be too long.
	dir, err := os.MkdirTemp("", "grpcauth")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(creds),
		grpc.UnaryInterceptor(mustNew(t, opts).UnaryServerInterceptor()),
		grpc.StreamInterceptor(mustNew(t, opts).StreamServerInterceptor()))
	srv.RegisterService(&svcDesc, nil)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return "unix://" + sock
}

func TestPerRPCCredentialsOverUnixSocketWithLocalCredentials(t *testing.T) {
	t.Parallel()
	authn := &countingAuthn{}
	opts := testOptions(nil)
	opts.Authenticator = authn
	addr := serveUnix(t, opts, local.NewCredentials())

	tests := []struct {
		name  string
		creds credentials.TransportCredentials
		src   oauth2.TokenSource
		want  codes.Code
	}{
		{name: "local credentials", creds: local.NewCredentials(), src: staticToken(aliceToken), want: codes.OK},
		{name: "token source error", creds: local.NewCredentials(), src: grpcauth.TokenSourceFunc(func(context.Context) (*oauth2.Token, error) {
			return nil, errors.New("no token today")
		}), want: codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(tt.creds), grpc.WithPerRPCCredentials(grpcauth.PerRPCCredentials(tt.src)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			resp := new(wrapperspb.StringValue)
			err = conn.Invoke(t.Context(), methodGet, newRequest("", "ns", "a"), resp)
			if status.Code(err) != tt.want {
				t.Fatalf("Get() = %v; want code %v", err, tt.want)
			}
			if tt.want == codes.OK && resp.GetValue() != "alice md=" {
				t.Errorf("Get() = %q; want %q", resp.GetValue(), "alice md=")
			}
		})
	}
}

func TestPerRPCCredentialsRefuseInsecureTransport(t *testing.T) {
	t.Parallel()
	authn := &countingAuthn{}
	opts := testOptions(nil)
	opts.Authenticator = authn
	// insecure.NewCredentials has NoSecurity: the token must not be sent.
	conn := serve(t, opts)
	_ = conn.Close()
	addr := serveUnix(t, opts, insecure.NewCredentials())
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(grpcauth.PerRPCCredentials(staticToken(aliceToken))))
	if err == nil {
		defer c.Close()
		err = c.Invoke(t.Context(), methodGet, newRequest("", "ns", "a"), new(wrapperspb.StringValue))
	}
	if err == nil {
		t.Fatalf("Get() with a token over an insecure transport = nil; want an error")
	}
	if strings.Contains(err.Error(), aliceToken) {
		t.Errorf("error %q contains the token", err)
	}
	if n := authn.n.Load(); n != 0 {
		t.Errorf("server authenticated %d tokens; want 0: the token must not travel in clear", n)
	}
}

func TestRoundTripper(t *testing.T) {
	t.Parallel()
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
	}))
	defer srv.Close()

	tests := []struct {
		name    string
		src     oauth2.TokenSource
		header  string
		want    string
		wantErr bool
	}{
		{name: "sets bearer", src: staticToken("tok-1"), want: "Bearer tok-1"},
		{name: "keeps an explicit header", src: staticToken("tok-1"), header: "Bearer mine", want: "Bearer mine"},
		{name: "source error sends nothing", src: grpcauth.TokenSourceFunc(func(context.Context) (*oauth2.Token, error) {
			return nil, errors.New("no token")
		}), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got = nil
			client := &http.Client{Transport: grpcauth.RoundTripper(tt.src, srv.Client().Transport)}
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			resp, err := client.Do(req)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Do() = %v; want error %v", err, tt.wantErr)
			}
			if err == nil {
				_ = resp.Body.Close()
			}
			if tt.wantErr {
				if len(got) != 0 {
					t.Errorf("server saw %d requests; want 0", len(got))
				}
				return
			}
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("server saw Authorization %q; want [%q]", got, tt.want)
			}
			if tt.header == "" && req.Header.Get("Authorization") != "" {
				t.Errorf("RoundTrip modified the caller's request")
			}
		})
	}
}

// TestRoundTripperRedirects follows real redirects of a real http.Client
// between two real servers: the token never reaches a host the caller did
// not send its request to.
func TestRoundTripperRedirects(t *testing.T) {
	t.Parallel()
	type seen struct{ server, path, auth string }
	var mu sync.Mutex
	var got []seen
	record := func(server string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got = append(got, seen{server, r.URL.Path, r.Header.Get("Authorization")})
			mu.Unlock()
		}
	}
	second := httptest.NewServer(record("second"))
	defer second.Close()
	// first (http) and firstTLS (https) redirect /to-second/<code> to
	// second, and /to-self/<code> to their own /final.
	redirector := func(name string) http.Handler {
		mux := http.NewServeMux()
		mux.HandleFunc("/final", record(name))
		mux.HandleFunc("/to-second/{code}", func(w http.ResponseWriter, r *http.Request) {
			code, _ := strconv.Atoi(r.PathValue("code"))
			http.Redirect(w, r, second.URL+"/landed", code)
		})
		mux.HandleFunc("/to-self/{code}", func(w http.ResponseWriter, r *http.Request) {
			code, _ := strconv.Atoi(r.PathValue("code"))
			http.Redirect(w, r, "/final", code)
		})
		return mux
	}
	first := httptest.NewServer(redirector("first"))
	defer first.Close()
	firstTLS := httptest.NewTLSServer(redirector("firstTLS"))
	defer firstTLS.Close()
	host := func(s *httptest.Server) string { u, _ := url.Parse(s.URL); return u.Host }

	tests := []struct {
		name string
		from *httptest.Server
		path string
		opts []grpcauth.CredentialsOption
		want seen
	}{
		// Both servers are 127.0.0.1: only the port differs, which
		// http.Client's own rule would let through.
		{name: "302 to another server", from: first, path: "/to-second/302", want: seen{"second", "/landed", ""}},
		{name: "307 to another server", from: first, path: "/to-second/307", want: seen{"second", "/landed", ""}},
		{name: "308 to another server", from: first, path: "/to-second/308", want: seen{"second", "/landed", ""}},
		{name: "302 to the same server", from: first, path: "/to-self/302", want: seen{"first", "/final", "Bearer tok-1"}},
		{name: "307 to the same server", from: first, path: "/to-self/307", want: seen{"first", "/final", "Bearer tok-1"}},
		{name: "308 to the same server", from: first, path: "/to-self/308", want: seen{"first", "/final", "Bearer tok-1"}},
		{name: "https to the same server", from: firstTLS, path: "/to-self/307", want: seen{"firstTLS", "/final", "Bearer tok-1"}},
		{name: "OnlyTo the first: redirect to another", from: first, path: "/to-second/307", opts: []grpcauth.CredentialsOption{grpcauth.OnlyTo(host(first))}, want: seen{"second", "/landed", ""}},
		{name: "OnlyTo both: redirect allowed", from: first, path: "/to-second/307", opts: []grpcauth.CredentialsOption{grpcauth.OnlyTo(host(first), host(second))}, want: seen{"second", "/landed", "Bearer tok-1"}},
		{name: "OnlyTo both: https to http downgrade", from: firstTLS, path: "/to-second/307", opts: []grpcauth.CredentialsOption{grpcauth.OnlyTo(host(firstTLS), host(second))}, want: seen{"second", "/landed", ""}},
		{name: "OnlyTo another: not even the first request", from: first, path: "/final", opts: []grpcauth.CredentialsOption{grpcauth.OnlyTo(host(second))}, want: seen{"first", "/final", ""}},
		{name: "OnlyTo nothing", from: first, path: "/final", opts: []grpcauth.CredentialsOption{grpcauth.OnlyTo()}, want: seen{"first", "/final", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			got = nil
			mu.Unlock()
			// firstTLS's client trusts its certificate and can reach
			// the plain servers too.
			client := &http.Client{Transport: grpcauth.RoundTripper(staticToken("tok-1"), firstTLS.Client().Transport, tt.opts...)}
			resp, err := client.Get(tt.from.URL + tt.path)
			if err != nil {
				t.Fatalf("Get() = %v", err)
			}
			_ = resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("requests seen = %+v; want [%+v]", got, tt.want)
			}
		})
	}
}

// hostsTransport answers every request in memory: it records the host and
// Authorization header, and redirects with 307 to the URL in the request's
// "next" query parameter, if any.
type hostsTransport struct {
	mu   sync.Mutex
	seen []string
}

func (h *hostsTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.seen = append(h.seen, r.URL.Scheme+"://"+r.URL.Host+" "+r.Header.Get("Authorization"))
	h.mu.Unlock()
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}
	if next := r.URL.Query().Get("next"); next != "" {
		resp.StatusCode = http.StatusTemporaryRedirect
		resp.Header.Set("Location", next)
	}
	return resp, nil
}

// TestRoundTripperHosts checks host matching on names no test server can
// have: subdomains, case, default ports, IPv6, through http.Client's
// redirect handling.
func TestRoundTripperHosts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		url   string // redirects to its "next" parameter
		opts  []grpcauth.CredentialsOption
		token []bool // whether each request in the chain carries the token
	}{
		{name: "subdomain is another host", url: "https://a.example/?next=https://x.a.example/", token: []bool{true, false}},
		{name: "parent domain is another host", url: "https://x.a.example/?next=https://a.example/", token: []bool{true, false}},
		{name: "host names ignore case", url: "https://a.example/?next=https://A.EXAMPLE/", token: []bool{true, true}},
		{name: "explicit default port is the same", url: "https://a.example/?next=https://a.example:443/", token: []bool{true, true}},
		{name: "another port is another server", url: "https://a.example/?next=https://a.example:8443/", token: []bool{true, false}},
		{name: "downgrade on the same host", url: "https://a.example/?next=http://a.example:443/", token: []bool{true, false}},
		{name: "upgrade to the default https port is another port", url: "http://a.example/?next=https://a.example/", token: []bool{true, false}},
		{name: "OnlyTo without port", url: "https://a.example/", opts: []grpcauth.CredentialsOption{grpcauth.OnlyTo("A.example")}, token: []bool{true}},
		{name: "OnlyTo with the default port", url: "https://a.example/", opts: []grpcauth.CredentialsOption{grpcauth.OnlyTo("a.example:443")}, token: []bool{true}},
		{name: "OnlyTo without port, target on another port", url: "https://a.example:8443/", opts: []grpcauth.CredentialsOption{grpcauth.OnlyTo("a.example")}, token: []bool{false}},
		{name: "OnlyTo http default port", url: "http://a.example/", opts: []grpcauth.CredentialsOption{grpcauth.OnlyTo("a.example:80")}, token: []bool{true}},
		{name: "OnlyTo IPv6", url: "https://[::1]:8443/", opts: []grpcauth.CredentialsOption{grpcauth.OnlyTo("[::1]:8443")}, token: []bool{true}},
		{name: "OnlyTo malformed entries match nothing", url: "https://a.example/", opts: []grpcauth.CredentialsOption{grpcauth.OnlyTo("https://a.example", "a.example/", "a.example:https", "")}, token: []bool{false}},
		{name: "OnlyTo subdomain is another host", url: "https://x.a.example/", opts: []grpcauth.CredentialsOption{grpcauth.OnlyTo("a.example")}, token: []bool{false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := &hostsTransport{}
			client := &http.Client{Transport: grpcauth.RoundTripper(staticToken("tok-1"), base, tt.opts...)}
			resp, err := client.Get(tt.url)
			if err != nil {
				t.Fatalf("Get() = %v", err)
			}
			_ = resp.Body.Close()
			if len(base.seen) != len(tt.token) {
				t.Fatalf("requests = %q; want %d", base.seen, len(tt.token))
			}
			for i, want := range tt.token {
				if has := strings.HasSuffix(base.seen[i], " Bearer tok-1"); has != want {
					t.Errorf("request %d = %q; want token %v", i, base.seen[i], want)
				}
			}
		})
	}
}

// TestRoundTripperRedirectChainLimit: a redirect is traced back to the
// request the caller made through at most 100 redirects; a longer chain,
// and a response without its request, get no token.
func TestRoundTripperRedirectChainLimit(t *testing.T) {
	t.Parallel()
	chain := func(n int) *http.Request {
		req, _ := http.NewRequest(http.MethodGet, "https://a.example/", nil)
		for range n {
			next, _ := http.NewRequest(http.MethodGet, "https://a.example/", nil)
			next.Response = &http.Response{Request: req}
			req = next
		}
		return req
	}
	orphan, _ := http.NewRequest(http.MethodGet, "https://a.example/", nil)
	orphan.Response = &http.Response{}
	for _, tt := range []struct {
		name string
		req  *http.Request
		want bool
	}{
		{name: "100 redirects", req: chain(100), want: true},
		{name: "101 redirects", req: chain(101), want: false},
		{name: "response without request", req: orphan, want: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := &hostsTransport{}
			resp, err := grpcauth.RoundTripper(staticToken("tok-1"), base).RoundTrip(tt.req)
			if err != nil {
				t.Fatalf("RoundTrip() = %v", err)
			}
			_ = resp.Body.Close()
			if has := strings.HasSuffix(base.seen[0], " Bearer tok-1"); has != tt.want {
				t.Errorf("request = %q; want token %v", base.seen[0], tt.want)
			}
		})
	}
}

// selfSignedTLS returns server credentials for a certificate naming
// "a.example" and "b.example", and client credentials that trust it.
func selfSignedTLS(t *testing.T) (server, client credentials.TransportCredentials) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "grpcauth test"},
		DNSNames:              []string{"a.example", "b.example"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	server = credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS13})
	client = credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13})
	return server, client
}

// serveTLS serves the test service over TLS on a bufconn listener, counting
// the tokens it is asked to authenticate, and returns a dialer for it.
func serveTLS(t *testing.T, creds credentials.TransportCredentials) (*countingAuthn, func(context.Context, string) (net.Conn, error)) {
	t.Helper()
	authn := &countingAuthn{}
	opts := testOptions(nil)
	opts.Authenticator = authn
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(mustNew(t, opts).UnaryServerInterceptor()))
	srv.RegisterService(&svcDesc, nil)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return authn, func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }
}

// TestPerRPCCredentialsBoundToOneServer: one credentials value used for
// connections to two servers sends its token to one of them only.
func TestPerRPCCredentialsBoundToOneServer(t *testing.T) {
	t.Parallel()
	serverCreds, clientCreds := selfSignedTLS(t)
	countA, dialA := serveTLS(t, serverCreds)
	countB, dialB := serveTLS(t, serverCreds)
	dial := func(t *testing.T, target string, dialer func(context.Context, string) (net.Conn, error), creds credentials.PerRPCCredentials) *grpc.ClientConn {
		conn, err := grpc.NewClient("passthrough:///"+target, grpc.WithContextDialer(dialer),
			grpc.WithTransportCredentials(clientCreds), grpc.WithPerRPCCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	get := func(conn *grpc.ClientConn) error {
		return conn.Invoke(t.Context(), methodGet, newRequest("", "ns", "a"), new(wrapperspb.StringValue))
	}

	tests := []struct {
		name       string
		opts       []grpcauth.CredentialsOption
		targetA    string
		wantA      codes.Code
		wantB      codes.Code
		wantTokens [2]int32 // tokens A and B received
	}{
		{name: "first server wins", targetA: "a.example", wantA: codes.OK, wantB: codes.Unauthenticated, wantTokens: [2]int32{2, 0}},
		{name: "OnlyTo b", opts: []grpcauth.CredentialsOption{grpcauth.OnlyTo("b.example")}, targetA: "a.example", wantA: codes.Unauthenticated, wantB: codes.OK, wantTokens: [2]int32{0, 1}},
		{name: "OnlyTo with the default port", opts: []grpcauth.CredentialsOption{grpcauth.OnlyTo("a.example:443")}, targetA: "a.example", wantA: codes.OK, wantB: codes.Unauthenticated, wantTokens: [2]int32{2, 0}},
		{name: "OnlyTo names the port", opts: []grpcauth.CredentialsOption{grpcauth.OnlyTo("a.example:8443", "b.example")}, targetA: "a.example:8443", wantA: codes.OK, wantB: codes.OK, wantTokens: [2]int32{2, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := [2]int32{countA.n.Load(), countB.n.Load()}
			creds := grpcauth.PerRPCCredentials(staticToken(aliceToken), tt.opts...)
			a := dial(t, tt.targetA, dialA, creds)
			b := dial(t, "b.example", dialB, creds)
			if err := get(a); status.Code(err) != tt.wantA {
				t.Errorf("Get() on %s = %v; want code %v", tt.targetA, err, tt.wantA)
			}
			if err := get(b); status.Code(err) != tt.wantB {
				t.Errorf("Get() on b.example = %v; want code %v", err, tt.wantB)
			} else if err != nil && strings.Contains(err.Error(), aliceToken) {
				t.Errorf("Get() on b.example = %v; the error contains the token", err)
			}
			// The binding holds on later calls too.
			if err := get(a); status.Code(err) != tt.wantA {
				t.Errorf("second Get() on %s = %v; want code %v", tt.targetA, err, tt.wantA)
			}
			got := [2]int32{countA.n.Load() - before[0], countB.n.Load() - before[1]}
			if got != tt.wantTokens {
				t.Errorf("tokens received by A, B = %v; want %v", got, tt.wantTokens)
			}
		})
	}
}

// TestPerRPCCredentialsBoundToOneUnixSocket: over Unix sockets every server
// has the authority "localhost"; the credentials tell them apart by path.
func TestPerRPCCredentialsBoundToOneUnixSocket(t *testing.T) {
	t.Parallel()
	countA, countB := &countingAuthn{}, &countingAuthn{}
	optsA, optsB := testOptions(nil), testOptions(nil)
	optsA.Authenticator, optsB.Authenticator = countA, countB
	addrA := serveUnix(t, optsA, local.NewCredentials())
	addrB := serveUnix(t, optsB, local.NewCredentials())
	creds := grpcauth.PerRPCCredentials(staticToken(aliceToken))
	for _, c := range []struct {
		addr string
		want codes.Code
	}{{addrA, codes.OK}, {addrB, codes.Unauthenticated}, {addrA, codes.OK}} {
		conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(local.NewCredentials()), grpc.WithPerRPCCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		err = conn.Invoke(t.Context(), methodGet, newRequest("", "ns", "a"), new(wrapperspb.StringValue))
		_ = conn.Close()
		if status.Code(err) != c.want {
			t.Errorf("Get() on %s = %v; want code %v", c.addr, err, c.want)
		}
	}
	if a, b := countA.n.Load(), countB.n.Load(); a != 2 || b != 0 {
		t.Errorf("tokens received by A, B = %d, %d; want 2, 0", a, b)
	}
}
