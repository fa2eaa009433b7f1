package authz_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/httpauth"
)

// A node-local proxy in front of the API server lets a DRA driver list and
// watch ResourceSlices only with a field selector naming its own node.
// NodeLocal admits only drivers on this node, NodeScope checks the
// selector, and the SubjectAccessReview keeps the driver's RBAC in force;
// refusals by the first two cost no review.
func ExampleNodeScope() {
	srv := authtest.NewServer() // stands in for the API server
	defer srv.Close()
	srv.SetPolicy(authtest.Rules(authtest.Rule{
		Groups: []string{"system:serviceaccounts:dra"}, Verbs: []string{"list", "watch"},
		APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"},
	}))
	sar, err := authz.NewForConfig(srv.Config(), authz.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	scope, err := authz.NodeScope(authz.NodeScopeOptions{}) // resourceslices by spec.nodeName
	if err != nil {
		fmt.Println(err)
		return
	}
	az := authz.All(authz.NodeLocal(authz.NodeLocalOptions{NodeName: "node-a"}), scope, sar)

	driver := &user.DefaultInfo{
		Name:   "system:serviceaccount:dra:driver",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:dra"},
		Extra:  map[string][]string{"authentication.kubernetes.io/node-name": {"node-a"}},
	}
	for _, target := range []string{
		"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Dgpu.example.com%2Cspec.nodeName%3Dnode-a",
		"/apis/resource.k8s.io/v1/resourceslices?watch=true",
		"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-b",
	} {
		// The attributes a proxy builds from the request, as the API server would.
		attrs, err := httpauth.RequestInfo().Attributes(httptest.NewRequest("GET", target, nil), driver)
		if err != nil {
			fmt.Println(err)
			return
		}
		d, reason, err := az.Authorize(context.Background(), attrs[0])
		fmt.Println(d, reason, err)
	}
	fmt.Println("SubjectAccessReviews:", srv.Count(authtest.SubjectAccessReviews))
	// Output:
	// Allow authtest: allowed by rule #0 <nil>
	// Deny watch of resourceslices.resource.k8s.io requires the field selector spec.nodeName=node-a (the caller's node): the request has none <nil>
	// Deny list of resourceslices.resource.k8s.io requires the field selector spec.nodeName=node-a (the caller's node): it names node "node-b" <nil>
	// SubjectAccessReviews: 1
}
