package authz_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/metrics"
)

// policyOf answers every review with the given status.
func policyOf(allowed, denied bool, reason, evalErr string) authtest.Policy {
	return func(authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
		return allowed, denied, reason, evalErr
	}
}

func TestAuthorizeDecisions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		policy     authtest.Policy
		fault      *authtest.Fault
		want       authorizer.Decision
		wantReason string
		wantErr    bool
	}{
		{name: "allowed", policy: policyOf(true, false, "ok", ""), want: authorizer.DecisionAllow, wantReason: "ok"},
		{name: "denied", policy: policyOf(false, true, "no", ""), want: authorizer.DecisionDeny, wantReason: "no"},
		{name: "neither is no opinion", policy: policyOf(false, false, "", ""), want: authorizer.DecisionNoOpinion},
		{name: "evaluation error alone is no opinion", policy: policyOf(false, false, "rbac", `clusterrole "x" not found`), want: authorizer.DecisionNoOpinion, wantReason: "rbac"},
		{name: "allowed despite evaluation error", policy: policyOf(true, false, "ok", `clusterrole "x" not found`), want: authorizer.DecisionAllow, wantReason: "ok"},
		{name: "both allowed and denied is could-not-check", policy: policyOf(true, false, "", ""), fault: &authtest.Fault{BothAllowedAndDenied: true}, want: authorizer.DecisionDeny, wantReason: "authtest: injected fault", wantErr: true},
		{name: "empty status is no opinion", policy: policyOf(true, false, "", ""), fault: &authtest.Fault{EmptyStatus: true}, want: authorizer.DecisionNoOpinion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tt.policy, authz.Options{})
			if tt.fault != nil {
				f.srv.InjectFault(authtest.SubjectAccessReviews, *tt.fault)
			}
			d, reason, err := f.az.Authorize(context.Background(), getPods(backup()))
			if d != tt.want || reason != tt.wantReason || (err != nil) != tt.wantErr {
				t.Fatalf("Authorize() = %v, %q, %v; want %v, %q, error %v", d, reason, err, tt.want, tt.wantReason, tt.wantErr)
			}
			if err != nil && !errors.Is(err, reviewauth.ErrUnavailable) {
				t.Errorf("Authorize() error = %v; want one matching ErrUnavailable", err)
			}
		})
	}
}

