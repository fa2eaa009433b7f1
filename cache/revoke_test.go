package cache_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/cache"
)

// boundUser is a pod-bound service account on a node, as a real API server
// authenticates one (CONTEXT.md): the ServiceAccount's UID, and the pod's
// and node's UIDs in the extras.
func boundUser(sa, pod, node string) *user.DefaultInfo {
	u := &user.DefaultInfo{Name: "system:serviceaccount:default:backup", UID: sa, Extra: map[string][]string{
		"authentication.kubernetes.io/credential-id": {"JTI=" + sa + pod + node},
	}}
	if pod != "" {
		u.Extra[serviceaccount.PodNameKey] = []string{"backup-0"}
		u.Extra[serviceaccount.PodUIDKey] = []string{pod}
	}
	if node != "" {
		u.Extra[serviceaccount.NodeNameKey] = []string{"node-a"}
		u.Extra[serviceaccount.NodeUIDKey] = []string{node}
	}
	return u
}

// apiServerTokens is an authenticator that, like the API server, keeps
// authenticating each token as the user it was minted for, whatever was
// deleted meanwhile (its own 10 s token cache), and counts its calls.
func apiServerTokens(users map[string]user.Info) *fakeToken {
	return newFakeToken(func(_ context.Context, token string) (*authenticator.Response, bool, error) {
		if u, ok := users[token]; ok {
			return &authenticator.Response{User: u}, true, nil
		}
		return nil, false, &reviewauth.RejectedError{Reason: "unknown token"}
	})
}

// TestRevokeForgetsAndRefusesBoundIdentities: Revoke of a ServiceAccount's,
// a pod's or a node's UID forgets the identities bound to it and refuses
// them when the API server still authenticates their tokens (401, cached as
// a rejection); identities bound to other UIDs stay cached.
func TestRevokeForgetsAndRefusesBoundIdentities(t *testing.T) {
	t.Parallel()
	users := map[string]user.Info{
		"pod-token":  boundUser("sa-1", "pod-1", "node-1"),
		"pod2-token": boundUser("sa-1", "pod-2", "node-1"),
		"sa-token":   boundUser("sa-1", "", ""),
		"other":      boundUser("sa-2", "pod-3", "node-2"),
		"two-pods":   &user.DefaultInfo{Name: "x", Extra: map[string][]string{serviceaccount.PodUIDKey: {"pod-9", "pod-1"}}},
		"no-uids":    &user.DefaultInfo{Name: "anonymous-ish"},
	}
	tests := []struct {
		name    string
		revoke  []types.UID
		refused []string // the others stay cached
	}{
		{"a pod", []types.UID{"pod-1"}, []string{"pod-token", "two-pods"}},
		{"a node", []types.UID{"node-1"}, []string{"pod-token", "pod2-token"}},
		{"a service account", []types.UID{"sa-1"}, []string{"pod-token", "pod2-token", "sa-token"}},
		{"several at once", []types.UID{"pod-2", "node-2"}, []string{"pod2-token", "other"}},
		{"unknown", []types.UID{"pod-404"}, nil},
		{"empty UIDs are ignored", []types.UID{"", ""}, nil},
		{"none", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inner := apiServerTokens(users)
			c := newTokenCache(t, inner, cache.TokenOptions{})
			ctx := context.Background()
			for tok := range users {
				if _, ok, err := c.AuthenticateToken(ctx, tok); !ok {
					t.Fatalf("AuthenticateToken(%s) = %v", tok, err)
				}
			}
			c.Revoke(tt.revoke...)
			refused := map[string]bool{}
			for _, tok := range tt.refused {
				refused[tok] = true
			}
			for round := range 2 {
				for tok := range users {
					resp, ok, err := c.AuthenticateToken(ctx, tok)
					switch {
					case refused[tok] && (ok || resp != nil || !errors.Is(err, reviewauth.ErrUnauthenticated)):
						t.Errorf("round %d: AuthenticateToken(%s) after Revoke(%v) = (%v, %v, %v); want a rejection", round, tok, tt.revoke, resp, ok, err)
					case !refused[tok] && (!ok || err != nil):
						t.Errorf("round %d: AuthenticateToken(%s) after Revoke(%v) = (%v, %v); want authenticated", round, tok, tt.revoke, ok, err)
					}
					// A refused token was forgotten (asked again once, then
					// the rejection is cached); the others were never
					// asked again.
					want := 1
					if refused[tok] {
						want = 2
					}
					if n := inner.count(tok); n != want {
						t.Errorf("round %d: calls for %s = %d; want %d", round, tok, n, want)
					}
				}
			}
		})
	}
}

