package revocation_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	"k8s.io/client-go/rest"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/cache"
	"github.com/reviewauth/reviewauth/revocation"
)

// The caches and the composed types are what a Revoker drives.
var (
	_ revocation.IdentityRevoker   = (*cache.TokenAuthenticator)(nil)
	_ revocation.IdentityRevoker   = (*authn.Authenticator)(nil)
	_ revocation.DecisionForgetter = (*cache.Authorizer)(nil)
	_ revocation.DecisionForgetter = (*authz.Authorizer)(nil)
)

// TestNewValidates: New refuses options that cannot work, naming the
// problem, and accepts each resource with what it needs.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	for _, tc := range []struct {
		name string
		opts revocation.Options
		want string // "" for no error
	}{
		{"nothing", revocation.Options{}, "nothing to watch"},
		{"unknown", revocation.Options{Watch: []revocation.Resource{"secrets"}}, `unknown resource "secrets"`},
		{"pods without a node", revocation.Options{Watch: []revocation.Resource{revocation.Pods}, Identities: rec}, "node's name"},
		{"node without a node", revocation.Options{Watch: []revocation.Resource{revocation.Node}, Identities: rec}, "node's name"},
		{"bad node name", revocation.Options{Watch: []revocation.Resource{revocation.Pods}, NodeName: "Node A", Identities: rec}, `node name "Node A"`},
		{"pods without a revoker", revocation.Options{Watch: []revocation.Resource{revocation.Pods}, NodeName: "n"}, "needs an IdentityRevoker"},
		{"serviceaccounts without a client", revocation.Options{Watch: []revocation.Resource{revocation.ServiceAccounts}, Identities: rec}, "needs a metadata client"},
		{"roles without a forgetter", revocation.Options{Watch: []revocation.Resource{revocation.Roles}}, "needs a DecisionForgetter"},
		{"clusterroles without a client", revocation.Options{Watch: []revocation.Resource{revocation.ClusterRoles}, Decisions: rec}, "needs an RBAC client"},
		{"namespaces for nothing", revocation.Options{Watch: []revocation.Resource{revocation.ClusterRoles}, Decisions: rec, Namespaces: []string{"a"}}, "neither is watched"},
		{"bad namespace", revocation.Options{Watch: []revocation.Resource{revocation.Roles}, Decisions: rec, Namespaces: []string{"A_b"}}, `namespace "A_b"`},
		{"negative stall timeout", revocation.Options{Watch: []revocation.Resource{revocation.Roles}, Decisions: rec, StallTimeout: -1}, "stall timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := revocation.New(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "revocation: ") {
				t.Errorf("New() = %v; want an error with %q", err, tc.want)
			}
		})
	}
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	for _, w := range revocation.Resources {
		if _, err := revocation.NewForConfig(cfg, revocation.Options{Watch: []revocation.Resource{w}, NodeName: "n", Identities: rec, Decisions: rec}); err != nil {
			t.Errorf("NewForConfig(%s) = %v; want nil", w, err)
		}
	}
	if _, err := revocation.NewForConfig(nil, revocation.Options{}); err == nil {
		t.Errorf("NewForConfig(nil) = nil error; want one")
	}
}

// TestRunOnce: Run runs once; a second call fails at once and the first
// goes on.
func TestRunOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, revocation.Options{Watch: []revocation.Resource{revocation.Pods}, NodeName: "n"})
	h.start()
	h.watcher("pods")
	if err := h.rev.Run(context.Background()); !errors.Is(err, revocation.ErrRunning) {
		t.Errorf("second Run() = %v; want ErrRunning", err)
	}
	h.last["pods"].Delete(pod("a/p", "u"))
	h.expect("revoke u")
}

// forwarding records each call, as recorder does, after passing it on.
type forwarding struct {
	rec *recorder
	ids revocation.IdentityRevoker
	dec revocation.DecisionForgetter
}

func (f forwarding) Revoke(uids ...types.UID) { f.ids.Revoke(uids...); f.rec.Revoke(uids...) }
func (f forwarding) ForgetUser(name string)   { f.dec.ForgetUser(name); f.rec.ForgetUser(name) }
func (f forwarding) ForgetAll()               { f.dec.ForgetAll(); f.rec.ForgetAll() }

// TestDeletedPodsTokenRefused drives package cache's token cache: once
// the pod a cached token is bound to is deleted, the token is refused at
// once, even while the wrapped authenticator (the API server, whose own
// cache keeps a deleted pod's token for 10 s) still accepts it; a token of
// another pod is still served from the cache.
func TestDeletedPodsTokenRefused(t *testing.T) {
	t.Parallel()
	var reviews atomic.Int32
	inner := authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		reviews.Add(1)
		return &authenticator.Response{User: &user.DefaultInfo{Name: "system:serviceaccount:a:app", UID: "sa-uid",
			Extra: map[string][]string{serviceaccount.PodUIDKey: {"pod-" + token}}}}, true, nil
	})
	var tokens *cache.TokenAuthenticator
	h := newHarness(t, revocation.Options{Watch: []revocation.Resource{revocation.Pods}, NodeName: "node-a"},
		func(h *harness, o *revocation.Options) {
			var err error
			if tokens, err = cache.NewTokenAuthenticator(inner, cache.TokenOptions{Clock: h.clock}); err != nil {
				t.Fatal(err)
			}
			o.Identities = forwarding{rec: h.rec, ids: tokens}
		})
	h.res["pods"].set(pod("a/one", "pod-1"), pod("a/two", "pod-2"))
	h.start()
	w := h.watcher("pods")
	ctx := context.Background()
	for _, tok := range []string{"1", "2"} {
		if _, ok, err := tokens.AuthenticateToken(ctx, tok); !ok || err != nil {
			t.Fatalf("AuthenticateToken(%s) = %v, %v; want authenticated", tok, ok, err)
		}
	}
	w.Delete(pod("a/one", "pod-1"))
	h.expect("revoke pod-1")
	if _, ok, err := tokens.AuthenticateToken(ctx, "1"); ok || err == nil {
		t.Errorf("AuthenticateToken(1) after its pod's deletion = %v, %v; want refused", ok, err)
	}
	if _, ok, err := tokens.AuthenticateToken(ctx, "2"); !ok || err != nil {
		t.Errorf("AuthenticateToken(2) after pod one's deletion = %v, %v; want authenticated", ok, err)
	}
	if got := reviews.Load(); got != 3 {
		t.Errorf("reviews = %d; want 3 (token 1 twice, token 2 from the cache)", got)
	}
}

