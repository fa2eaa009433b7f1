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

	"github.com/reviewauth/reviewauth"
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
			if len(f.AlwaysAllowGroups) != 0 || f.RequireSameNode {
				t.Errorf("local decisions on by default: %+v", f)
			}
			if f.Client.QPS != reviewauth.DefaultQPS || f.Client.Burst != reviewauth.DefaultBurst {
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
		{name: "zero ttls disable the caches", args: []string{"--authorization-webhook-cache-authorized-ttl=0", "--authorization-webhook-cache-unauthorized-ttl=0s"},
			check: func(t *testing.T, f *authz.Flags) {
				if f.AllowedTTL >= 0 || f.DeniedTTL >= 0 {
					t.Errorf("TTLs = %v/%v; want negative (disabled)", f.AllowedTTL, f.DeniedTTL)
				}
			}},
		{name: "groups", args: []string{"--authorization-always-allow-groups=system:masters"},
			check: func(t *testing.T, f *authz.Flags) {
				if strings.Join(f.AlwaysAllowGroups, ",") != "system:masters" {
					t.Errorf("groups %v", f.AlwaysAllowGroups)
				}
			}},
		{name: "always-allow paths belong to httpauth", args: []string{"--authorization-always-allow-paths=/healthz"}, wantErr: "unknown flag: --authorization-always-allow-paths"},
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
	srv.SetPolicy(allowBackupPods)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := srv.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	var f authz.Flags
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	f.AddFlags(fs)
	if err := fs.Parse([]string{"--authorization-kubeconfig=" + kc, "--authorization-always-allow-groups=system:masters",
		"--authorization-require-same-node", "--node-name=node-a"}); err != nil {
		t.Fatal(err)
	}
	az, err := f.New()
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
		{"always-allowed group, no review", getPods(&user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}), authorizer.DecisionAllow},
		{"a path is not always allowed here", authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "anyone"}, Verb: "get", Path: "/healthz"}, authorizer.DecisionDeny},
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

// TestFlagsZeroTTLDisablesCache checks the apiserver meaning of the cache
// TTL flags: 0 disables caching, so that every check is a
// SubjectAccessReview, where the flag left alone caches.
func TestFlagsZeroTTLDisablesCache(t *testing.T) {
	t.Parallel()
	const calls = 3
	tests := []struct {
		name    string
		args    []string
		user    *user.DefaultInfo
		want    authorizer.Decision
		wantSAR int
	}{
		{name: "allowed, default ttl", user: backup(), want: authorizer.DecisionAllow, wantSAR: 1},
		{name: "allowed, authorized ttl 0", args: []string{"--authorization-webhook-cache-authorized-ttl=0"}, user: backup(), want: authorizer.DecisionAllow, wantSAR: calls},
		{name: "allowed, unauthorized ttl 0", args: []string{"--authorization-webhook-cache-unauthorized-ttl=0"}, user: backup(), want: authorizer.DecisionAllow, wantSAR: 1},
		{name: "denied, default ttl", user: &user.DefaultInfo{Name: "stranger"}, want: authorizer.DecisionNoOpinion, wantSAR: 1},
		{name: "denied, unauthorized ttl 0", args: []string{"--authorization-webhook-cache-unauthorized-ttl=0"}, user: &user.DefaultInfo{Name: "stranger"}, want: authorizer.DecisionNoOpinion, wantSAR: calls},
		{name: "denied, authorized ttl 0", args: []string{"--authorization-webhook-cache-authorized-ttl=0"}, user: &user.DefaultInfo{Name: "stranger"}, want: authorizer.DecisionNoOpinion, wantSAR: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
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
			if err := fs.Parse(append([]string{"--authorization-kubeconfig=" + kc}, tt.args...)); err != nil {
				t.Fatal(err)
			}
			az, err := f.New()
			if err != nil {
				t.Fatalf("New() = %v", err)
			}
			for range calls {
				if d, reason, err := az.Authorize(t.Context(), getPods(tt.user)); d != tt.want || err != nil {
					t.Fatalf("Authorize() = (%v, %q, %v); want %v", d, reason, err, tt.want)
				}
			}
			if n := srv.Count(authtest.SubjectAccessReviews); n != tt.wantSAR {
				t.Errorf("%v: %d checks sent %d SubjectAccessReviews; want %d", tt.args, calls, n, tt.wantSAR)
			}
		})
	}
}

// TestFlagsNewAuthorizerAndChain: the SubjectAccessReview authorizer is
// reachable alone, and Chain puts the flags' local decisions in front of
// it; with none, the chain is the authorizer itself.
func TestFlagsNewAuthorizerAndChain(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	srv.SetPolicy(allowBackupPods)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := srv.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	f := authz.Flags{Client: reviewauth.ClientOptions{Kubeconfig: kc}}
	sar, err := f.NewAuthorizer()
	if err != nil {
		t.Fatalf("NewAuthorizer() = %v", err)
	}
	chain, err := f.Chain(sar)
	if err != nil || chain != authorizer.Authorizer(sar) {
		t.Fatalf("Chain(sar) with no local decisions = %v, %v; want sar itself", chain, err)
	}
	if _, err := f.Chain(nil); err == nil {
		t.Error("Chain(nil) = nil error; want an error")
	}
	f.AlwaysAllowGroups = []string{"system:masters"}
	if chain, err = f.Chain(sar); err != nil {
		t.Fatal(err)
	}
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}
	if d, _, err := chain.Authorize(t.Context(), getPods(admin)); d != authorizer.DecisionAllow || err != nil {
		t.Errorf("chain.Authorize(admin) = %v, %v; want Allow", d, err)
	}
	if n := srv.Count(authtest.SubjectAccessReviews); n != 0 {
		t.Errorf("SARs = %d; want 0: the always-allow group decides locally", n)
	}
	f.RequireSameNode = true // without --node-name
	if _, err := f.Chain(sar); err == nil || !strings.Contains(err.Error(), "--node-name") {
		t.Errorf("Chain() with --authorization-require-same-node and no --node-name = %v; want an error naming --node-name", err)
	}
}