func TestSARContent(t *testing.T) {
	t.Parallel()
	u := backup()
	tests := []struct {
		name  string
		attrs authorizer.Attributes
		want  authorizationv1.SubjectAccessReviewSpec
	}{
		{
			name: "resource with selectors",
			attrs: withSelectors(t, authorizer.AttributesRecord{
				User: u, Verb: "list", Namespace: "ns", APIGroup: "snapshot.storage.k8s.io", APIVersion: "v1",
				Resource: "volumesnapshots", Subresource: "status", Name: "snap-1", ResourceRequest: true,
			}, "spec.nodeName=node-a,metadata.name!=x", "app in (a,b),!secret,tier"),
			want: authorizationv1.SubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: "ns", Verb: "list", Group: "snapshot.storage.k8s.io", Version: "v1",
					Resource: "volumesnapshots", Subresource: "status", Name: "snap-1",
					FieldSelector: &authorizationv1.FieldSelectorAttributes{Requirements: []metav1.FieldSelectorRequirement{
						// fields.ParseSelector sorts requirements by field.
						{Key: "metadata.name", Operator: metav1.FieldSelectorOpNotIn, Values: []string{"x"}},
						{Key: "spec.nodeName", Operator: metav1.FieldSelectorOpIn, Values: []string{"node-a"}},
					}},
					LabelSelector: &authorizationv1.LabelSelectorAttributes{Requirements: []metav1.LabelSelectorRequirement{
						{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}},
						{Key: "secret", Operator: metav1.LabelSelectorOpDoesNotExist},
						{Key: "tier", Operator: metav1.LabelSelectorOpExists},
					}},
				},
				User: u.Name, UID: u.UID, Groups: u.Groups,
				Extra: map[string]authorizationv1.ExtraValue{
					"authentication.kubernetes.io/credential-id": {"JTI=8f0f6a4e-1c1e-4a43-a3a8-6b4d2c1b3b52"},
					"authentication.kubernetes.io/node-name":     {"node-a"},
					"authentication.kubernetes.io/node-uid":      {"1d2e3f40-0000-4000-8000-000000000002"},
				},
			},
		},
		{
			name:  "non-resource",
			attrs: authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "prom", Groups: []string{"g"}}, Verb: "get", Path: "/metrics"},
			want: authorizationv1.SubjectAccessReviewSpec{
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
				User:                  "prom", Groups: []string{"g"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, nil, authz.Options{})
			if _, _, err := f.az.Authorize(context.Background(), tt.attrs); err != nil {
				t.Fatalf("Authorize() error = %v", err)
			}
			got := f.srv.SubjectAccessReviews()
			if len(got) != 1 {
				t.Fatalf("SubjectAccessReviews() = %d reviews; want 1", len(got))
			}
			if diff := cmp.Diff(tt.want, got[0].Spec); diff != "" {
				t.Errorf("SAR spec mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCacheTTL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy authtest.Policy
		opts   authz.Options
		ttl    time.Duration
	}{
		{name: "allowed default", policy: policyOf(true, false, "", ""), ttl: authz.DefaultAllowedTTL},
		{name: "denied default", policy: policyOf(false, true, "", ""), ttl: authz.DefaultDeniedTTL},
		{name: "no opinion uses denied TTL", policy: policyOf(false, false, "", ""), ttl: authz.DefaultDeniedTTL},
		{name: "allowed custom", policy: policyOf(true, false, "", ""), opts: authz.Options{AllowedTTL: 3 * time.Second, DeniedTTL: time.Hour}, ttl: 3 * time.Second},
		{name: "denied custom", policy: policyOf(false, true, "", ""), opts: authz.Options{AllowedTTL: time.Hour, DeniedTTL: 7 * time.Second}, ttl: 7 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tt.policy, tt.opts)
			a := getPods(backup())
			check := func(when string, wantSARs int) {
				t.Helper()
				if _, _, err := f.az.Authorize(context.Background(), a); err != nil {
					t.Fatalf("%s: Authorize() error = %v", when, err)
				}
				if got := f.sars(); got != wantSARs {
					t.Fatalf("%s: SARs = %d; want %d", when, got, wantSARs)
				}
			}
			check("cold", 1)
			f.clock.Step(tt.ttl - time.Nanosecond)
			check("at TTL-1ns", 1)
			f.clock.Step(time.Nanosecond)
			check("at TTL", 2)
		})
	}
}

func TestNegativeTTLDisablesCaching(t *testing.T) {
	t.Parallel()
	f := newFixture(t, policyOf(true, false, "", ""), authz.Options{AllowedTTL: -1})
	for i := range 3 {
		if d, _, err := f.az.Authorize(context.Background(), getPods(backup())); d != authorizer.DecisionAllow || err != nil {
			t.Fatalf("Authorize() #%d = %v, %v; want Allow", i, d, err)
		}
	}
	if got := f.sars(); got != 3 {
		t.Errorf("SARs = %d; want 3 (AllowedTTL < 0 caches nothing)", got)
	}
}

func TestErrorsAreNotCached(t *testing.T) {
	t.Parallel()
	f := newFixture(t, allowBackupPods, authz.Options{})
	f.srv.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{Status: http.StatusForbidden, Times: 1})
	a := getPods(backup())
	if d, _, err := f.az.Authorize(context.Background(), a); d == authorizer.DecisionAllow || err == nil {
		t.Fatalf("Authorize() with a 403 fault = %v, %v; want not Allow, an error", d, err)
	}
	if d, _, err := f.az.Authorize(context.Background(), a); d != authorizer.DecisionAllow || err != nil {
		t.Fatalf("Authorize() after the fault = %v, %v; want Allow, nil", d, err)
	}
	if got := f.sars(); got != 2 {
		t.Errorf("SARs = %d; want 2", got)
	}
}

