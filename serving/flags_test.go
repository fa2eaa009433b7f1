package serving_test

import (
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/httpauth"
	"github.com/reviewauth/reviewauth/serving"
)

// flagsFor returns Flags for srv's kubeconfig and audience svc.example.
func flagsFor(t *testing.T, srv *authtest.Server) *serving.Flags {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := srv.WriteKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	return &serving.Flags{Kubeconfig: path, Audiences: []string{"svc.example"}}
}

// TestBuildChecksTheServiceCredentials (issue #11 item 8): Build fails
// fast, naming the identity and the ClusterRole, when the service's
// credentials may not create reviews; and only warns, in the log, when
// the API server cannot be asked.
func TestBuildChecksTheServiceCredentials(t *testing.T) {
	t.Parallel()
	const sa = "system:serviceaccount:csi:snapshot-metadata"
	tests := []struct {
		name     string
		policy   authtest.Policy
		closed   bool
		wantErr  []string
		wantWarn string
	}{
		{name: "bound to system:auth-delegator"},
		{name: "not bound", policy: authtest.Rules(), wantErr: []string{
			`authn: self-check: user "` + sa + `" may not create tokenreviews.authentication.k8s.io; it needs the system:auth-delegator ClusterRole`,
			`authz: self-check: user "` + sa + `" may not create subjectaccessreviews.authorization.k8s.io`,
		}},
		{name: "TokenReviews only", policy: func(spec authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
			return spec.ResourceAttributes.Resource == "tokenreviews", false, "", ""
		}, wantErr: []string{"may not create subjectaccessreviews"}},
		{name: "API server down", closed: true, wantWarn: "could not ask the API server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := authtest.Start(t, authtest.WithAdminUser(sa))
			srv.SetAdminPolicy(tt.policy)
			f := flagsFor(t, srv)
			if tt.closed {
				srv.Close()
			}
			var logs lines
			b, err := f.Build(klog.NewContext(t.Context(), logs.logger()))
			if len(tt.wantErr) > 0 {
				if err == nil || !errors.Is(err, reviewauth.ErrRefused) || errors.Is(err, reviewauth.ErrUnavailable) {
					t.Fatalf("Build() = %v; want ErrRefused", err)
				}
				for _, want := range tt.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Build() = %q; want it to contain %q", err, want)
					}
				}
				return
			}
			if err != nil || b == nil {
				t.Fatalf("Build() = %v; want success", err)
			}
			got := strings.Join(logs.snapshot(), "\n")
			if !strings.Contains(got, tt.wantWarn) || (tt.wantWarn == "") != (got == "") {
				t.Errorf("log = %q; want %q", got, tt.wantWarn)
			}
		})
	}
}

// TestFlags: the flags register under apiserver's names plus the short
// forms, and Validate names the flag at fault.
func TestFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no audience", []string{"--kubeconfig=k"}, "--authentication-audiences: required"},
		{"bad always-allow path", []string{"--audience=a", "--authorization-always-allow-paths=healthz"}, "--authorization-always-allow-paths"},
		{"missing client CA file", []string{"--audience=a", "--client-ca-file=/nonexistent"}, "--client-ca-file"},
		{"ok", []string{"--audience=a", "--kubeconfig=k", "--authentication-jwks-preverify", "--authorization-always-allow-paths=/healthz"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var f serving.Flags
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			f.AddFlags(fs)
			f.AddHTTPFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := f.Validate()
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v; want %q", err, tt.want)
			}
			if tt.want == "" && (f.Authn.Client.Kubeconfig != "k" || f.Authz.Client.Kubeconfig != "k" || f.Authn.Audiences[0] != "a" || !f.JWKSPreverify) {
				t.Errorf("flags = %+v; want the short forms applied", f)
			}
		})
	}
}

// TestJWKSPreverifyFlag (issue #12): with --authentication-jwks-preverify
// a forged JWT costs no TokenReview; without it, it costs one each.
func TestJWKSPreverifyFlag(t *testing.T) {
	t.Parallel()
	for _, preverify := range []bool{false, true} {
		api := authtest.Start(t)
		f := flagsFor(t, api)
		f.JWKSPreverify = preverify
		b, err := f.Build(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		genuine := api.MintToken(&user.DefaultInfo{Name: "alice"}, []string{"svc.example"}, time.Now().Add(time.Hour))
		parts := strings.Split(genuine, ".")
		before := api.Count(authtest.TokenReviews)
		for i := range 5 {
			// The cluster's key id, a payload it never signed.
			payload := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"system:serviceaccount:x:admin","aud":["svc.example"],"jti":"` + strings.Repeat("j", i+1) + `"}`))
			forged := parts[0] + "." + payload + "." + parts[2]
			if _, ok, err := b.Authenticator.AuthenticateToken(t.Context(), forged); ok || err == nil {
				t.Fatalf("forged token authenticated (%v, %v)", ok, err)
			}
		}
		reviews := api.Count(authtest.TokenReviews) - before
		if want := map[bool]int{false: 5, true: 0}[preverify]; reviews != want {
			t.Errorf("preverify %v: TokenReviews for 5 forged tokens = %d; want %d", preverify, reviews, want)
		}
		// A genuine token is still authenticated.
		if _, ok, err := b.Authenticator.AuthenticateToken(t.Context(), genuine); !ok || err != nil {
			t.Errorf("preverify %v: genuine token = %v, %v; want authenticated", preverify, ok, err)
		}
	}
}

// TestHTTPOptions: Build's parts, --authorization-always-allow-paths and
// --client-ca-file become httpauth.Options.
func TestHTTPOptions(t *testing.T) {
	t.Parallel()
	api := authtest.Start(t)
	f := flagsFor(t, api)
	f.HTTP.AlwaysAllowPaths = []string{"/healthz"}
	b, err := f.Build(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	opts, err := b.HTTPOptions(httpauth.NonResource(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Authenticator == nil || opts.Authorizer == nil || opts.Metrics == nil || opts.ClientCertificates != nil || len(opts.AlwaysAllowPaths) != 1 {
		t.Errorf("HTTPOptions() = %+v", opts)
	}
	// --client-ca-file needs the certificates that carry it.
	ca := newCA(t, "client CA")
	f2 := flagsFor(t, api)
	f2.HTTP.ClientCAFile = writeFile(t, t.TempDir(), "ca.crt", ca.pem)
	b2, err := f2.Build(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b2.HTTPOptions(httpauth.NonResource(), nil); err == nil {
		t.Error("HTTPOptions(nil certs) with --client-ca-file = nil error; want one")
	}
	tlsf := serving.TLSFlags{}
	certs, err := tlsf.Certificates("test", f2.HTTP.ClientCAFile)
	if err != nil {
		t.Fatal(err)
	}
	defer certs.Close()
	opts2, err := b2.HTTPOptions(httpauth.NonResource(), certs)
	if err != nil || opts2.ClientCertificates == nil {
		t.Errorf("HTTPOptions(certs) = %+v, %v; want client certificates", opts2, err)
	}

	// Handler serves the registry and health.
	var health serving.Health
	health.SetReady(true)
	h := b.Handler(&health)
	for path, want := range map[string]string{"/metrics": "go_goroutines", "/readyz": "ok"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		body, _ := io.ReadAll(w.Body)
		if w.Code != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s = %d %.80q; want 200 with %q", path, w.Code, body, want)
		}
	}
}
