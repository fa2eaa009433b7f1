package authn_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
)

// A CSI sidecar authenticates the token a backup application put in its
// request, for the sidecar's own audience.
func ExampleNew() {
	srv := authtest.NewServer()
	defer srv.Close()
	backup := &user.DefaultInfo{Name: "system:serviceaccount:apps:backup", Groups: []string{"system:serviceaccounts"}}

	a, err := authn.NewForConfig(srv.Config(), authn.Options{Audiences: []string{"snap.example"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()

	good := srv.MintToken(backup, []string{"snap.example"}, time.Now().Add(time.Hour))
	resp, ok, err := a.AuthenticateToken(ctx, good)
	fmt.Println(ok, err, resp.User.GetName(), resp.Audiences)

	// A token minted for another service is rejected: 401, not 503.
	other := srv.MintToken(backup, []string{"other.example"}, time.Now().Add(time.Hour))
	_, ok, err = a.AuthenticateToken(ctx, other)
	fmt.Println(ok, errors.Is(err, reviewauth.ErrUnauthenticated))

	// When the API server cannot answer, the error says so: 503, not 401.
	srv.InjectFault(authtest.TokenReviews, authtest.Fault{Status: 400})
	fresh := srv.MintToken(backup, []string{"snap.example"}, time.Now().Add(time.Hour))
	_, ok, err = a.AuthenticateToken(ctx, fresh)
	fmt.Println(ok, errors.Is(err, reviewauth.ErrUnavailable))
	// Output:
	// true <nil> system:serviceaccount:apps:backup [snap.example]
	// false true
	// false true
}

// Without an audience, New refuses to build an Authenticator: a service that
// accepts the API server's own tokens could replay them.
func ExampleNew_audienceRequired() {
	_, err := authn.New(nil, authn.Options{})
	fmt.Println(err)
	_, err = authn.New(answer(authenticationv1.TokenReviewStatus{}), authn.Options{})
	fmt.Println(err)
	// Output:
	// authn: nil TokenReviewer
	// authn: no audience configured: set Options.Audiences to this service's audience (or, dangerously, AllowAPIServerAudience)
}
