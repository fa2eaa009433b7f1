package serving_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
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
		{"ok", []string{"--audience=a", "--kubeconfig=k", "--authentication-jwks-preverify=false", "--authorization-always-allow-paths=/healthz"}, ""},
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
			if tt.want == "" && (f.Authn.Client.Kubeconfig != "k" || f.Authz.Client.Kubeconfig != "k" || f.Authn.Audiences[0] != "a" || !f.NoJWKSPreverify) {
				t.Errorf("flags = %+v; want the short forms applied", f)
			}
		})
	}
}

// TestJWKSPreverifyFlag (issues #12, #22): JWKS pre-verification is on
// unless --authentication-jwks-preverify=false; with it a forged JWT
// naming the cluster's key costs no TokenReview, without it one each; a
// genuine token is authenticated either way.
func TestJWKSPreverifyFlag(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args      []string
		preverify bool
	}{{nil, true}, {[]string{"--authentication-jwks-preverify"}, true}, {[]string{"--authentication-jwks-preverify=false"}, false}} {
		api := authtest.Start(t)
		f := flagsFor(t, api)
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		f.AddFlags(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if got := fs.Lookup("authentication-jwks-preverify").Value.String(); got != strconv.FormatBool(tt.preverify) {
			t.Errorf("%q: the flag reads %s; want %v", tt.args, got, tt.preverify)
		}
		b, err := f.Build(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		genuine := api.MintToken(&user.DefaultInfo{Name: "alice"}, []string{"svc.example"}, time.Now().Add(time.Hour))
		before := api.Count(authtest.TokenReviews)
		for i := range 5 {
			if _, ok, err := b.Authenticator.AuthenticateToken(t.Context(), forge(genuine, i)); ok || err == nil {
				t.Fatalf("forged token authenticated (%v, %v)", ok, err)
			}
		}
		reviews := api.Count(authtest.TokenReviews) - before
		if want := map[bool]int{false: 5, true: 0}[tt.preverify]; reviews != want {
			t.Errorf("%q: TokenReviews for 5 forged tokens = %d; want %d", tt.args, reviews, want)
		}
		if _, ok, err := b.Authenticator.AuthenticateToken(t.Context(), genuine); !ok || err != nil {
			t.Errorf("%q: genuine token = %v, %v; want authenticated", tt.args, ok, err)
		}
	}
}

// forge returns token with a payload its signature does not cover: the
// cluster's key id, a signature that does not verify.
func forge(token string, i int) string {
	parts := strings.Split(token, ".")
	payload := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"system:serviceaccount:x:admin","aud":["svc.example"],"jti":"` + strings.Repeat("j", i+1) + `"}`))
	return parts[0] + "." + payload + "." + parts[2]
}

// respell returns another spelling of token: the unused low bits of its
// signature's last base64url character (an ES256 signature's 86
// characters leave 4) set to 1. go-jose, and the API server, read it as
// token.
func respell(token string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, token[len(token)-1])
	return token[:len(token)-1] + string(alphabet[last|1])
}

// jwtWith returns a JWT-shaped token with header h and a random-looking
// signature.
func jwtWith(h string, i int) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(h)) + "." + enc.EncodeToString([]byte(`{"sub":"x","n":`+strconv.Itoa(i)+`}`)) + "." + enc.EncodeToString([]byte("not a signature"))
}

// TestPreVerifierNeverRefusesWhatCouldBeGenuine (issues #22, #30): the
// default pre-verifier refuses only what the API server refuses: a JWT
// naming the key id the API server derives from a key of the cluster
// whose signature does not verify under it (whatever its alg). Every token
// the API server could accept, through its service-account authenticator
// or another (not a JWT, no key id, a key id it does not publish, a "KID"
// member, which is no key id to go-jose, a padded signature), is reviewed:
// one TokenReview each.
func TestPreVerifierNeverRefusesWhatCouldBeGenuine(t *testing.T) {
	t.Parallel()
	api := authtest.Start(t)
	b, err := flagsFor(t, api).Build(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	genuine := api.MintToken(&user.DefaultInfo{Name: "alice"}, []string{"svc.example"}, time.Now().Add(time.Hour))
	kid := func(tok string) string {
		raw, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
		var h struct{ Kid string }
		_ = json.Unmarshal(raw, &h)
		return h.Kid
	}(genuine)
	for _, tt := range []struct {
		name    string
		token   string
		reviews int
	}{
		{"forged, the cluster's key id", forge(genuine, 0), 0},
		{"PS256, the cluster's key id", jwtWith(`{"alg":"PS256","kid":"`+kid+`"}`, 2), 0},
		{"none, the cluster's key id", jwtWith(`{"alg":"none","kid":"`+kid+`"}`, 3), 0},
		{"not a JWT (a bootstrap token)", "abcdef.0123456789abcdef", 1},
		{"opaque", "0123456789abcdef0123456789abcdef", 1},
		{"no key id", jwtWith(`{"alg":"RS256"}`, 1), 1},
		{"PS256 (an OIDC issuer)", jwtWith(`{"alg":"PS256","kid":"idp-key-2"}`, 2), 1},
		{"a key id the cluster does not publish", jwtWith(`{"alg":"RS256","kid":"idp-key-1"}`, 4), 1},
		{"KID naming the cluster's key (no key id to the API server)", jwtWith(`{"alg":"ES256","KID":"`+kid+`"}`, 5), 1},
		{"a genuine token, another spelling", respell(genuine), 1},
		{"a padded signature (go-jose reads none; another authenticator may)", genuine + "=", 1},
	} {
		before := api.Count(authtest.TokenReviews)
		if _, ok, _ := b.Authenticator.AuthenticateToken(t.Context(), tt.token); ok {
			t.Errorf("%s: authenticated; the fake API server knows no such token", tt.name)
		}
		if got := api.Count(authtest.TokenReviews) - before; got != tt.reviews {
			t.Errorf("%s: TokenReviews = %d; want %d", tt.name, got, tt.reviews)
		}
	}
}

// TestJWKSUnreadable (issue #22): where the key set cannot be read (the
// service lacks system:service-account-issuer-discovery), Build says so at
// start, naming the ClusterRole, reviewauth_jwks_preverify_available is 0,
// and tokens are reviewed (forged ones too), genuine ones authenticated.
func TestJWKSUnreadable(t *testing.T) {
	t.Parallel()
	api := authtest.Start(t)
	api.InjectFault(authtest.JWKS, authtest.Fault{Status: http.StatusForbidden, Times: 2})
	var logs lines
	b, err := flagsFor(t, api).Build(klog.NewContext(t.Context(), logs.logger()))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(logs.snapshot(), func(l string) bool {
		return strings.Contains(l, "JWKS pre-verification is unavailable") && strings.Contains(l, "system:service-account-issuer-discovery")
	}) {
		t.Errorf("no start-up line about the unreadable key set:\n%s", strings.Join(logs.snapshot(), "\n"))
	}
	gauge := func() string {
		w := httptest.NewRecorder()
		b.Handler(nil).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
		for _, l := range strings.Split(w.Body.String(), "\n") {
			if strings.HasPrefix(l, "reviewauth_jwks_preverify_available ") {
				return strings.TrimPrefix(l, "reviewauth_jwks_preverify_available ")
			}
		}
		return "absent"
	}
	if g := gauge(); g != "0" {
		t.Errorf("reviewauth_jwks_preverify_available after the start-up check = %s; want 0", g)
	}
	genuine := api.MintToken(&user.DefaultInfo{Name: "alice"}, []string{"svc.example"}, time.Now().Add(time.Hour))
	before := api.Count(authtest.TokenReviews)
	if _, ok, _ := b.Authenticator.AuthenticateToken(t.Context(), forge(genuine, 0)); ok {
		t.Fatal("forged token authenticated")
	}
	if got := api.Count(authtest.TokenReviews) - before; got != 1 {
		t.Errorf("TokenReviews for a forged token while the keys cannot be read = %d; want 1", got)
	}
	if _, ok, err := b.Authenticator.AuthenticateToken(t.Context(), genuine); !ok || err != nil {
		t.Errorf("genuine token while the keys cannot be read = %v, %v; want authenticated", ok, err)
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
