package authz_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/plugin/pkg/authorizer/webhook"
	webhookmetrics "k8s.io/apiserver/plugin/pkg/authorizer/webhook/metrics"
	"k8s.io/client-go/kubernetes"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
)

// benchAttrs is "get pods in a namespace" by a user with 2 groups and 1
// extra, the same for both sub-benchmarks.
func benchAttrs() authorizer.Attributes {
	u := &user.DefaultInfo{
		Name:   "system:serviceaccount:default:backup",
		UID:    "6f1f0d63-5b1c-4f2e-9c55-0b4b0a0e8d11",
		Groups: []string{"system:serviceaccounts", "system:authenticated"},
		Extra:  map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=8f0f6a4e-1c1e-4a43-a3a8-6b4d2c1b3b52"}},
	}
	return authorizer.AttributesRecord{User: u, Verb: "get", Namespace: "default", APIVersion: "v1", Resource: "pods", ResourceRequest: true}
}

// newAuthorizers returns constructors for the two implementations, both
// talking to srv: ours, and k8s.io/apiserver's webhook authorizer with the
// kubelet's TTLs.
func newAuthorizers(b *testing.B, srv *authtest.Server) map[string]func() authorizer.Authorizer {
	cs, err := kubernetes.NewForConfig(srv.Config())
	if err != nil {
		b.Fatal(err)
	}
	return map[string]func() authorizer.Authorizer{
		"reviewauth": func() authorizer.Authorizer {
			az, err := authz.NewForConfig(srv.Config(), authz.Options{})
			if err != nil {
				b.Fatal(err)
			}
			return az
		},
		"apiserver": func() authorizer.Authorizer {
			az, err := webhook.NewFromInterface(cs.AuthorizationV1(), 5*time.Minute, 30*time.Second,
				*webhook.DefaultRetryBackoff(), authorizer.DecisionNoOpinion, webhookmetrics.NoopAuthorizerMetrics{}, nil)
			if err != nil {
				b.Fatal(err)
			}
			return az
		},
	}
}

func BenchmarkSARHit(b *testing.B) {
	srv := authtest.Start(b)
	srv.SetPolicy(allowBackupPods)
	ctors := newAuthorizers(b, srv)
	for _, name := range []string{"reviewauth", "apiserver"} {
		b.Run(name, func(b *testing.B) {
			az := ctors[name]()
			a := benchAttrs()
			ctx := context.Background()
			if d, _, err := az.Authorize(ctx, a); d != authorizer.DecisionAllow || err != nil {
				b.Fatalf("Authorize() = %v, %v; want Allow", d, err)
			}
			before := srv.Count(authtest.SubjectAccessReviews)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if d, _, _ := az.Authorize(ctx, a); d != authorizer.DecisionAllow {
					b.Fatal("lost the cached Allow")
				}
			}
			b.StopTimer()
			if n := srv.Count(authtest.SubjectAccessReviews) - before; n != 0 {
				b.Fatalf("%d SARs on a warm cache; want 0", n)
			}
		})
	}
}

func BenchmarkSARColdHerd(b *testing.B) {
	const herd = 100
	srv := authtest.Start(b)
	srv.SetPolicy(allowBackupPods)
	ctors := newAuthorizers(b, srv)
	for _, name := range []string{"reviewauth", "apiserver"} {
		b.Run(name, func(b *testing.B) {
			a := benchAttrs()
			ctx := context.Background()
			before := srv.Count(authtest.SubjectAccessReviews)
			ops := 0
			for b.Loop() {
				ops++
				az := ctors[name]() // a new, cold cache per op
				start := make(chan struct{})
				var wg sync.WaitGroup
				for range herd {
					wg.Go(func() {
						<-start
						if d, _, err := az.Authorize(ctx, a); d != authorizer.DecisionAllow || err != nil {
							b.Errorf("Authorize() = %v, %v; want Allow", d, err)
						}
					})
				}
				close(start)
				wg.Wait()
			}
			sars := srv.Count(authtest.SubjectAccessReviews) - before
			b.ReportMetric(float64(sars)/float64(ops), "sars/op")
		})
	}
}