func TestColdHerd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		attrs func(t *testing.T) authorizer.Attributes
	}{
		{name: "cacheable", attrs: func(*testing.T) authorizer.Attributes { return getPods(backup()) }},
		{name: "oversized, not cached but coalesced", attrs: func(t *testing.T) authorizer.Attributes {
			return withSelectors(t, getPods(backup()), "spec.nodeName="+strings.Repeat("n", authz.DefaultMaxCacheableAttributeBytes), "")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := metrics.New()
			reg := prometheus.NewRegistry()
			reg.MustRegister(m)
			f := newFixture(t, allowBackupPods, authz.Options{Metrics: m})
			release := f.srv.Block(authtest.SubjectAccessReviews)
			a := tt.attrs(t)
			const n = 100
			var wg sync.WaitGroup
			results := make(chan result, n)
			for range n {
				wg.Go(func() {
					d, r, err := f.az.Authorize(context.Background(), a)
					results <- result{d, r, err}
				})
			}
			// Release the one review only when the other 99 callers are
			// waiting for it, so that none of them is served by the cache.
			for metricValue(t, reg, "reviewauth_cache_coalesced_total", map[string]string{"cache": "sar"}) < n-1 {
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
				t.Errorf("%d concurrent identical cold checks made %d SARs; want 1", n, got)
			}
		})
	}
}

func TestOversizedNotCached(t *testing.T) {
	t.Parallel()
	const limit = 100
	base := getPods(backup())
	baseBytes := authz.AttributeBytes(base)
	tests := []struct {
		name     string
		pad      int // extra bytes in a field selector value
		wantSARs int
	}{
		{name: "one byte under the limit is cached", pad: limit - 1, wantSARs: 1},
		{name: "at the limit is not cached", pad: limit, wantSARs: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, allowBackupPods, authz.Options{MaxCacheableAttributeBytes: limit})
			// "spec.nodeName=" + value: the selector alone pushes the
			// request over the limit (kubernetes#141457).
			value := strings.Repeat("n", tt.pad-baseBytes-len("spec.nodeName")-len("="))
			a := withSelectors(t, base, "spec.nodeName="+value, "")
			if got := authz.AttributeBytes(a); got != tt.pad {
				t.Fatalf("AttributeBytes() = %d; want %d", got, tt.pad)
			}
			for range 2 {
				if d, _, err := f.az.Authorize(context.Background(), a); d != authorizer.DecisionAllow || err != nil {
					t.Fatalf("Authorize() = %v, %v; want Allow", d, err)
				}
			}
			if got := f.sars(); got != tt.wantSARs {
				t.Errorf("SARs after two identical checks = %d; want %d", got, tt.wantSARs)
			}
		})
	}
}

