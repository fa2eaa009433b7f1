package authn_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
)

// onlySARs lets the administrator create SubjectAccessReviews, not
// TokenReviews.
func onlySARs(spec authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
	ra := spec.ResourceAttributes
	return ra != nil && ra.Resource == "subjectaccessreviews", false, "", ""
}

// TestSelfCheck (issue #11 item 8): the start-up check tells "may not"
// (ErrRefused, naming the identity and the ClusterRole) from "could not ask"
// (ErrUnavailable).
func TestSelfCheck(t *testing.T) {
	t.Parallel()
	const sa = "system:serviceaccount:csi:sidecar"
	tests := []struct {
		name    string
		setup   func(srv *authtest.Server)
		badCred bool
		closed  bool
		want    error // nil, reviewauth.ErrRefused or reviewauth.ErrUnavailable
		wantMsg []string
	}{
		{name: "allowed", setup: func(*authtest.Server) {}},
		{name: "allowed, no SelfSubjectReview API", setup: func(srv *authtest.Server) {
			srv.InjectFault(authtest.SelfSubjectReviews, authtest.Fault{Status: 404})
		}},
		{name: "no system:auth-delegator", setup: func(srv *authtest.Server) { srv.SetAdminPolicy(refusingPolicy) },
			want: reviewauth.ErrRefused, wantMsg: []string{`user "` + sa + `" may not create tokenreviews.authentication.k8s.io`, "system:auth-delegator"}},
		{name: "SARs only", setup: func(srv *authtest.Server) { srv.SetAdminPolicy(onlySARs) },
			want: reviewauth.ErrRefused, wantMsg: []string{"may not create tokenreviews.authentication.k8s.io"}},
		{name: "not allowed, identity unknown", setup: func(srv *authtest.Server) {
			srv.SetAdminPolicy(refusingPolicy)
			srv.InjectFault(authtest.SelfSubjectReviews, authtest.Fault{Status: 404})
		}, want: reviewauth.ErrRefused, wantMsg: []string{"the service's credentials may not create tokenreviews"}},
		{name: "credentials refused (401)", setup: func(*authtest.Server) {}, badCred: true,
			want: reviewauth.ErrRefused, wantMsg: []string{"HTTP 401", "system:auth-delegator"}},
		{name: "API server failing", setup: func(srv *authtest.Server) {
			srv.InjectFault(authtest.SelfSubjectAccessReviews, authtest.Fault{Status: 503})
		}, want: reviewauth.ErrUnavailable, wantMsg: []string{"could not ask the API server"}},
		{name: "API server gone", setup: func(*authtest.Server) {}, closed: true, want: reviewauth.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := authtest.Start(t, authtest.WithAdminUser(sa, "system:serviceaccounts"))
			tt.setup(srv)
			cfg := srv.Config()
			if tt.badCred {
				cfg.BearerToken = "expired"
			}
			if tt.closed {
				srv.Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := authn.SelfCheck(ctx, cfg)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("SelfCheck() = %v; want nil", err)
				}
				return
			}
			other := map[error]error{reviewauth.ErrRefused: reviewauth.ErrUnavailable, reviewauth.ErrUnavailable: reviewauth.ErrRefused}[tt.want]
			if !errors.Is(err, tt.want) || errors.Is(err, other) {
				t.Fatalf("SelfCheck() = %v; want %v and not %v", err, tt.want, other)
			}
			for _, want := range tt.wantMsg {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("SelfCheck() = %q; want it to contain %q", err, want)
				}
			}
		})
	}
}

// A service checks at start-up that its credentials may create
// TokenReviews, and fails fast with a message an operator can act on.
func ExampleSelfCheck() {
	srv := authtest.NewServer(authtest.WithAdminUser("system:serviceaccount:csi:sidecar"))
	defer srv.Close()
	ctx := context.Background()
	fmt.Println(authn.SelfCheck(ctx, srv.Config()))

	// The service account is not bound to system:auth-delegator.
	srv.SetAdminPolicy(authtest.Rules())
	err := authn.SelfCheck(ctx, srv.Config())
	fmt.Println(errors.Is(err, reviewauth.ErrRefused))
	fmt.Println(err)
	// Output:
	// <nil>
	// true
	// authn: self-check: user "system:serviceaccount:csi:sidecar" may not create tokenreviews.authentication.k8s.io; it needs the system:auth-delegator ClusterRole (create tokenreviews.authentication.k8s.io, create subjectaccessreviews.authorization.k8s.io)
}
