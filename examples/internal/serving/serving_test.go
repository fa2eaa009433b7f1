package serving_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/examples/internal/serving"
)

// flagsFor returns the example flags for srv's kubeconfig.
func flagsFor(t *testing.T, srv *authtest.Server) (*serving.Flags, *strings.Builder) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := srv.WriteKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	var warnings strings.Builder
	return &serving.Flags{Kubeconfig: path, Audiences: []string{"svc.example"}, Warnings: &warnings}, &warnings
}

// TestBuildChecksTheServiceCredentials (issue #11 item 8): every example
// starts through Build, which fails fast, naming the identity and the
// ClusterRole, when the service's credentials may not create reviews; and
// only warns when the API server cannot be asked.
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
			f, warnings := flagsFor(t, srv)
			if tt.closed {
				srv.Close()
			}
			b, err := f.Build()
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
			if !strings.Contains(warnings.String(), tt.wantWarn) || (tt.wantWarn == "") != (warnings.Len() == 0) {
				t.Errorf("warnings = %q; want %q", warnings.String(), tt.wantWarn)
			}
		})
	}
}
