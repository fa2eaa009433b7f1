package authz_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authz"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	byName := func(decisions map[string]authorizer.Decision, err error) authorizer.AuthorizerFunc {
		return func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			return decisions[a.GetName()], "reason-" + a.GetName(), err
		}
	}
	attrs := func(names ...string) []authorizer.Attributes {
		var out []authorizer.Attributes
		for _, n := range names {
			a := getPods(backup())
			a.Name = n
			out = append(out, a)
		}
		return out
	}
	unavailable := &reviewauth.ReviewError{Review: "SubjectAccessReview", Code: 429, RetryAfter: 3 * time.Second}
	tests := []struct {
		name       string
		az         authorizer.UnconditionalAuthorizer
		attrs      []authorizer.Attributes
		want       error // nil, ErrDenied or ErrUnavailable
		wantReason string
	}{
		{name: "all allowed", az: byName(map[string]authorizer.Decision{"a": authorizer.DecisionAllow, "b": authorizer.DecisionAllow}, nil), attrs: attrs("a", "b")},
		{name: "second denied", az: byName(map[string]authorizer.Decision{"a": authorizer.DecisionAllow, "b": authorizer.DecisionDeny}, nil), attrs: attrs("a", "b"), want: reviewauth.ErrDenied, wantReason: "reason-b"},
		{name: "no opinion is a denial", az: byName(map[string]authorizer.Decision{"a": authorizer.DecisionNoOpinion}, nil), attrs: attrs("a"), want: reviewauth.ErrDenied, wantReason: "reason-a"},
		{name: "allow with error is unavailable", az: byName(map[string]authorizer.Decision{"a": authorizer.DecisionAllow}, errors.New("boom")), attrs: attrs("a"), want: reviewauth.ErrUnavailable},
		{name: "review error passes through", az: byName(nil, unavailable), attrs: attrs("a"), want: reviewauth.ErrUnavailable},
		{name: "no attributes", az: byName(nil, nil), want: reviewauth.ErrDenied},
		{name: "nil authorizer", az: nil, attrs: attrs("a"), want: reviewauth.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := authz.Check(context.Background(), tt.az, tt.attrs...)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Check() = %v; want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Check() = %v; want an error matching %v", err, tt.want)
			}
			other := reviewauth.ErrUnavailable
			if tt.want == reviewauth.ErrUnavailable {
				other = reviewauth.ErrDenied
			}
			if errors.Is(err, other) {
				t.Errorf("Check() = %v also matches %v", err, other)
			}
			var de *reviewauth.DeniedError
			if tt.wantReason != "" && (!errors.As(err, &de) || de.Reason != tt.wantReason) {
				t.Errorf("Check() = %v; want a DeniedError with reason %q", err, tt.wantReason)
			}
		})
	}
	if d, ok := reviewauth.RetryAfter(authz.Check(context.Background(), byName(nil, unavailable), attrs("a")...)); !ok || d != 3*time.Second {
		t.Errorf("RetryAfter(Check()) = %v, %v; want 3s, true", d, ok)
	}
}

func TestConstructorsRefuseNil(t *testing.T) {
	t.Parallel()
	if _, err := authz.NewForConfig(nil, authz.Options{}); err == nil {
		t.Error("NewForConfig(nil) = nil error; want an error")
	}
	if az, err := authz.New(nil, authz.Options{}); err == nil || az != nil {
		t.Errorf("New(nil) = %v, %v; want an error", az, err)
	}
}
