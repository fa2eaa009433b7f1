package cache_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/plugin/pkg/authorizer/webhook"
	webhookmetrics "k8s.io/apiserver/plugin/pkg/authorizer/webhook/metrics"
	"k8s.io/client-go/kubernetes"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/cache"
)

// A cache in front of an authenticator of your own: a function that checks
// tokens somewhere costly. Repeated tokens are answered from the cache,
// definite rejections included; an outage ("could not check") and any
// other error are never cached.
func ExampleNewTokenAuthenticator() {
	calls := 0
	var down bool
	check := authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		calls++
		switch {
		case down:
			// "Could not check" must match reviewauth.ErrUnavailable:
			// it is then never cached, and answered 503.
			return nil, false, fmt.Errorf("%w: the token service is down", reviewauth.ErrUnavailable)
		case token == "alice-token":
			return &authenticator.Response{User: &user.DefaultInfo{Name: "alice"}}, true, nil
		}
		// A definite rejection matches reviewauth.ErrUnauthenticated
		// (or is (nil, false, nil)): cached for FailureTTL, and answered
		// 401. Any other error is returned as it is, and not cached.
		return nil, false, &reviewauth.RejectedError{Reason: "unknown token"}
	})
	c, err := cache.NewTokenAuthenticator(check, cache.TokenOptions{SuccessTTL: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for range 3 {
		resp, ok, err := c.AuthenticateToken(ctx, "alice-token")
		fmt.Println(resp.User.GetName(), ok, err)
	}
	for range 2 {
		_, ok, err := c.AuthenticateToken(ctx, "mallory-token")
		fmt.Println(ok, err)
	}
	down = true
	for range 2 {
		_, ok, err := c.AuthenticateToken(ctx, "bob-token")
		fmt.Println(ok, errors.Is(err, reviewauth.ErrUnavailable))
	}
	fmt.Println("calls:", calls)
	// Output:
	// alice true <nil>
	// alice true <nil>
	// alice true <nil>
	// false reviewauth: unauthenticated: unknown token
	// false reviewauth: unauthenticated: unknown token
	// false true
	// false true
	// calls: 4
}

// The cache keys tokens with the audiences of the context
// (authenticator.WithAudiences), as k8s.io/apiserver's token cache does: one
// authenticator serves a service whose audience is known per call.
func ExampleNewTokenAuthenticator_audiences() {
	calls := 0
	check := authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		calls++
		auds, _ := authenticator.AudiencesFrom(ctx)
		return &authenticator.Response{User: &user.DefaultInfo{Name: "alice"}, Audiences: auds}, true, nil
	})
	c, _ := cache.NewTokenAuthenticator(check, cache.TokenOptions{})
	for _, aud := range []string{"snap.example", "snap.example", "other.example"} {
		ctx := authenticator.WithAudiences(context.Background(), authenticator.Audiences{aud})
		resp, _, _ := c.AuthenticateToken(ctx, "t")
		fmt.Println(resp.Audiences, calls)
	}
	// Output:
	// [snap.example] 1
	// [snap.example] 1
	// [other.example] 2
}

// A cache in front of k8s.io/apiserver's webhook authorizer, which sends a
// SubjectAccessReview for every miss of its own cache and never coalesces:
// behind the cache, 100 concurrent identical cold requests cost one
// SubjectAccessReview.
func ExampleNewAuthorizer() {
	srv := authtest.NewServer()
	defer srv.Close()
	srv.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{"alice"}, Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}))
	cs, err := kubernetes.NewForConfig(srv.Config())
	if err != nil {
		fmt.Println(err)
		return
	}
	wh, err := webhook.NewFromInterface(cs.AuthorizationV1(), 5*time.Minute, 30*time.Second,
		wait.Backoff{Steps: 1}, authorizer.DecisionNoOpinion, webhookmetrics.NoopAuthorizerMetrics{}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	az, err := cache.NewAuthorizer(wh, cache.AuthorizerOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	attrs := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "alice"}, Verb: "get", Namespace: "default", APIVersion: "v1", Resource: "pods", Name: "p", ResourceRequest: true}
	var wg sync.WaitGroup
	var mu sync.Mutex
	decisions := map[authorizer.Decision]int{}
	for range 100 {
		wg.Go(func() {
			d, _, _ := az.Authorize(context.Background(), attrs)
			mu.Lock()
			decisions[d]++
			mu.Unlock()
		})
	}
	wg.Wait()
	fmt.Println("allowed:", decisions[authorizer.DecisionAllow], "SubjectAccessReviews:", srv.Count(authtest.SubjectAccessReviews))
	// Output:
	// allowed: 100 SubjectAccessReviews: 1
}

// A pod is deleted: its token stops working at once, although the API
// server keeps authenticating it for about 10 s more (its own token cache).
// Tokens bound to other pods stay cached.
func ExampleTokenAuthenticator_Revoke() {
	pods := map[string]string{"token-of-web-0": "uid-web-0", "token-of-web-1": "uid-web-1"}
	reviews := 0
	apiServer := authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		reviews++
		return &authenticator.Response{User: &user.DefaultInfo{
			Name:  "system:serviceaccount:default:web",
			Extra: map[string][]string{"authentication.kubernetes.io/pod-uid": {pods[token]}},
		}}, true, nil
	})
	c, err := cache.NewTokenAuthenticator(apiServer, cache.TokenOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for _, tok := range []string{"token-of-web-0", "token-of-web-1"} {
		_, ok, _ := c.AuthenticateToken(ctx, tok)
		fmt.Println(tok, ok)
	}
	c.Revoke("uid-web-0") // as a watch of the node's pods sees web-0 deleted
	for _, tok := range []string{"token-of-web-0", "token-of-web-1"} {
		_, ok, err := c.AuthenticateToken(ctx, tok)
		fmt.Println(tok, ok, errors.Is(err, reviewauth.ErrUnauthenticated))
	}
	fmt.Println("reviews:", reviews)
	// Output:
	// token-of-web-0 true
	// token-of-web-1 true
	// token-of-web-0 false true
	// token-of-web-1 true false
	// reviews: 3
}

// A RoleBinding changed: the decisions about its subject are forgotten, and
// the next request is reviewed again.
func ExampleAuthorizer_ForgetUser() {
	allowed := true
	reviews := 0
	rbac := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		reviews++
		if allowed {
			return authorizer.DecisionAllow, "bound", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	az, err := cache.NewAuthorizer(rbac, cache.AuthorizerOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	attrs := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "alice"}, Verb: "get", Path: "/metrics"}
	d, _, _ := az.Authorize(context.Background(), attrs)
	fmt.Println(d)
	allowed = false // the binding is deleted...
	d, _, _ = az.Authorize(context.Background(), attrs)
	fmt.Println(d, "(cached)")
	az.ForgetUser("alice") // ...and a watch of RBAC says so
	d, _, _ = az.Authorize(context.Background(), attrs)
	fmt.Println(d, "reviews:", reviews)
	// Output:
	// Allow
	// Allow (cached)
	// NoOpinion reviews: 2
}