func TestSubjectsNeverShare(t *testing.T) {
	t.Parallel()
	// Only the exact backup identity is allowed; any variant must be asked
	// about separately and get no opinion.
	exact := backup()
	policy := func(spec authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
		want := authz.SARSpec(getPods(exact))
		if cmp.Equal(want, spec) {
			return true, false, "", ""
		}
		return false, false, "", ""
	}
	tests := []struct {
		name   string
		mutate func(u *user.DefaultInfo)
	}{
		{name: "one group more", mutate: func(u *user.DefaultInfo) { u.Groups = append(u.Groups, "system:masters") }},
		{name: "one group less", mutate: func(u *user.DefaultInfo) { u.Groups = u.Groups[:2] }},
		{name: "one group renamed", mutate: func(u *user.DefaultInfo) { u.Groups[0] = "system:serviceaccountz" }},
		{name: "groups concatenated", mutate: func(u *user.DefaultInfo) { u.Groups = []string{u.Groups[0] + u.Groups[1], u.Groups[2]} }},
		{name: "one extra value", mutate: func(u *user.DefaultInfo) { u.Extra["authentication.kubernetes.io/node-name"] = []string{"node-b"} }},
		{name: "one extra value more", mutate: func(u *user.DefaultInfo) {
			u.Extra["authentication.kubernetes.io/node-name"] = []string{"node-a", "node-b"}
		}},
		{name: "extra value moved to another key", mutate: func(u *user.DefaultInfo) {
			u.Extra["authentication.kubernetes.io/node-uid"] = append(u.Extra["authentication.kubernetes.io/node-uid"], "node-a")
			delete(u.Extra, "authentication.kubernetes.io/node-name")
		}},
		{name: "extra key more", mutate: func(u *user.DefaultInfo) { u.Extra["x"] = nil }},
		{name: "pod name", mutate: func(u *user.DefaultInfo) { u.Extra["authentication.kubernetes.io/pod-name"] = []string{"backup-0"} }},
		{name: "pod uid", mutate: func(u *user.DefaultInfo) { u.Extra["authentication.kubernetes.io/pod-uid"] = []string{"p-1"} }},
		// credential-id is left out of the key, so a variant that also
		// differs in it must still be told apart by everything else.
		{name: "another token and one group more", mutate: func(u *user.DefaultInfo) {
			u.Extra[authz.CredentialIDExtra] = []string{"JTI=other"}
			u.Groups = append(u.Groups, "system:masters")
		}},
		{name: "no token and another node", mutate: func(u *user.DefaultInfo) {
			delete(u.Extra, authz.CredentialIDExtra)
			u.Extra["authentication.kubernetes.io/node-name"] = []string{"node-b"}
		}},
		{name: "credential-id value under another key", mutate: func(u *user.DefaultInfo) {
			u.Extra["authentication.kubernetes.io/credential-idx"] = u.Extra[authz.CredentialIDExtra]
			delete(u.Extra, authz.CredentialIDExtra)
		}},
		{name: "uid", mutate: func(u *user.DefaultInfo) { u.UID = "other" }},
		{name: "name", mutate: func(u *user.DefaultInfo) { u.Name += "x" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, policy, authz.Options{})
			if d, _, err := f.az.Authorize(context.Background(), getPods(exact)); d != authorizer.DecisionAllow || err != nil {
				t.Fatalf("Authorize(exact) = %v, %v; want Allow", d, err)
			}
			variant := backup()
			tt.mutate(variant)
			d, _, err := f.az.Authorize(context.Background(), getPods(variant))
			if d != authorizer.DecisionNoOpinion || err != nil {
				t.Errorf("Authorize(variant) = %v, %v; want NoOpinion from its own SAR", d, err)
			}
			if got := f.sars(); got != 2 {
				t.Errorf("SARs = %d; want 2 (the variant must not hit the exact identity's entry)", got)
			}
		})
	}
}

func TestGroupOrderSharesEntry(t *testing.T) {
	t.Parallel()
	f := newFixture(t, allowBackupPods, authz.Options{})
	u := backup()
	if _, _, err := f.az.Authorize(context.Background(), getPods(u)); err != nil {
		t.Fatal(err)
	}
	u.Groups = []string{u.Groups[2], u.Groups[0], u.Groups[1]}
	if d, _, err := f.az.Authorize(context.Background(), getPods(u)); d != authorizer.DecisionAllow || err != nil {
		t.Fatalf("Authorize(reordered groups) = %v, %v; want Allow", d, err)
	}
	if got := f.sars(); got != 1 {
		t.Errorf("SARs = %d; want 1 (groups are a set)", got)
	}
}

func TestHitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	tests := []struct {
		name  string
		attrs authorizer.Attributes
	}{
		{name: "get pods", attrs: getPods(backup())},
		{name: "with selectors", attrs: withSelectors(t, getPods(backup()), "spec.nodeName=node-a", "app in (a,b),tier")},
		{name: "non-resource", attrs: nonResource(backup(), "get", "/metrics")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, policyOf(true, false, "", ""), authz.Options{})
			ctx := context.Background()
			if d, _, err := f.az.Authorize(ctx, tt.attrs); d != authorizer.DecisionAllow || err != nil {
				t.Fatalf("Authorize() = %v, %v; want Allow", d, err)
			}
			allocs := testing.AllocsPerRun(1000, func() {
				if d, _, _ := f.az.Authorize(ctx, tt.attrs); d != authorizer.DecisionAllow {
					t.Fatal("cache hit lost")
				}
			})
			t.Logf("Authorize() on a hit = %v allocs", allocs)
			if allocs > 1 {
				t.Errorf("Authorize() on a hit = %v allocs; want <= 1", allocs)
			}
			if got := f.sars(); got != 1 {
				t.Errorf("SARs = %d; want 1", got)
			}
		})
	}
}

