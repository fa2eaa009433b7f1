package httpauth_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/httpauth"
)

func TestFlagsAlwaysAllowPaths(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      []string
		wantPaths []string
		wantErr   string
	}{
		{name: "defaults"},
		{name: "paths", args: []string{"--authorization-always-allow-paths=/healthz,/readyz", "--authorization-always-allow-paths=/debug/*"}, wantPaths: []string{"/healthz", "/readyz", "/debug/*"}},
		{name: "relative path", args: []string{"--authorization-always-allow-paths=healthz"}, wantErr: "--authorization-always-allow-paths"},
		{name: "unclean path", args: []string{"--authorization-always-allow-paths=/a/../healthz"}, wantErr: "--authorization-always-allow-paths"},
		{name: "missing CA file and a bad path", args: []string{"--client-ca-file=/nonexistent/ca.pem", "--authorization-always-allow-paths=x"}, wantErr: "--client-ca-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var f httpauth.Flags
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			f.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatalf("Parse(%v) = %v", tt.args, err)
			}
			err := f.Validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Validate(%v) = %v; want an error naming %s", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate(%v) = %v", tt.args, err)
			}
			if strings.Join(f.AlwaysAllowPaths, ",") != strings.Join(tt.wantPaths, ",") {
				t.Errorf("AlwaysAllowPaths = %v; want %v", f.AlwaysAllowPaths, tt.wantPaths)
			}
		})
	}
}

// TestFlagsAlwaysAllowPathsWithKubeletMapper builds a kubelet-style server
// from the command line, as an example program does, and checks
// --authorization-always-allow-paths the way apiserver means it: a health
// probe without a token is served, as anonymous, through the kubelet's
// resource mapper; a bad token there is 401; other paths and methods are
// authorized.
func TestFlagsAlwaysAllowPathsWithKubeletMapper(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	s.SetPolicy(metricsScraperPolicy)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := s.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	var (
		an authn.Flags
		az authz.Flags
		hf httpauth.Flags
	)
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	an.AddFlags(fs)
	az.AddFlags(fs)
	hf.AddFlags(fs)
	if err := fs.Parse([]string{"--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--authentication-audiences=" + testAudience, "--authorization-always-allow-paths=/healthz,/readyz"}); err != nil {
		t.Fatal(err)
	}
	if err := hf.Validate(); err != nil {
		t.Fatal(err)
	}
	tokens, err := an.New()
	if err != nil {
		t.Fatal(err)
	}
	chain, err := az.New()
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpauth.New(httpauth.Options{Authenticator: tokens, Authorizer: chain, Attributes: httpauth.KubeletFineGrained("node-1"), AlwaysAllowPaths: hf.AlwaysAllowPaths})
	if err != nil {
		t.Fatal(err)
	}
	token := s.MintToken(promSA, []string{testAudience}, time.Now().Add(time.Hour))
	other := s.MintToken(promSA, []string{"someone-else"}, time.Now().Add(time.Hour))
	tests := []struct {
		method, path, token string
		wantCode            int
		wantUser            string
	}{
		{method: "GET", path: "/healthz", wantCode: 200, wantUser: "system:anonymous"},
		{method: "HEAD", path: "/readyz", wantCode: 200, wantUser: "system:anonymous"},
		{method: "GET", path: "/healthz", token: token, wantCode: 200, wantUser: promSA.Name},
		{method: "GET", path: "/healthz", token: other, wantCode: 401},
		{method: "POST", path: "/healthz", wantCode: 401},
		{method: "POST", path: "/healthz", token: token, wantCode: 403},
		{method: "GET", path: "/healthz/log", wantCode: 401},
		{method: "GET", path: "/metrics", token: token, wantCode: 200, wantUser: promSA.Name},
		{method: "GET", path: "/metrics", wantCode: 401},
	}
	for _, tt := range tests {
		r := get(tt.path, tt.token)
		r.Method = tt.method
		w, seen := serve(mw, r)
		if w.Code != tt.wantCode {
			t.Errorf("%s %s (token %v): code = %d; want %d (body %s)", tt.method, tt.path, tt.token != "", w.Code, tt.wantCode, w.Body)
			continue
		}
		if tt.wantCode == http.StatusOK && (seen.user == nil || seen.user.GetName() != tt.wantUser) {
			t.Errorf("%s %s: request.UserFrom = %v; want %s", tt.method, tt.path, seen.user, tt.wantUser)
		}
	}
}
