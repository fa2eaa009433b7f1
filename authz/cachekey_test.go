package authz_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/metrics"
)

const (
	podNameExtra = "authentication.kubernetes.io/pod-name"
	podUIDExtra  = "authentication.kubernetes.io/pod-uid"
)

// withCredential returns the backup identity as a review of a freshly
// minted token reports it: same user, pod and node, a new credential-id.
func withCredential(jti string) *user.DefaultInfo {
	u := backup()
	u.Extra[authz.CredentialIDExtra] = []string{"JTI=" + jti}
	u.Extra[podNameExtra] = []string{"backup-0"}
	u.Extra[podUIDExtra] = []string{"0b3c7f52-0000-4000-8000-000000000003"}
	return u
}

// recordingPolicy is allowBackupPods that also keeps every spec it was
// asked about.
type recordingPolicy struct {
	mu    sync.Mutex
	specs []authorizationv1.SubjectAccessReviewSpec
}

func (p *recordingPolicy) policy(spec authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
	p.mu.Lock()
	p.specs = append(p.specs, spec)
	p.mu.Unlock()
	return allowBackupPods(spec)
}

func (p *recordingPolicy) extras() []map[string]authorizationv1.ExtraValue {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []map[string]authorizationv1.ExtraValue
	for _, s := range p.specs {
		out = append(out, s.Extra)
	}
	return out
}

func extraOf(u *user.DefaultInfo) map[string]authorizationv1.ExtraValue {
	out := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		out[k] = authorizationv1.ExtraValue(v)
	}
	return out
}

func equalExtras(a, b map[string]authorizationv1.ExtraValue) bool {
	return maps.EqualFunc(a, b, func(x, y authorizationv1.ExtraValue) bool { return slices.Equal(x, y) })
}

// TestCredentialIDSharesEntry: callers that differ only in the credential-id
// extra (a client minting a token per call) share one cache entry by
// default, and the one SubjectAccessReview sent carries the real extras of
// the caller that missed, credential-id included.
func TestCredentialIDSharesEntry(t *testing.T) {
	t.Parallel()
	p := &recordingPolicy{}
	f := newFixture(t, p.policy, authz.Options{})
	const calls = 5
	for i := range calls {
		u := withCredential(fmt.Sprintf("token-%d", i))
		if d, _, err := f.az.Authorize(context.Background(), getPods(u)); d != authorizer.DecisionAllow || err != nil {
			t.Fatalf("Authorize(token %d) = %v, %v; want Allow", i, d, err)
		}
	}
	if got := f.sars(); got != 1 {
		t.Errorf("SARs for %d calls with %d tokens of one caller = %d; want 1", calls, calls, got)
	}
	if got, want := p.extras(), extraOf(withCredential("token-0")); len(got) != 1 || !equalExtras(got[0], want) {
		t.Errorf("extras of the SARs sent = %v; want one with the first caller's real extras %v", got, want)
	}

	// After the TTL the entry is gone; the next review carries the
	// credential-id of the caller that missed.
	f.clock.Step(authz.DefaultAllowedTTL)
	u := withCredential("token-late")
	if d, _, err := f.az.Authorize(context.Background(), getPods(u)); d != authorizer.DecisionAllow || err != nil {
		t.Fatalf("Authorize(after the TTL) = %v, %v; want Allow", d, err)
	}
	if got := p.extras(); len(got) != 2 || !equalExtras(got[1], extraOf(u)) {
		t.Errorf("extras of the SARs sent = %v; want a second one with %v", got, extraOf(u))
	}
}

// TestCredentialIDColdHerdCoalesced: concurrent cold callers that differ
// only in credential-id share one SubjectAccessReview.
func TestCredentialIDColdHerdCoalesced(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	f := newFixture(t, allowBackupPods, authz.Options{Metrics: m})
	release := f.srv.Block(authtest.SubjectAccessReviews)
	const n = 20
	var wg sync.WaitGroup
	results := make(chan result, n)
	for i := range n {
		wg.Go(func() {
			d, r, err := f.az.Authorize(context.Background(), getPods(withCredential(fmt.Sprint(i))))
			results <- result{d, r, err}
		})
	}
	// Release the review once every other caller waits for it. Callers
	// that got their own review would never join: give up after a while
	// rather than hang.
	for start := time.Now(); metricValue(t, reg, "reviewauth_cache_coalesced_total", map[string]string{"cache": "sar"}) < n-1; {
		if time.Since(start) > 10*time.Second {
			release()
			wg.Wait()
			t.Fatalf("after 10s, %v of %d callers joined the shared review (SARs sent: %d); want %d",
				metricValue(t, reg, "reviewauth_cache_coalesced_total", map[string]string{"cache": "sar"}), n, f.sars(), n-1)
		}
		waitABit()
	}
	release()
	wg.Wait()
	close(results)
	for r := range results {
		if r.d != authorizer.DecisionAllow || r.err != nil {
			t.Errorf("Authorize() = %v, %v; want Allow, nil", r.d, r.err)
		}
	}
	if got := f.sars(); got != 1 {
		t.Errorf("SARs for %d concurrent cold callers differing only in credential-id = %d; want 1", n, got)
	}
}