func TestMaxInFlight(t *testing.T) {
	t.Parallel()
	f := newFixture(t, allowBackupPods, authz.Options{MaxInFlight: 2})
	release := f.srv.Block(authtest.SubjectAccessReviews)
	var wg sync.WaitGroup
	for i := range 6 {
		a := getPods(backup())
		a.Name = fmt.Sprintf("pod-%d", i) // distinct: no coalescing
		wg.Go(func() {
			if d, _, err := f.az.Authorize(context.Background(), a); d != authorizer.DecisionAllow || err != nil {
				t.Errorf("Authorize(%s) = %v, %v; want Allow", a.Name, d, err)
			}
		})
	}
	for f.srv.InFlight(authtest.SubjectAccessReviews) < 2 {
		waitABit()
	}
	release()
	wg.Wait()
	if got := f.srv.MaxInFlight(authtest.SubjectAccessReviews); got != 2 {
		t.Errorf("MaxInFlight(SARs) = %d; want 2", got)
	}
	if got := f.sars(); got != 6 {
		t.Errorf("SARs = %d; want 6", got)
	}
}

func TestCallerLeavesOnCancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t, allowBackupPods, authz.Options{})
	release := f.srv.Block(authtest.SubjectAccessReviews)
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() {
		d, r, err := f.az.Authorize(ctx, getPods(backup()))
		done <- result{d, r, err}
	}()
	for f.srv.InFlight(authtest.SubjectAccessReviews) == 0 {
		waitABit()
	}
	cancel()
	r := <-done
	if r.d == authorizer.DecisionAllow || !errors.Is(r.err, reviewauth.ErrUnavailable) || !errors.Is(r.err, context.Canceled) {
		t.Errorf("Authorize() after cancel = %v, %v; want Deny and an error matching ErrUnavailable and context.Canceled", r.d, r.err)
	}
	// The abandoned review is cancelled: the server sees the client go.
	for f.srv.InFlight(authtest.SubjectAccessReviews) != 0 {
		waitABit()
	}
}

func TestConditionsAndDropIn(t *testing.T) {
	t.Parallel()
	f := newFixture(t, allowBackupPods, authz.Options{})
	ctx := context.Background()
	if d := f.az.ConditionsAwareAuthorize(ctx, getPods(backup())); !d.IsAllow() {
		t.Errorf("ConditionsAwareAuthorize() = %v; want Allow", d)
	}
	d, _, err := f.az.EvaluateConditions(ctx, authorizer.ConditionsAwareDecision{}, nil)
	if d != authorizer.DecisionDeny || !errors.Is(err, authorizer.ErrorConditionEvaluationNotSupported) {
		t.Errorf("EvaluateConditions() = %v, %v; want Deny, ErrorConditionEvaluationNotSupported", d, err)
	}

	// union.New takes the full Authorizer.
	u, err := union.New(union.NamedAuthorizer{AuthorizerName: "reviewauth", Authorizer: f.az})
	if err != nil {
		t.Fatalf("union.New() = %v", err)
	}
	if d, _, err := u.Authorize(ctx, getPods(backup())); d != authorizer.DecisionAllow || err != nil {
		t.Errorf("union Authorize() = %v, %v; want Allow", d, err)
	}

	// filters.WithAuthorization takes an UnconditionalAuthorizer.
	var ok bool
	h := filters.WithAuthorization(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ok = true }), f.az, scheme.Codecs)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/api/v1/namespaces/default/pods/p", nil)
	rctx := request.WithUser(req.Context(), backup())
	rctx = request.WithRequestInfo(rctx, &request.RequestInfo{
		IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "pods", Namespace: "default", Name: "p",
		Path: req.URL.Path,
	})
	h.ServeHTTP(discard{}, req.WithContext(rctx))
	if !ok {
		t.Error("filters.WithAuthorization(Authorizer) did not pass an allowed request")
	}
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

