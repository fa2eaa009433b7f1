package authn_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
)

func TestFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantErr string // substring; "" means valid
		check   func(t *testing.T, f *authn.Flags)
	}{
		{name: "defaults need an audience", args: nil, wantErr: "--authentication-audiences: required"},
		{name: "audiences repeatable and comma-separated", args: []string{"--authentication-audiences=a,b", "--authentication-audiences=c"},
			check: func(t *testing.T, f *authn.Flags) {
				if strings.Join(f.Audiences, ",") != "a,b,c" {
					t.Errorf("Audiences = %v; want [a b c]", f.Audiences)
				}
				if f.SuccessTTL != authn.DefaultSuccessTTL || f.FailureTTL != authn.DefaultFailureTTL {
					t.Errorf("TTLs = %v/%v; want defaults", f.SuccessTTL, f.FailureTTL)
				}
				if f.Client.QPS != reviewauth.DefaultQPS || f.Client.Burst != reviewauth.DefaultBurst || f.MaxInFlight != authn.DefaultMaxInFlight {
					t.Errorf("client = %+v, in flight %d; want defaults", f.Client, f.MaxInFlight)
				}
			}},
		{name: "ttl flags", args: []string{"--authentication-audiences=a", "--authentication-token-webhook-cache-ttl=2m", "--authentication-token-webhook-cache-failure-ttl=5s"},
			check: func(t *testing.T, f *authn.Flags) {
				if f.SuccessTTL != 2*time.Minute || f.FailureTTL != 5*time.Second {
					t.Errorf("TTLs = %v/%v; want 2m/5s", f.SuccessTTL, f.FailureTTL)
				}
			}},
		{name: "zero ttls disable the caches", args: []string{"--authentication-audiences=a", "--authentication-token-webhook-cache-ttl=0", "--authentication-token-webhook-cache-failure-ttl=0s"},
			check: func(t *testing.T, f *authn.Flags) {
				if f.SuccessTTL >= 0 || f.FailureTTL >= 0 {
					t.Errorf("TTLs = %v/%v; want negative (disabled)", f.SuccessTTL, f.FailureTTL)
				}
			}},
		{name: "negative ttl", args: []string{"--authentication-audiences=a", "--authentication-token-webhook-cache-ttl=-1s"}, wantErr: "--authentication-token-webhook-cache-ttl"},
		{name: "negative failure ttl", args: []string{"--authentication-audiences=a", "--authentication-token-webhook-cache-failure-ttl=-1s"}, wantErr: "--authentication-token-webhook-cache-failure-ttl"},
		{name: "negative qps", args: []string{"--authentication-audiences=a", "--authentication-qps=-1"}, wantErr: "--authentication-qps"},
		{name: "negative burst", args: []string{"--authentication-audiences=a", "--authentication-burst=-1"}, wantErr: "--authentication-burst"},
		{name: "negative in flight", args: []string{"--authentication-audiences=a", "--authentication-max-in-flight=-1"}, wantErr: "--authentication-max-in-flight"},
		{name: "api server audience opt-in", args: []string{"--authentication-allow-api-server-audience"}},
		{name: "opt-in with audiences", args: []string{"--authentication-allow-api-server-audience", "--authentication-audiences=a"}, wantErr: "--authentication-allow-api-server-audience"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var f authn.Flags
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			f.AddFlags(fs)
			err := fs.Parse(tt.args)
			if err == nil {
				err = f.Validate()
			}
			if tt.wantErr == "" && err != nil {
				t.Fatalf("Parse and Validate(%v) = %v; want nil", tt.args, err)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse and Validate(%v) = %v; want an error naming %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if tt.check != nil {
				tt.check(t, &f)
			}
		})
	}
}

func TestFlagsNew(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := srv.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	var f authn.Flags
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f.AddFlags(fs)
	if err := fs.Parse([]string{"--authentication-kubeconfig=" + kc, "--authentication-audiences=" + aud}); err != nil {
		t.Fatal(err)
	}
	a, err := f.New()
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	tok := srv.MintToken(backup, []string{aud}, time.Time{})
	if _, ok, err := a.AuthenticateToken(t.Context(), tok); !ok || err != nil {
		t.Fatalf("AuthenticateToken() = (%v, %v); want success", ok, err)
	}
	f.Client.Kubeconfig = filepath.Join(t.TempDir(), "missing")
	if _, err := f.New(); err == nil || !strings.Contains(err.Error(), "--authentication-kubeconfig") {
		t.Fatalf("New() with a missing kubeconfig = %v; want an error naming the flag", err)
	}
}

// TestFlagsZeroTTLDisablesCache checks the apiserver meaning of the cache
// TTL flags: 0 disables caching, so that every request is a TokenReview,
// where the flag left alone caches.
func TestFlagsZeroTTLDisablesCache(t *testing.T) {
	t.Parallel()
	const (
		aud   = "flags.example"
		calls = 3
	)
	tests := []struct {
		name     string
		args     []string
		rejected bool
		wantTR   int
	}{
		{name: "valid token, default ttl", wantTR: 1},
		{name: "valid token, ttl 0", args: []string{"--authentication-token-webhook-cache-ttl=0"}, wantTR: calls},
		{name: "valid token, failure ttl 0", args: []string{"--authentication-token-webhook-cache-failure-ttl=0"}, wantTR: 1},
		{name: "rejected token, default failure ttl", rejected: true, wantTR: 1},
		{name: "rejected token, failure ttl 0", args: []string{"--authentication-token-webhook-cache-failure-ttl=0"}, rejected: true, wantTR: calls},
		{name: "rejected token, ttl 0", args: []string{"--authentication-token-webhook-cache-ttl=0"}, rejected: true, wantTR: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := authtest.Start(t)
			kc := filepath.Join(t.TempDir(), "kubeconfig")
			if err := srv.WriteKubeconfig(kc); err != nil {
				t.Fatal(err)
			}
			var f authn.Flags
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			f.AddFlags(fs)
			if err := fs.Parse(append([]string{"--authentication-kubeconfig=" + kc, "--authentication-audiences=" + aud}, tt.args...)); err != nil {
				t.Fatal(err)
			}
			a, err := f.New()
			if err != nil {
				t.Fatalf("New() = %v", err)
			}
			audience := aud
			if tt.rejected {
				audience = "someone-else"
			}
			tok := srv.MintToken(&user.DefaultInfo{Name: "system:serviceaccount:ns:sa", UID: "uid"}, []string{audience}, time.Now().Add(time.Hour))
			for range calls {
				_, ok, err := a.AuthenticateToken(t.Context(), tok)
				if tt.rejected != (err != nil) || ok == tt.rejected {
					t.Fatalf("AuthenticateToken() = (%v, %v); want rejected %v", ok, err, tt.rejected)
				}
			}
			if n := srv.Count(authtest.TokenReviews); n != tt.wantTR {
				t.Errorf("%v: %d calls sent %d TokenReviews; want %d", tt.args, calls, n, tt.wantTR)
			}
		})
	}
}
