package main

import (
	"context"
	"fmt"
	"reflect"
	"time"
	"unsafe"

	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	_ "k8s.io/apiserver/pkg/authentication/token/cache" // newTokenCacheWithClock
	"k8s.io/apiserver/pkg/authorization/authorizer"
	tokenwebhook "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	authzwebhook "k8s.io/apiserver/plugin/pkg/authorizer/webhook"
	webhookmetrics "k8s.io/apiserver/plugin/pkg/authorizer/webhook/metrics"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// The configurations users run today are built from the same k8s.io/apiserver
// v0.37.2 pieces that authenticatorfactory.DelegatingAuthenticatorConfig and
// authorizerfactory.DelegatingAuthorizerConfig assemble (the kubelet,
// controller-runtime's metrics filter and kube-rbac-proxy all go through
// them): the TokenReview webhook authenticator behind token/cache.New(tok,
// false, ttl, ttl), and the SubjectAccessReview webhook authorizer with its
// LRU cache, retry backoff
// DefaultAuthWebhookRetryBackoff and NoOpinion on
// error. Two things differ, both so that their caches run on the
// simulation's clock and nothing else changes:
//
//   - token/cache.New is newWithClock with the real clock; the simulator
//     links to newWithClock (below) and passes its clock.
//   - the webhook authorizer builds its LRUExpireCache with the real clock;
//     the simulator replaces it, before first use, with the same cache type
//     and size on its clock (withClock).
//
// Their audience is the node agent's, like reviewauth's, so that the same
// tokens are valid for every configuration (the kubelet and
// controller-runtime set none; the review count does not depend on it).

//go:linkname newTokenCacheWithClock k8s.io/apiserver/pkg/authentication/token/cache.newWithClock
func newTokenCacheWithClock(a authenticator.Token, cacheErrs bool, successTTL, failureTTL time.Duration, clk clock.Clock) authenticator.Token

// sarCacheSize is the size of the webhook authorizer's LRU cache.
const sarCacheSize = 8192

// newDelegatedAgent returns a node agent with k8s.io/apiserver's delegated
// authentication (token cache TTL tokenTTL for successes and failures) and
// authorization (allowed and denied TTLs). A zero allowed and denied TTL
// means no SAR cache: a SubjectAccessReview per request.
func newDelegatedAgent(cfg *rest.Config, clk clock.Clock, tokenTTL, allowed, denied time.Duration) (*agent, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	// k8s.io/apiserver/pkg/server/options.DefaultAuthWebhookRetryBackoff,
	// copied (as controller-runtime does) to keep that package's
	// dependencies out of the simulator.
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	wh, err := tokenwebhook.NewFromInterface(cs.AuthenticationV1(), authenticator.Audiences{audience}, backoff, 10*time.Second,
		tokenwebhook.AuthenticatorMetrics{
			RecordRequestTotal:   func(context.Context, string) {},
			RecordRequestLatency: func(context.Context, string, float64) {},
		})
	if err != nil {
		return nil, err
	}
	az, err := authzwebhook.NewFromInterface(cs.AuthorizationV1(), allowed, denied, backoff,
		authorizer.DecisionNoOpinion, webhookmetrics.NoopAuthorizerMetrics{}, nil)
	if err != nil {
		return nil, err
	}
	if allowed > 0 || denied > 0 {
		if err := withClock(az, clk); err != nil {
			return nil, err
		}
	}
	// With both TTLs zero the real-clock cache is left: its entries expire
	// at once, so every request sends a SubjectAccessReview.
	return &agent{
		authn:     newTokenCacheWithClock(wh, false, tokenTTL, tokenTTL, clk),
		audiences: authenticator.Audiences{audience},
		authz:     az,
	}, nil
}

// withClock replaces az's response cache with an empty one of the same
// size on clk.
func withClock(az *authzwebhook.WebhookAuthorizer, clk clock.PassiveClock) error {
	f := reflect.ValueOf(az).Elem().FieldByName("responseCache")
	want := reflect.TypeFor[*utilcache.LRUExpireCache]()
	if !f.IsValid() || f.Type() != want {
		return fmt.Errorf("k8s.io/apiserver's WebhookAuthorizer has no responseCache field of type %v: update withClock", want)
	}
	c := utilcache.NewLRUExpireCacheWithClock(sarCacheSize, clk)
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(c))
	return nil
}
