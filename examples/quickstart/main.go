// Command quickstart shows reviewauth's decisions end to end without a
// cluster: it starts an embedded fake API server (package authtest), then
// authenticates and authorizes a few callers and prints what happens to each.
//
//	go -C examples run ./quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

const audience = "snap.example"

func run(ctx context.Context, out io.Writer) error {
	srv := authtest.NewServer()
	defer srv.Close()
	fmt.Fprintf(out, "fake API server at %s\n\n", srv.URL())

	backup := &user.DefaultInfo{
		Name:   "system:serviceaccount:apps:backup",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:apps", "system:authenticated"},
	}
	// RBAC-like policy: backup may get volumesnapshots in namespace apps.
	srv.SetPolicy(authtest.Rules(authtest.Rule{
		Users: []string{backup.Name}, Verbs: []string{"get"}, APIGroups: []string{"snapshot.storage.k8s.io"},
		Resources: []string{"volumesnapshots"}, Namespaces: []string{"apps"},
	}))

	an, err := authn.NewForConfig(srv.Config(), authn.Options{Audiences: []string{audience}})
	if err != nil {
		return err
	}
	az, err := authz.NewForConfig(srv.Config(), authz.Options{})
	if err != nil {
		return err
	}

	now := time.Now()
	callers := []struct {
		name, token, namespace string
	}{
		{"good token, its own namespace", srv.MintToken(backup, []string{audience}, now.Add(time.Hour)), "apps"},
		{"good token, another namespace", srv.MintToken(backup, []string{audience}, now.Add(time.Hour)), "kube-system"},
		{"token for another audience", srv.MintToken(backup, []string{"other.example"}, now.Add(time.Hour)), "apps"},
		{"token for the API server itself", srv.MintToken(backup, nil, now.Add(time.Hour)), "apps"},
		{"expired token", srv.MintToken(backup, []string{audience}, now.Add(-time.Minute)), "apps"},
		{"malformed token", "not a token", "apps"},
	}
	for _, c := range callers {
		fmt.Fprintf(out, "%-34s -> %s\n", c.name, decide(ctx, an, az, c.token, c.namespace))
	}

	// An outage is not a denial: the API server fails, the caller is told to retry.
	srv.InjectFault(authtest.TokenReviews, authtest.Fault{Status: 503})
	fresh := srv.MintToken(backup, []string{audience}, now.Add(time.Hour))
	fmt.Fprintf(out, "%-34s -> %s\n", "API server down (503)", decide(ctx, an, az, fresh, "apps"))
	fmt.Fprintf(out, "\nTokenReviews sent: %d (the outage's includes 4 bounded retries), SubjectAccessReviews sent: %d\n",
		srv.Count(authtest.TokenReviews), srv.Count(authtest.SubjectAccessReviews))
	return nil
}

// decide authenticates token and authorizes "get volumesnapshots" in
// namespace, and says what a transport adapter would answer.
func decide(ctx context.Context, an *authn.Authenticator, az authorizer.Authorizer, token, namespace string) string {
	resp, ok, err := an.AuthenticateToken(ctx, token)
	switch {
	case errors.Is(err, reviewauth.ErrUnavailable):
		return "503 Unavailable (could not check; retry)"
	case err != nil || !ok:
		return fmt.Sprintf("401 Unauthenticated (%v)", err)
	}
	err = authz.Check(ctx, az, authorizer.AttributesRecord{
		User: resp.User, Verb: "get", APIGroup: "snapshot.storage.k8s.io", APIVersion: "v1",
		Resource: "volumesnapshots", Namespace: namespace, Name: "snap-1", ResourceRequest: true,
	})
	switch {
	case err == nil:
		return "200 OK as " + resp.User.GetName()
	case errors.Is(err, reviewauth.ErrDenied):
		return "403 PermissionDenied"
	default:
		return "503 Unavailable (could not check; retry)"
	}
}