// TestRevokeRetentionEdges: an identity bound to a revoked UID is refused
// for RevocationRetention after the Revoke (at retention-1ns) and accepted
// again from then on (at retention), while the API server still
// authenticates it; a negative retention only forgets.
func TestRevokeRetentionEdges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		retention time.Duration // option
		elapsed   time.Duration
		refused   bool
	}{
		{"at once", 0, 0, true},
		{"default retention minus 1ns", 0, cache.DefaultRevocationRetention - time.Nanosecond, true},
		{"default retention", 0, cache.DefaultRevocationRetention, false},
		{"custom retention minus 1ns", 5 * time.Second, 5*time.Second - time.Nanosecond, true},
		{"custom retention", 5 * time.Second, 5 * time.Second, false},
		{"disabled: forget only", -1, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
			inner := apiServerTokens(map[string]user.Info{"t1": boundUser("sa", "pod", ""), "t2": boundUser("sa", "pod", "")})
			c := newTokenCache(t, inner, cache.TokenOptions{Clock: clk, RevocationRetention: tt.retention, SuccessTTL: time.Hour})
			ctx := context.Background()
			if _, ok, err := c.AuthenticateToken(ctx, "t1"); !ok {
				t.Fatal(err)
			}
			c.Revoke("pod")
			clk.Step(tt.elapsed)
			// t2 was never cached: a later review that returns the
			// identity; t1 was cached: forgotten, reviewed again.
			for _, tok := range []string{"t1", "t2"} {
				_, ok, err := c.AuthenticateToken(ctx, tok)
				if ok == tt.refused || (tt.refused && !errors.Is(err, reviewauth.ErrUnauthenticated)) {
					t.Errorf("AuthenticateToken(%s) %v after Revoke = (%v, %v); want refused %v", tok, tt.elapsed, ok, err, tt.refused)
				}
			}
			if n := inner.count("t1"); n != 2 {
				t.Errorf("calls for t1 = %d; want 2 (forgotten by Revoke)", n)
			}
		})
	}
}

// TestRevokeBoundedCount: MaxRevoked UIDs are remembered, at the limit and
// past it: one more forgets the least recently revoked.
func TestRevokeBoundedCount(t *testing.T) {
	t.Parallel()
	const max = 3
	for _, n := range []int{max, max + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			users := map[string]user.Info{}
			for i := range n {
				users[fmt.Sprint("tok-", i)] = boundUser("sa", fmt.Sprint("pod-", i), "")
			}
			c := newTokenCache(t, apiServerTokens(users), cache.TokenOptions{MaxRevoked: max})
			for i := range n {
				c.Revoke(types.UID(fmt.Sprint("pod-", i)))
			}
			for i := range n {
				_, ok, _ := c.AuthenticateToken(context.Background(), fmt.Sprint("tok-", i))
				if wantOK := i < n-max; ok != wantOK {
					t.Errorf("%d revoked, MaxRevoked %d: pod-%d authenticated = %v; want %v", n, max, i, ok, wantOK)
				}
			}
		})
	}
}

