package revocation_test

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/reviewauth/reviewauth/cache"
	"github.com/reviewauth/reviewauth/revocation"
)

// A node agent's token cache and a revoker watching the node's pods: once
// the pod a cached token is bound to is deleted, the token is refused, a
// TTL (1 m) early. In a program, Metadata is a real client
// (metadata.NewForConfig, or NewForConfig), and the API server delivers the
// delete; here client-go's fake does, and the API server's TokenReview is
// a TokenFunc that accepts a token bound to the pod.
func ExampleNew() {
	pod := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "gpu", Name: "plugin-0", UID: "pod-uid-1"},
	}
	scheme := metadatafake.NewTestScheme()
	_ = metav1.AddMetaToScheme(scheme)
	pods := metadatafake.NewSimpleMetadataClient(scheme, pod)
	watches := make(chan *watch.RaceFreeFakeWatcher, 1)
	pods.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewRaceFreeFake()
		watches <- w
		return true, w, nil
	})
	review := authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		return &authenticator.Response{User: &user.DefaultInfo{Name: "system:serviceaccount:gpu:plugin",
			Extra: map[string][]string{serviceaccount.PodUIDKey: {"pod-uid-1"}}}}, true, nil
	})
	tokens, err := cache.NewTokenAuthenticator(review, cache.TokenOptions{})
	if err != nil {
		panic(err)
	}

	r, err := revocation.New(revocation.Options{
		Watch:      []revocation.Resource{revocation.Pods},
		NodeName:   "node-a",
		Metadata:   pods,
		Identities: tokens,
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	w := <-watches // listed, and watching

	_, ok, _ := tokens.AuthenticateToken(ctx, "token")
	fmt.Println("before:", ok, r.Synced())
	w.Delete(pod)
	for ok {
		time.Sleep(time.Millisecond) // the event travels through the reflector
		_, ok, _ = tokens.AuthenticateToken(ctx, "token")
	}
	fmt.Println("after the pod's deletion:", ok)
	cancel()
	fmt.Println("Run:", <-done)
	// Output:
	// before: true true
	// after the pod's deletion: false
	// Run: <nil>
}
