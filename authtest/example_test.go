package authtest_test

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"

	"github.com/reviewauth/reviewauth/authtest"
)

// ExampleServer reviews a token through client-go: once for the audience it
// was minted for, once for another audience.
func ExampleServer() {
	s := authtest.NewServer()
	defer s.Close()

	token := s.MintToken(&user.DefaultInfo{
		Name:   "system:serviceaccount:default:backup",
		UID:    "0b6e3a52-2f55-4b0e-9d8e-3c1c7a1d2a10",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"},
	}, []string{"snap.example"}, time.Time{})

	cs, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, aud := range []string{"snap.example", "other"} {
		tr, err := cs.AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{aud}},
		}, metav1.CreateOptions{})
		if err != nil {
			fmt.Println(err)
			return
		}
		if tr.Status.Authenticated {
			fmt.Println(tr.Status.User.Username, tr.Status.User.Groups, tr.Status.Audiences)
		} else {
			fmt.Println(tr.Status.Error)
		}
	}
	fmt.Println("TokenReviews:", s.Count(authtest.TokenReviews))
	// Output:
	// system:serviceaccount:default:backup [system:serviceaccounts system:serviceaccounts:default system:authenticated] [snap.example]
	// [invalid bearer token, token audiences ["snap.example"] is invalid for the target audiences ["other"]]
	// TokenReviews: 2
}

// ExampleServer_InjectFault makes the next TokenReview fail with 503, as an
// overloaded API server would.
func ExampleServer_InjectFault() {
	s := authtest.NewServer()
	defer s.Close()
	s.InjectFault(authtest.TokenReviews, authtest.Fault{Status: 503, Times: 1})

	cs, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		_, err := cs.AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: "unknown"},
		}, metav1.CreateOptions{})
		fmt.Println(err)
	}
	// Output:
	// authtest: injected fault: 503 Service Unavailable
	// <nil>
}

// ExampleRules grants a backup service account read access to volume
// snapshots in its namespace.
func ExampleRules() {
	policy := authtest.Rules(authtest.Rule{
		Users:      []string{"system:serviceaccount:default:backup"},
		Verbs:      []string{"get", "list"},
		APIGroups:  []string{"snapshot.storage.k8s.io"},
		Resources:  []string{"volumesnapshots"},
		Namespaces: []string{"default"},
	})
	for _, ns := range []string{"default", "kube-system"} {
		allowed, denied, reason, _ := policy(resourceSpec("system:serviceaccount:default:backup", nil, "get", "snapshot.storage.k8s.io", "volumesnapshots", "", ns, "snap-1"))
		fmt.Printf("%s: allowed=%v denied=%v reason=%q\n", ns, allowed, denied, reason)
	}
	// Output:
	// default: allowed=true denied=false reason="authtest: allowed by rule #0"
	// kube-system: allowed=false denied=false reason=""
}