// TestRevokeReviewInFlight: a review in flight when its pod is revoked is
// refused to everyone waiting for it and not cached, with the retention on;
// with the retention off (forget only) it is returned but still not
// cached.
func TestRevokeReviewInFlight(t *testing.T) {
	t.Parallel()
	for _, retention := range []time.Duration{0, -1} {
		t.Run(fmt.Sprint("retention ", retention), func(t *testing.T) {
			t.Parallel()
			started, release := make(chan struct{}, 1), make(chan struct{})
			var calls atomic.Int32
			inner := authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
				if calls.Add(1) == 1 {
					started <- struct{}{}
					<-release
				}
				return &authenticator.Response{User: boundUser("sa", "pod", "node")}, true, nil
			})
			c := newTokenCache(t, inner, cache.TokenOptions{RevocationRetention: retention})
			got := make(chan bool, 1)
			go func() { _, ok, _ := c.AuthenticateToken(context.Background(), "tok"); got <- ok }()
			<-started
			c.Revoke("node")
			close(release)
			if ok := <-got; ok != (retention < 0) {
				t.Errorf("the review in flight across Revoke: authenticated = %v; want %v", ok, retention < 0)
			}
			// With the retention, the refusal is cached as a rejection;
			// without, the next call asks again.
			wantCalls := int32(1)
			if retention < 0 {
				wantCalls = 2
			}
			_, ok, _ := c.AuthenticateToken(context.Background(), "tok")
			if n := calls.Load(); n != wantCalls || ok != (retention < 0) {
				t.Errorf("next call: authenticated %v after %d calls; want %v after %d (the review in flight was not cached as a success)", ok, n, retention < 0, wantCalls)
			}
		})
	}
}

// TestRevokeNeverServedStale: a revoked identity is never served
// stale-if-error, whether Revoke came before the call or while the call
// waited for a review that then could not check.
func TestRevokeNeverServedStale(t *testing.T) {
	t.Parallel()
	for _, during := range []bool{false, true} {
		t.Run(fmt.Sprint("during the call ", during), func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
			var down atomic.Bool
			started, release := make(chan struct{}, 1), make(chan struct{})
			inner := authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
				if down.Load() {
					if during {
						started <- struct{}{}
						<-release
					}
					return nil, false, errOutage
				}
				return &authenticator.Response{User: boundUser("sa", "pod", "")}, true, nil
			})
			c := newTokenCache(t, inner, cache.TokenOptions{Clock: clk, SuccessTTL: time.Minute, StaleIfError: time.Hour})
			if _, ok, err := c.AuthenticateToken(context.Background(), "tok"); !ok {
				t.Fatal(err)
			}
			clk.Step(2 * time.Minute)
			down.Store(true)
			got := make(chan error, 1)
			if during {
				go func() { _, _, err := c.AuthenticateToken(context.Background(), "tok"); got <- err }()
				<-started
				c.Revoke("pod")
				close(release)
			} else {
				c.Revoke("pod")
				_, _, err := c.AuthenticateToken(context.Background(), "tok")
				got <- err
			}
			if err := <-got; !errors.Is(err, reviewauth.ErrUnavailable) {
				t.Errorf("AuthenticateToken() of a revoked identity during an outage = %v; want ErrUnavailable, not the stale identity", err)
			}
		})
	}
}

// TestRevokeRace: callers authenticate a pod's tokens while the pod is
// revoked: once Revoke has returned, no call that starts afterwards is
// authenticated, whatever was in flight (run under -race). Bounded: 4
// callers of 200 calls each, in 5 rounds.
func TestRevokeRace(t *testing.T) {
	t.Parallel()
	toks := []string{"tok-0", "tok-1", "tok-2"}
	for round := range 5 {
		inner := authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
			return &authenticator.Response{User: boundUser("sa", "pod", "")}, true, nil
		})
		c := newTokenCache(t, inner, cache.TokenOptions{FailureTTL: -1})
		var revoked atomic.Bool
		var wg, running sync.WaitGroup
		var bad atomic.Int32
		running.Add(4)
		for g := range 4 {
			wg.Go(func() {
				running.Done()
				for i := range 200 {
					after := revoked.Load()
					_, ok, _ := c.AuthenticateToken(context.Background(), toks[(g+i)%len(toks)])
					if after && ok {
						bad.Add(1)
					}
				}
			})
		}
		running.Wait()
		c.Revoke("pod")
		revoked.Store(true)
		wg.Wait()
		for _, tok := range toks {
			if _, ok, _ := c.AuthenticateToken(context.Background(), tok); ok {
				bad.Add(1)
			}
		}
		if n := bad.Load(); n != 0 {
			t.Fatalf("round %d: %d calls that started after Revoke returned were authenticated", round, n)
		}
	}
}

