package authz_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
)

func TestFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, f *authz.Flags)
	}{
		{name: "defaults", check: func(t *testing.T, f *authz.Flags) {
			if f.AllowedTTL != authz.DefaultAllowedTTL || f.DeniedTTL != authz.DefaultDeniedTTL {
				t.Errorf("TTLs = %v/%v; want defaults", f.AllowedTTL, f.DeniedTTL)
			}
			if len(f.AlwaysAllowPaths) != 0 || len(f.AlwaysAllowGroups) != 0 || f.RequireSameNode {
				t.Errorf("local decisions on by default: %+v", f)
			}
			if f.Client.QPS != authz.DefaultQPS || f.Client.Burst != authz.DefaultBurst {
				t.Errorf("client = %+v; want defaults", f.Client)
			}
			if want := []string{authz.CredentialIDExtra}; !slices.Equal(f.CacheKeyIgnoredExtras, want) {
				t.Errorf("CacheKeyIgnoredExtras = %q; want %q", f.CacheKeyIgnoredExtras, want)
			}
		}},
		{name: "credential-id kept in the cache key", args: []string{"--authorization-cache-ignored-extras="},
			check: func(t *testing.T, f *authz.Flags) {
				if f.CacheKeyIgnoredExtras == nil || len(f.CacheKeyIgnoredExtras) != 0 {
					t.Errorf("CacheKeyIgnoredExtras = %#v; want empty, not nil", f.CacheKeyIgnoredExtras)
				}
			}},
		{name: "pod extras ignored", args: []string{"--authorization-cache-ignored-extras=a,b"},
			check: func(t *testing.T, f *authz.Flags) {
				if !slices.Equal(f.CacheKeyIgnoredExtras, []string{"a", "b"}) {
					t.Errorf("CacheKeyIgnoredExtras = %q; want [a b]", f.CacheKeyIgnoredExtras)
				}
			}},
		{name: "ttls", args: []string{"--authorization-webhook-cache-authorized-ttl=5m", "--authorization-webhook-cache-unauthorized-ttl=30s"},
			check: func(t *testing.T, f *authz.Flags) {
				if f.AllowedTTL != 5*time.Minute || f.DeniedTTL != 30*time.Second {
					t.Errorf("TTLs = %v/%v; want 5m/30s", f.AllowedTTL, f.DeniedTTL)
				}
			}},
		{name: "paths and groups", args: []string{"--authorization-always-allow-paths=/healthz,/readyz", "--authorization-always-allow-groups=system:masters"},
			check: func(t *testing.T, f *authz.Flags) {
				if strings.Join(f.AlwaysAllowPaths, ",") != "/healthz,/readyz" || strings.Join(f.AlwaysAllowGroups, ",") != "system:masters" {
					t.Errorf("paths %v groups %v", f.AlwaysAllowPaths, f.AlwaysAllowGroups)
				}
			}},
		{name: "bad path", args: []string{"--authorization-always-allow-paths=metrics"}, wantErr: "--authorization-always-allow-paths"},
		{name: "negative authorized ttl", args: []string{"--authorization-webhook-cache-authorized-ttl=-1s"}, wantErr: "--authorization-webhook-cache-authorized-ttl"},
		{name: "negative unauthorized ttl", args: []string{"--authorization-webhook-cache-unauthorized-ttl=-1s"}, wantErr: "--authorization-webhook-cache-unauthorized-ttl"},
		{name: "negative qps", args: []string{"--authorization-qps=-2"}, wantErr: "--authorization-qps"},
		{name: "negative burst", args: []string{"--authorization-burst=-2"}, wantErr: "--authorization-burst"},
		{name: "negative in flight", args: []string{"--authorization-max-in-flight=-2"}, wantErr: "--authorization-max-in-flight"},
		{name: "same node needs a node", args: []string{"--authorization-require-same-node"}, wantErr: "--node-name"},
		{name: "same node", args: []string{"--authorization-require-same-node", "--node-name=node-a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var f authz.Flags
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			f.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatalf("Parse(%v) = %v", tt.args, err)
			}
			err := f.Validate()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("Validate() = %v; want nil", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate() = %v; want an error naming %q", err, tt.wantErr)
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
	srv.SetPolicy(allowBackupPods)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := srv.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	var f authz.Flags
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	f.AddFlags(fs)
	if err := fs.Parse([]string{"--authorization-kubeconfig=" + kc, "--authorization-always-allow-paths=/healthz",
		"--authorization-require-same-node", "--node-name=node-a"}); err != nil {
		t.Fatal(err)
	}
	az, _, err := f.New()
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	onNode := func(node string) user.Info {
		u := backup()
		u.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
		return u
	}
	tests := []struct {
		name  string
		attrs authorizer.Attributes
		want  authorizer.Decision
	}{
		{"health path, no review", authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "anyone"}, Verb: "get", Path: "/healthz"}, authorizer.DecisionAllow},
		{"same node and RBAC", getPods(onNode("node-a")), authorizer.DecisionAllow},
		{"other node", getPods(onNode("node-b")), authorizer.DecisionDeny},
		{"no node binding", getPods(&user.DefaultInfo{Name: backup().Name, Groups: backup().Groups}), authorizer.DecisionDeny},
	}
	for _, tt := range tests {
		d, reason, err := az.Authorize(context.Background(), tt.attrs)
		if d != tt.want || err != nil {
			t.Errorf("%s: Authorize() = (%v, %q, %v); want %v", tt.name, d, reason, err, tt.want)
		}
	}
	if n := srv.Count(authtest.SubjectAccessReviews); n != 1 {
		t.Errorf("SARs = %d; want 1 (only the same-node caller reaches the SAR)", n)
	}
}
