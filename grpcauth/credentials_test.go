package grpcauth_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/credentials/local"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/reviewauth/reviewauth/grpcauth"
)

func staticToken(tok string) grpcauth.TokenSource {
	return grpcauth.TokenSourceFunc(func(context.Context) (string, error) { return tok, nil })
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
		grpc.UnaryInterceptor(grpcauth.UnaryServerInterceptor(opts)),
		grpc.StreamInterceptor(grpcauth.StreamServerInterceptor(opts)))
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
		src   grpcauth.TokenSource
		want  codes.Code
	}{
		{name: "local credentials", creds: local.NewCredentials(), src: staticToken(aliceToken), want: codes.OK},
		{name: "token source error", creds: local.NewCredentials(), src: grpcauth.TokenSourceFunc(func(context.Context) (string, error) {
			return "", errors.New("no token today")
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
		src     grpcauth.TokenSource
		header  string
		want    string
		wantErr bool
	}{
		{name: "sets bearer", src: staticToken("tok-1"), want: "Bearer tok-1"},
		{name: "keeps an explicit header", src: staticToken("tok-1"), header: "Bearer mine", want: "Bearer mine"},
		{name: "source error sends nothing", src: grpcauth.TokenSourceFunc(func(context.Context) (string, error) {
			return "", errors.New("no token")
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