func TestNewWithTypedClient(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	srv.SetPolicy(allowBackupPods)
	cs, err := kubernetes.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	az, err := authz.New(cs.AuthorizationV1().SubjectAccessReviews(), authz.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d, _, err := az.Authorize(context.Background(), getPods(backup())); d != authorizer.DecisionAllow || err != nil {
		t.Errorf("Authorize() = %v, %v; want Allow", d, err)
	}
	// The typed client decodes an object of another kind into an empty
	// SubjectAccessReview without error; it must still be could-not-check.
	srv.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{WrongKind: true})
	other := getPods(backup())
	other.Name = "other"
	if d, _, err := az.Authorize(context.Background(), other); d == authorizer.DecisionAllow || !errors.Is(err, reviewauth.ErrUnavailable) {
		t.Errorf("Authorize() answered with a TokenReview = %v, %v; want Deny with an error matching ErrUnavailable", d, err)
	}
}

func TestCacheBounded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, allowBackupPods, authz.Options{MaxEntries: 2})
	check := func(name string, wantSARs int) {
		t.Helper()
		a := getPods(backup())
		a.Name = name
		if d, _, err := f.az.Authorize(context.Background(), a); d != authorizer.DecisionAllow || err != nil {
			t.Fatalf("Authorize(%s) = %v, %v; want Allow", name, d, err)
		}
		if got := f.sars(); got != wantSARs {
			t.Fatalf("after Authorize(%s): SARs = %d; want %d", name, got, wantSARs)
		}
	}
	check("a", 1)
	check("b", 2)
	check("a", 2) // hit; b is now the least recently used
	check("c", 3) // evicts b
	check("a", 3)
	check("b", 4)
}

// client-go's typed client satisfies SubjectAccessReviewer (asserted here,
// not in the package, whose binaries need not link client-go's typed
// clients).
var _ authz.SubjectAccessReviewer = (authorizationv1client.SubjectAccessReviewInterface)(nil)

// TestClientCachesNothing: a Client alone sends a review for every call,
// and is what an Authorizer caches.
func TestClientCachesNothing(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	srv.SetPolicy(allowBackupPods)
	c, err := authz.NewClientForConfig(srv.Config(), authz.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if d, _, err := c.Authorize(context.Background(), getPods(backup())); d != authorizer.DecisionAllow || err != nil {
			t.Fatalf("Authorize() = %v, %v; want Allow", d, err)
		}
	}
	if n := srv.Count(authtest.SubjectAccessReviews); n != 3 {
		t.Errorf("SARs = %d; want 3", n)
	}
	if _, err := authz.NewClient(nil, authz.Options{}); err == nil {
		t.Error("NewClient(nil) = nil error; want an error")
	}
	az, err := authz.NewForConfig(srv.Config(), authz.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := az.Uncached().(*authz.Client); !ok {
		t.Errorf("Authorizer.Uncached() = %T; want *authz.Client", az.Uncached())
	}
}

// TestForgetUserAndAll: Authorizer.ForgetUser forgets one user's cached
// decisions, ForgetAll everyone's: the next request is reviewed again.
func TestForgetUserAndAll(t *testing.T) {
	t.Parallel()
	f := newFixture(t, policyOf(true, false, "", ""), authz.Options{})
	other := backup()
	other.Name = "other"
	authorize := func() {
		t.Helper()
		for _, u := range []user.Info{backup(), other} {
			if d, _, err := f.az.Authorize(context.Background(), getPods(u)); d != authorizer.DecisionAllow {
				t.Fatalf("Authorize(%s) = %v, %v; want Allow", u.GetName(), d, err)
			}
		}
	}
	for _, step := range []struct {
		forget func()
		sars   int
	}{
		{func() {}, 2},
		{func() {}, 2},
		{func() { f.az.ForgetUser(other.Name) }, 3},
		{func() { f.az.ForgetAll() }, 5},
	} {
		step.forget()
		authorize()
		if n := f.srv.Count(authtest.SubjectAccessReviews); n != step.sars {
			t.Fatalf("SubjectAccessReviews = %d; want %d", n, step.sars)
		}
	}
}
