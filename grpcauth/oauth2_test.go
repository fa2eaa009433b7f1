package grpcauth_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/oauth"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/grpcauth"
)

// The token sources are oauth2.TokenSources, so that grpc's
// credentials/oauth and client-go's transport take them without glue.
var (
	_ oauth2.TokenSource            = (*grpcauth.FileTokenSource)(nil)
	_ grpcauth.ContextTokenSource   = (*grpcauth.TokenRequestSource)(nil)
	_ grpcauth.ContextTokenSource   = grpcauth.TokenSourceFunc(nil)
	_ credentials.PerRPCCredentials = oauth.TokenSource{TokenSource: (*grpcauth.FileTokenSource)(nil)}
	_ credentials.PerRPCCredentials = oauth.TokenSource{TokenSource: (*grpcauth.TokenRequestSource)(nil)}
	_                               = transport.TokenSourceWrapTransport((*grpcauth.FileTokenSource)(nil))
	_                               = transport.TokenSourceWrapTransport((*grpcauth.TokenRequestSource)(nil))
)

// serveOverTLS starts the test service behind opts' interceptors over bufconn
// with authtest.TransportCredentials, and returns a function that dials
// it with more dial options (call credentials).
func serveOverTLS(t *testing.T, opts grpcauth.Options) func(...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	serverCreds, clientCreds, err := authtest.TransportCredentials()
	if err != nil {
		t.Fatal(err)
	}
	ic := mustNew(t, opts)
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.Creds(serverCreds),
		grpc.UnaryInterceptor(ic.UnaryServerInterceptor()), grpc.StreamInterceptor(ic.StreamServerInterceptor()))
	srv.RegisterService(&svcDesc, nil)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return func(dopts ...grpc.DialOption) *grpc.ClientConn {
		t.Helper()
		dopts = append(dopts, grpc.WithTransportCredentials(clientCreds),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
		conn, err := grpc.NewClient("passthrough:///bufnet", dopts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
}

// TestTokenSourcesExpiry: Token returns a bearer oauth2.Token whose Expiry
// is the JWT's exp (file) or the granted expiration (TokenRequest), so that
// oauth2 caches know when it runs out; a token without exp has none.
func TestTokenSourcesExpiry(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	s := authtest.Start(t, authtest.WithClock(clk))
	s.AddServiceAccount("default", "backup")
	tr, err := grpcauth.NewTokenRequestSourceForConfig(s.Config(), grpcauth.TokenRequestOptions{
		Namespace: "default", ServiceAccount: "backup", Audiences: []string{audience}, Lifetime: time.Hour, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	jwtFile, opaqueFile := filepath.Join(dir, "jwt"), filepath.Join(dir, "opaque")
	exp := t0.Add(10 * time.Minute)
	if err := os.WriteFile(jwtFile, []byte(jwt("file", t0, exp)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(opaqueFile, []byte("opaque-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		src  oauth2.TokenSource
		want time.Time
	}{
		{"file with exp", mustFileSource(t, jwtFile, grpcauth.FileOptions{Clock: clk}), exp},
		{"file without exp", mustFileSource(t, opaqueFile, grpcauth.FileOptions{Clock: clk}), time.Time{}},
		{"TokenRequest", tr, t0.Add(time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := tt.src.Token()
			if err != nil {
				t.Fatalf("Token() = %v", err)
			}
			if !tok.Expiry.Equal(tt.want) || tok.Type() != "Bearer" || tok.AccessToken == "" {
				t.Errorf("Token() = {Type %q, Expiry %v, AccessToken empty %v}; want Bearer, %v, a token",
					tok.Type(), tok.Expiry, tok.AccessToken == "", tt.want)
			}
			// Each call hands out its own Token: a caller changing it
			// changes nobody else's.
			tok.AccessToken = "changed"
			if again, err := tt.src.Token(); err != nil || again.AccessToken == "changed" {
				t.Errorf("Token() after a caller changed its token = %v, %v; want the source's token", again, err)
			}
		})
	}
}

// TestTokenSourcesWithGRPCOAuth: grpc's own credentials/oauth.TokenSource
// takes a FileTokenSource and a TokenRequestSource as they are, and the
// server (grpcauth backed by the fake API server) authenticates the calls.
func TestTokenSourcesWithGRPCOAuth(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	s.SetPolicy(allowBackup)
	s.AddServiceAccount("default", "backup")
	dial := serveOverTLS(t, realOptions(t, s, nil))

	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(s.MintToken(backupSA, []string{audience}, time.Now().Add(time.Hour))), 0o600); err != nil {
		t.Fatal(err)
	}
	tr, err := grpcauth.NewTokenRequestSourceForConfig(s.Config(), grpcauth.TokenRequestOptions{
		Namespace: "default", ServiceAccount: "backup", Audiences: []string{audience},
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]oauth2.TokenSource{
		"FileTokenSource":    mustFileSource(t, file, grpcauth.FileOptions{}),
		"TokenRequestSource": tr,
	} {
		t.Run(name, func(t *testing.T) {
			conn := dial(grpc.WithPerRPCCredentials(oauth.TokenSource{TokenSource: src}))
			resp := new(wrapperspb.StringValue)
			if err := conn.Invoke(t.Context(), methodGet, newRequest("", "default", "a"), resp); err != nil {
				t.Fatalf("Get() with grpc's oauth.TokenSource = %v; want nil", err)
			}
			if !strings.HasPrefix(resp.GetValue(), backupSA.Name+" ") {
				t.Errorf("Get() = %q; want the handler to see %s", resp.GetValue(), backupSA.Name)
			}
		})
	}
}

// TestTokenSourcesWithClientGo: client-go takes the sources through
// rest.Config.WrapTransport, with its own transport.TokenSourceWrapTransport
// or with grpcauth.RoundTripper; a real clientset's request carries the
// token.
func TestTokenSourcesWithClientGo(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := mustFileSource(t, file, grpcauth.FileOptions{})
	var (
		mu   sync.Mutex
		seen []string
	)
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"major":"1","minor":"37","gitVersion":"v1.37.2"}`)
	}))
	t.Cleanup(api.Close)
	for name, wrap := range map[string]func(http.RoundTripper) http.RoundTripper{
		"transport.TokenSourceWrapTransport": transport.TokenSourceWrapTransport(src),
		"grpcauth.RoundTripper":              func(rt http.RoundTripper) http.RoundTripper { return grpcauth.RoundTripper(src, rt) },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := &rest.Config{Host: api.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, WrapTransport: wrap}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			n := len(seen)
			mu.Unlock()
			v, err := cs.Discovery().ServerVersion()
			if err != nil || v.GitVersion != "v1.37.2" {
				t.Fatalf("ServerVersion() = %v, %v; want v1.37.2", v, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != n+1 || seen[n] != "Bearer file-token" {
				t.Errorf("the API server saw Authorization %q; want one request with %q", seen[n:], "Bearer file-token")
			}
		})
	}
}

type ctxKey struct{}

// TestCredentialsAskWithTheCallsContext: PerRPCCredentials and RoundTripper
// call TokenContext with the call's (the request's) context when the source
// has it, and Token otherwise.
func TestCredentialsAskWithTheCallsContext(t *testing.T) {
	t.Parallel()
	var got []any
	var mu sync.Mutex
	record := grpcauth.TokenSourceFunc(func(ctx context.Context) (*oauth2.Token, error) {
		mu.Lock()
		got = append(got, ctx.Value(ctxKey{}))
		mu.Unlock()
		return &oauth2.Token{AccessToken: aliceToken}, nil
	})
	var plain plainSource
	ctx := context.WithValue(t.Context(), ctxKey{}, "the call's")

	dial := serveOverTLS(t, testOptions(nil))
	for _, src := range []oauth2.TokenSource{record, &plain} {
		conn := dial(grpc.WithPerRPCCredentials(grpcauth.PerRPCCredentials(src)))
		if err := conn.Invoke(ctx, methodGet, newRequest("", "ns", "a"), new(wrapperspb.StringValue)); err != nil {
			t.Fatalf("Get() with %T = %v; want nil", src, err)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	for _, src := range []oauth2.TokenSource{record, &plain} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := (&http.Client{Transport: grpcauth.RoundTripper(src, nil)}).Do(req)
		if err != nil {
			t.Fatalf("GET with %T = %v", src, err)
		}
		_ = resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != "[the call's the call's]" {
		t.Errorf("TokenContext saw context values %q; want the call's, twice", got)
	}
	if n := plain.calls(); n != 2 {
		t.Errorf("Token() of a plain oauth2.TokenSource called %d times; want 2", n)
	}
}

// plainSource is an oauth2.TokenSource without TokenContext.
type plainSource struct {
	mu sync.Mutex
	n  int
}

func (p *plainSource) Token() (*oauth2.Token, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	return &oauth2.Token{AccessToken: aliceToken}, nil
}

func (p *plainSource) calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// TestCredentialsRefuseEmptyTokens: a source that returns no token, or one
// without an access token, fails the call or the request; nothing is sent
// and the server is never reached.
func TestCredentialsRefuseEmptyTokens(t *testing.T) {
	t.Parallel()
	authn := &countingAuthn{}
	opts := testOptions(nil)
	opts.Authenticator = authn
	dial := serveOverTLS(t, opts)
	var reached int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mu.Lock()
		reached++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	tests := []struct {
		name string
		src  oauth2.TokenSource
	}{
		{"nil token", grpcauth.TokenSourceFunc(func(context.Context) (*oauth2.Token, error) { return nil, nil })},
		{"empty access token", oauth2.StaticTokenSource(&oauth2.Token{TokenType: "Bearer"})},
		{"an error", grpcauth.TokenSourceFunc(func(context.Context) (*oauth2.Token, error) {
			return &oauth2.Token{AccessToken: aliceToken}, errors.New("source failed")
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := dial(grpc.WithPerRPCCredentials(grpcauth.PerRPCCredentials(tt.src)))
			err := conn.Invoke(t.Context(), methodGet, newRequest("", "ns", "a"), new(wrapperspb.StringValue))
			if status.Code(err) != codes.Unavailable {
				t.Errorf("Get() = %v; want code Unavailable", err)
			}
			resp, err := (&http.Client{Transport: grpcauth.RoundTripper(tt.src, nil)}).Get(srv.URL)
			if err == nil {
				_ = resp.Body.Close()
				t.Errorf("GET = %v, nil; want an error", resp.Status)
			}
		})
	}
	if n := authn.n.Load(); n != 0 {
		t.Errorf("the server authenticated %d calls; want none", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if reached != 0 {
		t.Errorf("the HTTP server was reached %d times; want never", reached)
	}
}

// TestClientGoRedirects: through rest.Config.WrapTransport, client-go
// follows a redirect to another server. x/oauth2's Transport (client-go's
// TokenSourceWrapTransport) hands that server the token; RoundTripper
// does not, as its documentation says.
func TestClientGoRedirects(t *testing.T) {
	t.Parallel()
	src := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "audience-bound-token"})
	var (
		mu   sync.Mutex
		seen string
	)
	other := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r.Header.Get("Authorization")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"gitVersion":"elsewhere"}`)
	}))
	t.Cleanup(other.Close)
	api := httptest.NewTLSServer(http.RedirectHandler(other.URL+"/version", http.StatusFound))
	t.Cleanup(api.Close)
	for _, tt := range []struct {
		name string
		wrap func(http.RoundTripper) http.RoundTripper
		want string
	}{
		{"transport.TokenSourceWrapTransport", transport.TokenSourceWrapTransport(src), "Bearer audience-bound-token"},
		{"grpcauth.RoundTripper", func(rt http.RoundTripper) http.RoundTripper { return grpcauth.RoundTripper(src, rt) }, ""},
	} {
		cs, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, WrapTransport: tt.wrap})
		if err != nil {
			t.Fatal(err)
		}
		v, err := cs.Discovery().ServerVersion()
		if err != nil || v.GitVersion != "elsewhere" {
			t.Fatalf("%s: ServerVersion() = %v, %v; want the redirect followed", tt.name, v, err)
		}
		mu.Lock()
		if seen != tt.want {
			t.Errorf("%s: the redirect's target saw Authorization %q; want %q", tt.name, seen, tt.want)
		}
		mu.Unlock()
	}
}