// TestForgetUser: ForgetUser forgets that user's decisions (stale Allows
// included) and no one else's; ForgetAll forgets everyone's.
func TestForgetUser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		forget    func(*cache.Authorizer)
		forgotten map[string]bool
	}{
		{"alice", func(a *cache.Authorizer) { a.ForgetUser("alice") }, map[string]bool{"alice": true}},
		{"nobody by that name", func(a *cache.Authorizer) { a.ForgetUser("carol") }, map[string]bool{}},
		{"empty name", func(a *cache.Authorizer) { a.ForgetUser("") }, map[string]bool{"": true}},
		{"all", func(a *cache.Authorizer) { a.ForgetAll() }, map[string]bool{"alice": true, "bob": true, "": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			calls := map[string]int{}
			var mu sync.Mutex
			inner := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				mu.Lock()
				defer mu.Unlock()
				calls[a.GetUser().GetName()]++
				return authorizer.DecisionAllow, "", nil
			})
			c := newAuthorizerCache(t, inner, cache.AuthorizerOptions{})
			names := []string{"alice", "bob", ""}
			for _, n := range names {
				c.Authorize(context.Background(), getPodsBy(n))
			}
			tt.forget(c)
			for _, n := range names {
				if d, _, err := c.Authorize(context.Background(), getPodsBy(n)); d != authorizer.DecisionAllow || err != nil {
					t.Errorf("Authorize(%q) = %v, %v; want Allow", n, d, err)
				}
				want := 1
				if tt.forgotten[n] {
					want = 2
				}
				if calls[n] != want {
					t.Errorf("calls for %q = %d; want %d", n, calls[n], want)
				}
			}
		})
	}
}

// TestForgetUserInFlight: a decision in flight when its user (or everyone)
// is forgotten goes to its callers but is not cached; a stale Allow is not
// served after a forget, even to a call that found it before.
func TestForgetUserInFlight(t *testing.T) {
	t.Parallel()
	for _, all := range []bool{false, true} {
		t.Run(fmt.Sprint("all ", all), func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
			var calls atomic.Int32
			var down, block atomic.Bool
			started, release := make(chan struct{}, 1), make(chan struct{})
			inner := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
				calls.Add(1)
				if block.CompareAndSwap(true, false) {
					started <- struct{}{}
					<-release
				}
				if down.Load() {
					return authorizer.DecisionNoOpinion, "", errOutage
				}
				return authorizer.DecisionAllow, "", nil
			})
			c := newAuthorizerCache(t, inner, cache.AuthorizerOptions{Clock: clk, AllowedTTL: time.Minute, StaleIfError: time.Hour})
			forget := func() {
				if all {
					c.ForgetAll()
				} else {
					c.ForgetUser("alice")
				}
			}
			authorize := func() chan authorizer.Decision {
				got := make(chan authorizer.Decision, 1)
				go func() { d, _, _ := c.Authorize(context.Background(), getPodsBy("alice")); got <- d }()
				return got
			}
			block.Store(true)
			got := authorize()
			<-started
			forget()
			release <- struct{}{}
			if d := <-got; d != authorizer.DecisionAllow {
				t.Errorf("the decision in flight = %v; want Allow for its caller", d)
			}
			if d, _, _ := c.Authorize(context.Background(), getPodsBy("alice")); d != authorizer.DecisionAllow || calls.Load() != 2 {
				t.Errorf("next call = %v after %d calls; want Allow after 2 (the decision in flight was not cached)", d, calls.Load())
			}
			// A stale Allow, found by a call that then waits for an
			// outage while the user is forgotten, is not served.
			clk.Step(2 * time.Minute)
			down.Store(true)
			block.Store(true)
			got = authorize()
			<-started
			forget()
			close(release)
			if d := <-got; d == authorizer.DecisionAllow {
				t.Errorf("a call across ForgetUser during an outage = %v; want no stale Allow", d)
			}
		})
	}
}