// TestSecondFlushDropsALateAnswer drives package cache's decision cache
// through the race the second flush is for: our watch sees a RoleBinding
// deleted, the revoker flushes, the next request is asked again before the
// API server's own RBAC informer has the change, and the old Allow is
// cached again. The second flush, SecondFlush later, drops it: the request
// after it is denied. Without it (SecondFlush < 0) the Allow stays for its
// whole TTL.
func TestSecondFlushDropsALateAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		second time.Duration
		want   authorizer.Decision
	}{
		{"second flush", 0, authorizer.DecisionDeny},
		{"none", -1, authorizer.DecisionAllow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var informerHasIt atomic.Bool
			var asked atomic.Int32
			inner := authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				asked.Add(1)
				if informerHasIt.Load() {
					return authorizer.DecisionDeny, "", nil
				}
				return authorizer.DecisionAllow, "", nil
			})
			var decisions *cache.Authorizer
			h := newHarness(t, revocation.Options{Watch: []revocation.Resource{revocation.Roles}, SecondFlush: tc.second},
				func(h *harness, o *revocation.Options) {
					var err error
					if decisions, err = cache.NewAuthorizer(inner, cache.AuthorizerOptions{Clock: h.clock}); err != nil {
						t.Fatal(err)
					}
					o.Decisions = forwarding{rec: h.rec, dec: decisions}
				})
			binding := roleBinding("ns1/bob-pods", "Role", "pods", userSubject("bob"))
			h.res["rolebindings"].set(binding)
			h.start()
			w := h.watcher("rolebindings")
			h.watcher("roles")
			attrs := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "bob"}, Verb: "get", Namespace: "ns1", Resource: "pods", ResourceRequest: true}
			ctx := context.Background()
			authorize := func() authorizer.Decision {
				d, _, err := decisions.Authorize(ctx, attrs)
				if err != nil {
					t.Fatalf("Authorize() = %v", err)
				}
				return d
			}
			if d := authorize(); d != authorizer.DecisionAllow {
				t.Fatalf("Authorize() before = %v; want Allow", d)
			}
			t1 := h.clock.Now().Add(5 * time.Second)
			h.clock.SetTime(t1)
			w.Delete(binding)
			h.expect("user bob")
			authorize() // asked before the API server's informer caught up: Allow, cached
			informerHasIt.Store(true)
			if d := authorize(); d != authorizer.DecisionAllow {
				t.Fatalf("Authorize() from the cache = %v; want the late Allow (else this test shows nothing)", d)
			}
			if tc.second >= 0 {
				h.waitArmed(t1.Add(revocation.DefaultSecondFlush))
				h.clock.SetTime(t1.Add(revocation.DefaultSecondFlush))
				h.expect("user bob")
			} else {
				h.clock.SetTime(t1.Add(revocation.DefaultSecondFlush))
			}
			if d := authorize(); d != tc.want {
				t.Errorf("Authorize() after the second flush's time = %v; want %v", d, tc.want)
			}
		})
	}
}

// BenchmarkRevokerState measures what a revoker holds per watched object
// (its own state, not client-go's: the reflectors store nothing), for a
// cluster-wide service watching every ServiceAccount and all RBAC:
// b.N objects of each resource, realistic sizes (a binding with two
// subjects, a role with three rules).
func BenchmarkRevokerState(b *testing.B) {
	rec := newRecorder()
	r, err := revocation.New(revocation.Options{Watch: []revocation.Resource{revocation.ServiceAccounts, revocation.ClusterRoles, revocation.Roles},
		Identities: rec, Decisions: rec, Metadata: metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme()), RBAC: k8sfake.NewClientset().RbacV1()})
	if err != nil {
		b.Fatal(err)
	}
	n := max(b.N, 1000)
	objs := func(resource string) []any {
		out := make([]any, 0, n)
		for i := range n {
			name := fmt.Sprintf("ns-%05d/object-%05d", i/10, i)
			switch resource {
			case "serviceaccounts":
				out = append(out, object("ServiceAccount", name, fmt.Sprintf("0b5c8a9e-2f0d-4c6e-9a1b-%012d", i)))
			case "roles":
				out = append(out, role(name, "get", "list", "watch"))
			case "clusterroles":
				out = append(out, clusterRole(name[strings.IndexByte(name, '/')+1:], "get", "list", "watch"))
			case "rolebindings":
				out = append(out, roleBinding(name, "ClusterRole", "view", userSubject("someone@example.com"), sa("", "app")))
			case "clusterrolebindings":
				out = append(out, clusterRoleBinding(name[strings.IndexByte(name, '/')+1:], "view", userSubject("someone@example.com"), sa("ns", "app")))
			}
		}
		return out
	}
	b.ResetTimer()
	held := revocation.HeldBytes(r, objs)
	b.ReportMetric(float64(held)/float64(5*n), "B/object")
	b.ReportMetric(0, "ns/op")
}