// TestCacheKeyIgnoredExtras: the option decides which extras split the
// cache. An empty list keeps credential-id in the key (for an authorizer
// that decides on it); a list replaces the default rather than adding to
// it.
func TestCacheKeyIgnoredExtras(t *testing.T) {
	t.Parallel()
	otherToken := func(u *user.DefaultInfo) { u.Extra[authz.CredentialIDExtra] = []string{"JTI=other"} }
	otherPod := func(u *user.DefaultInfo) {
		u.Extra[podNameExtra] = []string{"backup-1"}
		u.Extra[podUIDExtra] = []string{"0b3c7f52-0000-4000-8000-000000000004"}
	}
	noToken := func(u *user.DefaultInfo) { delete(u.Extra, authz.CredentialIDExtra) }
	tests := []struct {
		name     string
		ignored  []string
		mutate   func(u *user.DefaultInfo)
		wantSARs int
	}{
		{name: "default: another token shares", ignored: nil, mutate: otherToken, wantSARs: 1},
		{name: "default: no credential-id shares", ignored: nil, mutate: noToken, wantSARs: 1},
		{name: "default: another pod does not share", ignored: nil, mutate: otherPod, wantSARs: 2},
		{name: "empty: another token does not share", ignored: []string{}, mutate: otherToken, wantSARs: 2},
		{name: "empty: no credential-id does not share", ignored: []string{}, mutate: noToken, wantSARs: 2},
		{name: "pod extras: another pod shares", ignored: []string{podNameExtra, podUIDExtra}, mutate: otherPod, wantSARs: 1},
		{name: "pod extras: another token does not share", ignored: []string{podNameExtra, podUIDExtra}, mutate: otherToken, wantSARs: 2},
		{name: "duplicates", ignored: []string{authz.CredentialIDExtra, authz.CredentialIDExtra}, mutate: otherToken, wantSARs: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &recordingPolicy{}
			f := newFixture(t, p.policy, authz.Options{CacheKeyIgnoredExtras: tt.ignored})
			first, second := withCredential("first"), withCredential("first")
			tt.mutate(second)
			for _, u := range []*user.DefaultInfo{first, second} {
				if d, _, err := f.az.Authorize(context.Background(), getPods(u)); d != authorizer.DecisionAllow || err != nil {
					t.Fatalf("Authorize() = %v, %v; want Allow", d, err)
				}
			}
			if got := f.sars(); got != tt.wantSARs {
				t.Errorf("SARs = %d; want %d", got, tt.wantSARs)
			}
			// Whatever the key, every SAR sent carries its caller's real
			// extras.
			got := p.extras()
			for i, u := range []*user.DefaultInfo{first, second}[:len(got)] {
				if !equalExtras(got[i], extraOf(u)) {
					t.Errorf("SAR %d extras = %v; want %v", i, got[i], extraOf(u))
				}
			}
		})
	}
}

// TestCredentialIDSharesOnlyWhatItShould: an identity that differs from a
// cached one in credential-id and in anything else never shares its entry.
func TestCredentialIDSharesOnlyWhatItShould(t *testing.T) {
	t.Parallel()
	exact := withCredential("a")
	policy := func(spec authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
		if spec.User == exact.Name && equalExtras(withoutCredential(spec.Extra), withoutCredential(extraOf(exact))) &&
			slices.Equal(spec.Groups, exact.Groups) && spec.UID == exact.UID {
			return true, false, "", ""
		}
		return false, false, "", ""
	}
	tests := []struct {
		name   string
		mutate func(u *user.DefaultInfo)
	}{
		{name: "and the pod", mutate: func(u *user.DefaultInfo) { u.Extra[podNameExtra] = []string{"backup-1"} }},
		{name: "and the node", mutate: func(u *user.DefaultInfo) { u.Extra["authentication.kubernetes.io/node-name"] = []string{"node-b"} }},
		{name: "and the uid", mutate: func(u *user.DefaultInfo) { u.UID = "other" }},
		{name: "and a group", mutate: func(u *user.DefaultInfo) { u.Groups = append(u.Groups, "system:masters") }},
		{name: "and its value moved to another key", mutate: func(u *user.DefaultInfo) {
			u.Extra[authz.CredentialIDExtra+"x"] = u.Extra[authz.CredentialIDExtra]
			delete(u.Extra, authz.CredentialIDExtra)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, policy, authz.Options{})
			if d, _, err := f.az.Authorize(context.Background(), getPods(exact)); d != authorizer.DecisionAllow || err != nil {
				t.Fatalf("Authorize(exact) = %v, %v; want Allow", d, err)
			}
			variant := withCredential("b")
			tt.mutate(variant)
			if d, _, err := f.az.Authorize(context.Background(), getPods(variant)); d != authorizer.DecisionNoOpinion || err != nil {
				t.Errorf("Authorize(variant) = %v, %v; want NoOpinion from its own SAR", d, err)
			}
			if got := f.sars(); got != 2 {
				t.Errorf("SARs = %d; want 2", got)
			}
		})
	}
}

func withoutCredential(e map[string]authorizationv1.ExtraValue) map[string]authorizationv1.ExtraValue {
	out := maps.Clone(e)
	delete(out, authz.CredentialIDExtra)
	return out
}
