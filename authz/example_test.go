package authz_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
)

// A CSI snapshot-metadata sidecar asks the API server whether the backup
// application may get the VolumeSnapshots of a delta call. The second
// identical check is answered from the cache.
func ExampleNewForConfig() {
	srv := authtest.NewServer() // stands in for the API server
	defer srv.Close()
	srv.SetPolicy(authtest.Rules(authtest.Rule{
		Users: []string{"system:serviceaccount:default:backup"}, Verbs: []string{"get"},
		APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots"},
	}))

	az, err := authz.NewForConfig(srv.Config(), authz.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	app := &user.DefaultInfo{Name: "system:serviceaccount:default:backup", Groups: []string{"system:authenticated"}}
	snapshot := func(name string) authorizer.Attributes {
		return authorizer.AttributesRecord{
			User: app, Verb: "get", Namespace: "default", APIGroup: "snapshot.storage.k8s.io", APIVersion: "v1",
			Resource: "volumesnapshots", Name: name, ResourceRequest: true,
		}
	}
	ctx := context.Background()
	d, _, err := az.Authorize(ctx, snapshot("snap-1"))
	fmt.Println(d, err)

	// Check requires every attribute set to be allowed (a delta call names
	// two snapshots); snap-1 comes from the cache.
	fmt.Println(authz.Check(ctx, az, snapshot("snap-1"), snapshot("snap-2")))
	fmt.Println("SubjectAccessReviews:", srv.Count(authtest.SubjectAccessReviews))

	other := &user.DefaultInfo{Name: "system:serviceaccount:default:other"}
	err = authz.Check(ctx, az, authorizer.AttributesRecord{User: other, Verb: "get", Namespace: "default",
		APIGroup: "snapshot.storage.k8s.io", Resource: "volumesnapshots", Name: "snap-1", ResourceRequest: true})
	fmt.Println(errors.Is(err, reviewauth.ErrDenied))
	// Output:
	// Allow <nil>
	// <nil>
	// SubjectAccessReviews: 2
	// true
}

// A DRA plugin serves only callers bound to its own node. NodeLocal decides
// without asking the API server.
func ExampleNodeLocal() {
	local := authz.NodeLocal(authz.NodeLocalOptions{NodeName: "node-a"})
	caller := func(node string) authorizer.Attributes {
		u := &user.DefaultInfo{Name: "system:serviceaccount:dra:driver", Extra: map[string][]string{}}
		if node != "" {
			u.Extra["authentication.kubernetes.io/node-name"] = []string{node}
		}
		return authorizer.AttributesRecord{User: u, Verb: "create", Path: "/dra/prepare"}
	}
	for _, node := range []string{"node-a", "node-b", ""} {
		d, reason, _ := local.Authorize(context.Background(), caller(node))
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%q: %v %s", node, d, reason)))
	}
	// Output:
	// "node-a": Allow
	// "node-b": Deny caller is bound to node "node-b", not to this node
	// "": Deny caller is not bound to a node
}

// All puts node locality in front of the API server's answer: a caller must
// be on this node and be allowed by RBAC. A caller on another node is
// refused without a SubjectAccessReview.
func ExampleAll() {
	srv := authtest.NewServer()
	defer srv.Close()
	srv.SetPolicy(authtest.Rules(authtest.Rule{
		Groups: []string{"system:serviceaccounts:dra"}, Verbs: []string{"get"},
		APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"},
	}))
	sar, err := authz.NewForConfig(srv.Config(), authz.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	az := authz.All(authz.NodeLocal(authz.NodeLocalOptions{NodeName: "node-a"}), sar)

	claim := func(node string) authorizer.Attributes {
		u := &user.DefaultInfo{
			Name:   "system:serviceaccount:dra:driver",
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:dra"},
			Extra:  map[string][]string{"authentication.kubernetes.io/node-name": {node}},
		}
		return authorizer.AttributesRecord{User: u, Verb: "get", Namespace: "ns", APIGroup: "resource.k8s.io",
			APIVersion: "v1", Resource: "resourceclaims", Name: "claim", ResourceRequest: true}
	}
	for _, node := range []string{"node-a", "node-b"} {
		d, _, err := az.Authorize(context.Background(), claim(node))
		fmt.Println(node, d, err)
	}
	fmt.Println("SubjectAccessReviews:", srv.Count(authtest.SubjectAccessReviews))
	// Output:
	// node-a Allow <nil>
	// node-b Deny <nil>
	// SubjectAccessReviews: 1
}

// First is a union: local rules answer first, and the API server is asked
// only when none of them has an opinion.
func ExampleFirst() {
	health, err := authz.StaticRules(authz.Rule{Groups: []string{"system:authenticated"}, Verbs: []string{"get"},
		NonResourceURLs: []string{"/healthz", "/readyz"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	apiServer := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionDeny, "asked the API server", nil
	})
	az := authz.First(authz.AlwaysAllowGroups("system:masters"), health, apiServer)
	u := &user.DefaultInfo{Name: "prom", Groups: []string{"system:authenticated"}}
	for _, p := range []string{"/healthz", "/metrics"} {
		d, reason, _ := az.Authorize(context.Background(), authorizer.AttributesRecord{User: u, Verb: "get", Path: p})
		fmt.Println(strings.TrimSpace(fmt.Sprintln(p, d, reason)))
	}
	// Output:
	// /healthz Allow allowed by static rule 0
	// /metrics Deny asked the API server
}

// A client that mints a token per call (the upstream CSI snapshot-metadata
// iterator does) presents a new credential-id every time. It is left out of
// the cache key, so those calls share one decision; the review sent still
// carries it. An authorizer that decides on credential-id needs it in the
// key: an empty CacheKeyIgnoredExtras keeps every extra there.
func ExampleOptions_cacheKeyIgnoredExtras() {
	srv := authtest.NewServer()
	defer srv.Close()
	srv.SetPolicy(authtest.Rules(authtest.Rule{
		Users: []string{"system:serviceaccount:default:backup"}, Verbs: []string{"get"},
		APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots"},
	}))
	call := func(az *authz.Authorizer, jti string) {
		app := &user.DefaultInfo{Name: "system:serviceaccount:default:backup", Groups: []string{"system:authenticated"},
			Extra: map[string][]string{authz.CredentialIDExtra: {"JTI=" + jti}}}
		_, _, _ = az.Authorize(context.Background(), authorizer.AttributesRecord{
			User: app, Verb: "get", Namespace: "default", APIGroup: "snapshot.storage.k8s.io",
			Resource: "volumesnapshots", Name: "snap-1", ResourceRequest: true,
		})
	}
	for _, opt := range []struct {
		name    string
		ignored []string
	}{{"default", nil}, {"empty", []string{}}} {
		az, err := authz.NewForConfig(srv.Config(), authz.Options{CacheKeyIgnoredExtras: opt.ignored})
		if err != nil {
			fmt.Println(err)
			return
		}
		before := srv.Count(authtest.SubjectAccessReviews)
		for i := range 3 {
			call(az, fmt.Sprint("token-", i))
		}
		fmt.Printf("%s: 3 tokens, %d SubjectAccessReviews\n", opt.name, srv.Count(authtest.SubjectAccessReviews)-before)
	}
	last := srv.SubjectAccessReviews()[len(srv.SubjectAccessReviews())-1]
	fmt.Println("sent:", last.Spec.Extra[authz.CredentialIDExtra])
	// Output:
	// default: 3 tokens, 1 SubjectAccessReviews
	// empty: 3 tokens, 3 SubjectAccessReviews
	// sent: [JTI=token-2]
}

// A service checks at start-up that its credentials may create
// SubjectAccessReviews, and fails fast with a message an operator can act
// on; an API server that cannot be asked is a different error.
func ExampleSelfCheck() {
	srv := authtest.NewServer(authtest.WithAdminUser("system:serviceaccount:kube-system:metrics-proxy"))
	ctx := context.Background()
	fmt.Println(authz.SelfCheck(ctx, srv.Config()))

	srv.SetAdminPolicy(authtest.Rules()) // not bound to system:auth-delegator
	err := authz.SelfCheck(ctx, srv.Config())
	fmt.Println(errors.Is(err, reviewauth.ErrRefused), errors.Is(err, reviewauth.ErrUnavailable))

	srv.Close()
	err = authz.SelfCheck(ctx, srv.Config())
	fmt.Println(errors.Is(err, reviewauth.ErrRefused), errors.Is(err, reviewauth.ErrUnavailable))
	// Output:
	// <nil>
	// true false
	// false true
}
