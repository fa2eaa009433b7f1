package cache_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/cache"
	"github.com/reviewauth/reviewauth/metrics"
)

// fakeAuthorizer is an authorizer.Authorizer whose Authorize and
// ConditionsAwareAuthorize answers are functions, counting the calls of
// each.
type fakeAuthorizer struct {
	authorize  func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error)
	conditions func(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision
	calls      atomic.Int32
	caCalls    atomic.Int32
	evaluated  atomic.Int32
}

func (f *fakeAuthorizer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	f.calls.Add(1)
	return f.authorize(ctx, a)
}

func (f *fakeAuthorizer) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	f.caCalls.Add(1)
	if f.conditions == nil {
		return authorizer.ConditionsAwareDecisionFromParts(f.authorize(ctx, a))
	}
	return f.conditions(ctx, a)
}

func (f *fakeAuthorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	f.evaluated.Add(1)
	return authorizer.DecisionAllow, "evaluated", nil
}

// allowAlice allows alice and has no opinion on anyone else.
func allowAlice(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetUser() != nil && a.GetUser().GetName() == "alice" {
		return authorizer.DecisionAllow, "alice", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func newAuthorizerCache(t testing.TB, inner authorizer.Authorizer, opts cache.AuthorizerOptions) *cache.Authorizer {
	t.Helper()
	c, err := cache.NewAuthorizer(inner, opts)
	if err != nil {
		t.Fatalf("NewAuthorizer() = %v", err)
	}
	return c
}

func getPodsBy(name string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User: &user.DefaultInfo{Name: name, Groups: []string{"g1", "g2"}, Extra: map[string][]string{"k": {"v"}}},
		Verb: "get", Namespace: "default", APIVersion: "v1", Resource: "pods", Name: "p", ResourceRequest: true,
	}
}

// TestAuthorizerTTLEdges: an Allow lives AllowedTTL, a Deny and a
// NoOpinion DeniedTTL: a hit at TTL-1ns, a new call at TTL.
func TestAuthorizerTTLEdges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		d    authorizer.Decision
		opts cache.AuthorizerOptions
		ttl  time.Duration
	}{
		{"allow, default", authorizer.DecisionAllow, cache.AuthorizerOptions{}, cache.DefaultAllowedTTL},
		{"deny, default", authorizer.DecisionDeny, cache.AuthorizerOptions{}, cache.DefaultDeniedTTL},
		{"no opinion, default", authorizer.DecisionNoOpinion, cache.AuthorizerOptions{}, cache.DefaultDeniedTTL},
		{"allow, custom", authorizer.DecisionAllow, cache.AuthorizerOptions{AllowedTTL: 3 * time.Second, DeniedTTL: time.Hour}, 3 * time.Second},
		{"deny, custom", authorizer.DecisionDeny, cache.AuthorizerOptions{AllowedTTL: time.Hour, DeniedTTL: 7 * time.Second}, 7 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakeClock(time.Now())
			inner := &fakeAuthorizer{authorize: func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
				return tt.d, "why", nil
			}}
			tt.opts.Clock = clk
			c := newAuthorizerCache(t, inner, tt.opts)
			for _, step := range []struct {
				by    time.Duration
				calls int32
			}{{0, 1}, {tt.ttl - time.Nanosecond, 1}, {time.Nanosecond, 2}} {
				clk.Step(step.by)
				if d, reason, err := c.Authorize(context.Background(), getPodsBy("alice")); d != tt.d || reason != "why" || err != nil {
					t.Fatalf("Authorize() = %v, %q, %v; want %v, why", d, reason, err, tt.d)
				}
				if n := inner.calls.Load(); n != step.calls {
					t.Errorf("calls after %v more = %d; want %d", step.by, n, step.calls)
				}
			}
		})
	}
}

var errBoom = errors.New("boom")

// TestAuthorizerErrors: an error is never cached and comes back with the
// wrapped authorizer's own decision and reason: the decorator changes no
// answer (the edges, authz.Check and httpauth, refuse whatever decision
// comes with an error).
func TestAuthorizerErrors(t *testing.T) {
	t.Parallel()
	for _, d := range []authorizer.Decision{authorizer.DecisionAllow, authorizer.DecisionDeny, authorizer.DecisionNoOpinion} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			inner := &fakeAuthorizer{authorize: func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
				return d, "webhook down", errBoom
			}}
			c := newAuthorizerCache(t, inner, cache.AuthorizerOptions{})
			for range 2 {
				got, reason, err := c.Authorize(context.Background(), getPodsBy("alice"))
				if got != d || reason != "webhook down" || err != errBoom {
					t.Errorf("Authorize() = %v, %q, %v; want %v, the reason, the error", got, reason, err, d)
				}
			}
			if n := inner.calls.Load(); n != 2 {
				t.Errorf("calls = %d; want 2 (errors are not cached)", n)
			}
		})
	}
}

// TestAuthorizerDisabledTTLs: a negative TTL caches nothing of that kind.
func TestAuthorizerDisabledTTLs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d    authorizer.Decision
		opts cache.AuthorizerOptions
	}{
		{authorizer.DecisionAllow, cache.AuthorizerOptions{AllowedTTL: -1}},
		{authorizer.DecisionDeny, cache.AuthorizerOptions{DeniedTTL: -1}},
	} {
		inner := &fakeAuthorizer{authorize: func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
			return tt.d, "", nil
		}}
		c := newAuthorizerCache(t, inner, tt.opts)
		for range 3 {
			c.Authorize(context.Background(), getPodsBy("alice"))
		}
		if n := inner.calls.Load(); n != 3 {
			t.Errorf("%v with its TTL < 0: calls = %d; want 3", tt.d, n)
		}
	}
}

// TestAuthorizerColdHerd: 100 concurrent identical cold calls make one
// call of the wrapped authorizer, cacheable or too large to cache.
func TestAuthorizerColdHerd(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, cache.DefaultMaxCacheableAttributeBytes} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			inner := &fakeAuthorizer{authorize: func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				<-release
				return allowAlice(ctx, a)
			}}
			m := metrics.New()
			c := newAuthorizerCache(t, inner, cache.AuthorizerOptions{Metrics: m})
			attrs := getPodsBy("alice")
			attrs.Name = strings.Repeat("n", size)
			const n = 100
			var wg sync.WaitGroup
			var failed atomic.Int32
			for range n {
				wg.Go(func() {
					if d, _, err := c.Authorize(context.Background(), attrs); d != authorizer.DecisionAllow || err != nil {
						failed.Add(1)
					}
				})
			}
			for metricValue(t, m, "reviewauth_cache_coalesced_total", "authorizer") < n-1 {
				runtime.Gosched()
			}
			close(release)
			wg.Wait()
			if failed.Load() != 0 || inner.calls.Load() != 1 {
				t.Errorf("failed %d, calls %d; want 0, 1", failed.Load(), inner.calls.Load())
			}
		})
	}
}

// TestAuthorizerCallerLeavesOnItsOwnDeadline: a caller whose context ends
// leaves with Deny and "could not check"; the shared call goes on for a
// caller with a later deadline.
func TestAuthorizerCallerLeavesOnItsOwnDeadline(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	inner := &fakeAuthorizer{authorize: func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		started <- struct{}{}
		<-release
		return allowAlice(ctx, a)
	}}
	m := metrics.New()
	c := newAuthorizerCache(t, inner, cache.AuthorizerOptions{Metrics: m})
	short, cancel := context.WithCancel(context.Background())
	type res struct {
		d   authorizer.Decision
		err error
	}
	first := make(chan res, 1)
	go func() { d, _, err := c.Authorize(short, getPodsBy("alice")); first <- res{d, err} }()
	<-started
	second := make(chan res, 1)
	go func() { d, _, err := c.Authorize(context.Background(), getPodsBy("alice")); second <- res{d, err} }()
	for metricValue(t, m, "reviewauth_cache_coalesced_total", "authorizer") < 1 {
		runtime.Gosched()
	}
	cancel()
	if r := <-first; r.d != authorizer.DecisionDeny || !errors.Is(r.err, reviewauth.ErrUnavailable) || !errors.Is(r.err, context.Canceled) {
		t.Errorf("the caller that left = %v, %v; want Deny and ErrUnavailable wrapping context.Canceled", r.d, r.err)
	}
	close(release)
	if r := <-second; r.d != authorizer.DecisionAllow || r.err != nil {
		t.Errorf("the caller that stayed = %v, %v; want Allow", r.d, r.err)
	}
	if n := inner.calls.Load(); n != 1 {
		t.Errorf("calls = %d; want 1", n)
	}
}

// TestAuthorizerBounded: MaxEntries at the limit and past it.
func TestAuthorizerBounded(t *testing.T) {
	t.Parallel()
	inner := &fakeAuthorizer{authorize: allowAlice}
	c := newAuthorizerCache(t, inner, cache.AuthorizerOptions{MaxEntries: 2})
	check := func(name string, want int32) {
		t.Helper()
		a := getPodsBy("alice")
		a.Name = name
		c.Authorize(context.Background(), a)
		if n := inner.calls.Load(); n != want {
			t.Fatalf("after %s: calls = %d; want %d", name, n, want)
		}
	}
	check("a", 1)
	check("b", 2)
	check("a", 2) // at the limit: a hit; b is now the least recently used
	check("c", 3) // limit + 1: evicts b
	check("a", 3)
	check("b", 4)
}

// TestAuthorizerOversizedNotCached: a request whose caller-controlled
// attributes reach MaxCacheableAttributeBytes is not cached; one byte
// under, it is.
func TestAuthorizerOversizedNotCached(t *testing.T) {
	t.Parallel()
	const limit = 100
	base := getPodsBy("alice")
	base.Name = ""
	baseBytes := len(base.Verb) + len(base.Namespace) + len(base.APIVersion) + len(base.Resource)
	for _, tt := range []struct {
		size  int
		calls int32
	}{{limit - 1, 1}, {limit, 2}} {
		inner := &fakeAuthorizer{authorize: allowAlice}
		c := newAuthorizerCache(t, inner, cache.AuthorizerOptions{MaxCacheableAttributeBytes: limit})
		a := base
		a.Name = strings.Repeat("n", tt.size-baseBytes)
		for range 2 {
			c.Authorize(context.Background(), a)
		}
		if n := inner.calls.Load(); n != tt.calls {
			t.Errorf("attributes of %d bytes: calls = %d; want %d", tt.size, n, tt.calls)
		}
	}
}

// TestAuthorizerKeyCoversEveryAttribute: by default, requests that differ
// in any attribute an authorizer can read never share an entry, selectors
// with operators a SubjectAccessReview cannot carry, their parse errors and
// every extra (credential-id included) among them; with
// SubjectAccessReviewKey, requests that make the same review do share.
func TestAuthorizerKeyCoversEveryAttribute(t *testing.T) {
	t.Parallel()
	parse := func(field, label string) authorizer.AttributesRecord {
		a := getPodsBy("alice")
		a.Verb = "list"
		if field != "" {
			fs, err := fields.ParseSelector(field)
			if err != nil {
				t.Fatal(err)
			}
			a.FieldSelectorRequirements = fs.Requirements()
		}
		if label != "" {
			ls, err := labels.Parse(label)
			if err != nil {
				t.Fatal(err)
			}
			a.LabelSelectorRequirements, _ = ls.Requirements()
		}
		return a
	}
	with := func(f func(a *authorizer.AttributesRecord)) authorizer.AttributesRecord {
		a := parse("", "")
		f(&a)
		return a
	}
	nonResource := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "alice"}, Verb: "get", Path: "/metrics"}
	tests := []struct {
		name      string
		a, b      authorizer.AttributesRecord
		sameAsSAR bool // the two make the same SubjectAccessReview
	}{
		{"label GreaterThan vs none", parse("", "x>5"), parse("", ""), true},
		{"label GreaterThan vs LessThan", parse("", "x>5"), parse("", "x<5"), true},
		{"label = vs in", parse("", "x=a"), parse("", "x in (a)"), true},
		{"label parse error vs none", with(func(a *authorizer.AttributesRecord) { a.LabelSelectorParsingErr = errors.New("bad") }), parse("", ""), true},
		{"field parse error vs another", with(func(a *authorizer.AttributesRecord) { a.FieldSelectorParsingErr = errors.New("x") }),
			with(func(a *authorizer.AttributesRecord) { a.FieldSelectorParsingErr = errors.New("y") }), true},
		{"non-resource request with a namespace", nonResource, func() authorizer.AttributesRecord { a := nonResource; a.Namespace = "ns"; return a }(), true},
		{"resource request with a path", parse("", ""), with(func(a *authorizer.AttributesRecord) { a.Path = "/x" }), true},
		{"credential-id extra", with(func(a *authorizer.AttributesRecord) {
			a.User = &user.DefaultInfo{Name: "alice", Extra: map[string][]string{user.CredentialIDKey: {"JTI=1"}}}
		}), with(func(a *authorizer.AttributesRecord) {
			a.User = &user.DefaultInfo{Name: "alice", Extra: map[string][]string{user.CredentialIDKey: {"JTI=2"}}}
		}), false},
		{"label values", parse("", "x in (a,b)"), parse("", "x in (a,c)"), false},
		{"resource vs non-resource", with(func(a *authorizer.AttributesRecord) { a.ResourceRequest = false }), parse("", ""), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, sar := range []bool{false, true} {
				inner := &fakeAuthorizer{authorize: allowAlice}
				c := newAuthorizerCache(t, inner, cache.AuthorizerOptions{SubjectAccessReviewKey: sar})
				c.Authorize(context.Background(), tt.a)
				c.Authorize(context.Background(), tt.b)
				want := int32(2)
				if sar && tt.sameAsSAR {
					want = 1
				}
				if n := inner.calls.Load(); n != want {
					t.Errorf("SubjectAccessReviewKey %v: calls = %d; want %d", sar, n, want)
				}
			}
		})
	}
}

// TestAuthorizerIgnoredExtras: CacheKeyIgnoredExtras leaves the named
// extras out of the key; the wrapped authorizer sees the extras of the
// caller that missed.
func TestAuthorizerIgnoredExtras(t *testing.T) {
	t.Parallel()
	var seen []string
	var mu sync.Mutex
	inner := &fakeAuthorizer{authorize: func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		mu.Lock()
		seen = append(seen, a.GetUser().GetExtra()[user.CredentialIDKey]...)
		mu.Unlock()
		return allowAlice(ctx, a)
	}}
	c := newAuthorizerCache(t, inner, cache.AuthorizerOptions{CacheKeyIgnoredExtras: []string{user.CredentialIDKey, user.CredentialIDKey}})
	for i := range 3 {
		a := getPodsBy("alice")
		a.User = &user.DefaultInfo{Name: "alice", Extra: map[string][]string{user.CredentialIDKey: {fmt.Sprint("JTI=", i)}}}
		c.Authorize(context.Background(), a)
	}
	if n := inner.calls.Load(); n != 1 || len(seen) != 1 || seen[0] != "JTI=0" {
		t.Errorf("calls = %d, credential-ids seen %v; want 1, [JTI=0]", n, seen)
	}
}

// TestLookupCollisionIsAMiss: two requests that share a lookup key do not
// share an entry: the full encoding is compared on every hit.
func TestLookupCollisionIsAMiss(t *testing.T) {
	t.Parallel()
	inner := &fakeAuthorizer{authorize: allowAlice}
	c := newAuthorizerCache(t, inner, cache.AuthorizerOptions{})
	cache.CollideLookupKeys(c)
	steps := []struct {
		user      string
		want      authorizer.Decision
		wantCalls int32
	}{
		{"alice", authorizer.DecisionAllow, 1},
		{"alice", authorizer.DecisionAllow, 1},   // a true hit
		{"bob", authorizer.DecisionNoOpinion, 2}, // same lookup key, different request
		{"alice", authorizer.DecisionAllow, 3},   // its entry was replaced
	}
	for i, s := range steps {
		d, _, err := c.Authorize(context.Background(), getPodsBy(s.user))
		if d != s.want || err != nil || inner.calls.Load() != s.wantCalls {
			t.Fatalf("step %d: Authorize(%s) = %v, %v with %d calls; want %v with %d", i, s.user, d, err, inner.calls.Load(), s.want, s.wantCalls)
		}
	}
}

// conditional is a conditions-aware decision with one Allow condition.
func conditional(t *testing.T) authorizer.ConditionsAwareDecision {
	t.Helper()
	d := authorizer.ConditionsAwareDecisionConditionsMap(nil, nil, []authorizer.Condition{authorizer.GenericCondition{ID: "example.com/owner", Condition: "object.owner == user"}})
	if !d.IsConditionsMap() {
		t.Fatalf("ConditionsAwareDecisionConditionsMap() = %v; want a conditions map", d)
	}
	return d
}

// TestAuthorizerConditions: conditional decisions are never cached;
// unconditional ones of ConditionsAwareAuthorize are, apart from those of
// Authorize (a conditions-aware authorizer may fail Authorize closed where
// ConditionsAwareAuthorize has conditions); EvaluateConditions goes to the
// wrapped authorizer.
func TestAuthorizerConditions(t *testing.T) {
	t.Parallel()
	cond := conditional(t)
	inner := &fakeAuthorizer{
		authorize: func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
			return authorizer.DecisionDeny, "conditions not supported here", nil
		},
		conditions: func(_ context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
			if a.GetName() == "plain" {
				return authorizer.ConditionsAwareDecisionAllow("plain", nil)
			}
			return cond
		},
	}
	c := newAuthorizerCache(t, inner, cache.AuthorizerOptions{})
	ctx := context.Background()
	attrs := getPodsBy("alice")
	for range 2 {
		if d := c.ConditionsAwareAuthorize(ctx, attrs); !d.IsConditionsMap() {
			t.Fatalf("ConditionsAwareAuthorize() = %v; want the conditions", d)
		}
	}
	if n := inner.caCalls.Load(); n != 2 {
		t.Errorf("ConditionsAwareAuthorize calls for a conditional decision = %d; want 2 (never cached)", n)
	}
	if d, _, _ := c.Authorize(ctx, attrs); d != authorizer.DecisionDeny {
		t.Errorf("Authorize() = %v; want the wrapped Authorize's Deny, not a conditions-aware answer", d)
	}
	plain := attrs
	plain.Name = "plain"
	for range 2 {
		if d := c.ConditionsAwareAuthorize(ctx, plain); !d.IsAllow() || d.Reason() != "plain" {
			t.Fatalf("ConditionsAwareAuthorize(plain) = %v; want Allow", d)
		}
	}
	if n := inner.caCalls.Load(); n != 3 {
		t.Errorf("ConditionsAwareAuthorize calls = %d; want 3 (the unconditional Allow is cached)", n)
	}
	if d, _, _ := c.Authorize(ctx, plain); d != authorizer.DecisionDeny || inner.calls.Load() != 2 {
		t.Errorf("Authorize(plain) = %v after %d calls; want the wrapped Authorize's own Deny, from its own call", d, inner.calls.Load())
	}
	if d, reason, err := c.EvaluateConditions(ctx, cond, nil); d != authorizer.DecisionAllow || reason != "evaluated" || err != nil || inner.evaluated.Load() != 1 {
		t.Errorf("EvaluateConditions() = %v, %q, %v; want the wrapped authorizer's answer", d, reason, err)
	}
}

// TestAuthorizerDropIn: an Authorizer fits union.New and
// filters.WithAuthorization; nil attributes are "could not check"; nil
// inner is an error; a cache is never put in front of a cache.
func TestAuthorizerDropIn(t *testing.T) {
	t.Parallel()
	inner := &fakeAuthorizer{authorize: allowAlice}
	c := newAuthorizerCache(t, inner, cache.AuthorizerOptions{})
	ctx := context.Background()
	u, err := union.New(union.NamedAuthorizer{AuthorizerName: "cache", Authorizer: c})
	if err != nil {
		t.Fatal(err)
	}
	if d, _, err := u.Authorize(ctx, getPodsBy("alice")); d != authorizer.DecisionAllow || err != nil {
		t.Errorf("union Authorize() = %v, %v; want Allow", d, err)
	}
	var served bool
	h := filters.WithAuthorization(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served = true }), c, scheme.Codecs)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/api/v1/namespaces/default/pods/p", nil)
	rctx := request.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"})
	rctx = request.WithRequestInfo(rctx, &request.RequestInfo{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "pods", Namespace: "default", Name: "p", Path: req.URL.Path})
	h.ServeHTTP(discard{}, req.WithContext(rctx))
	if !served {
		t.Error("filters.WithAuthorization(Authorizer) did not pass an allowed request")
	}
	if d, _, err := c.Authorize(ctx, nil); d != authorizer.DecisionDeny || !errors.Is(err, reviewauth.ErrUnavailable) {
		t.Errorf("Authorize(nil) = %v, %v; want Deny, ErrUnavailable", d, err)
	}
	if d := c.ConditionsAwareAuthorize(ctx, nil); !d.IsDeny() || !errors.Is(d.Error(), reviewauth.ErrUnavailable) {
		t.Errorf("ConditionsAwareAuthorize(nil) = %v; want Deny, ErrUnavailable", d)
	}
	if _, err := cache.NewAuthorizer(nil, cache.AuthorizerOptions{}); err == nil {
		t.Error("NewAuthorizer(nil) = nil error; want an error")
	}
	again := newAuthorizerCache(t, c, cache.AuthorizerOptions{AllowedTTL: -1})
	if again.Uncached() != authorizer.Authorizer(inner) {
		t.Errorf("NewAuthorizer(an Authorizer).Uncached() = %T; want what it wraps", again.Uncached())
	}
	srv := authtest.Start(t)
	az, err := authz.NewForConfig(srv.Config(), authz.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := newAuthorizerCache(t, az, cache.AuthorizerOptions{}).Uncached().(*authz.Client); !ok {
		t.Error("NewAuthorizer(an authz.Authorizer) does not wrap its *authz.Client")
	}
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// TestAuthorizerMetricsAndSpans: the cache is counted under Name; one span
// per call, named SpanName.
func TestAuthorizerMetricsAndSpans(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	c := newAuthorizerCache(t, &fakeAuthorizer{authorize: allowAlice}, cache.AuthorizerOptions{Metrics: m, Name: "webhook", TracerProvider: tp})
	c.Authorize(context.Background(), getPodsBy("alice"))
	c.Authorize(context.Background(), getPodsBy("alice"))
	c.Authorize(context.Background(), getPodsBy("bob"))
	want := "# HELP reviewauth_cache_hits_total Lookups that found a live entry, by cache. Includes the final counts of collected caches.\n# TYPE reviewauth_cache_hits_total counter\nreviewauth_cache_hits_total{cache=\"webhook\"} 1\n"
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "reviewauth_cache_hits_total"); err != nil {
		t.Error(err)
	}
	var got []string
	for _, s := range rec.Ended() {
		line := s.Name()
		for _, kv := range s.Attributes() {
			line += " " + string(kv.Key) + "=" + kv.Value.Emit()
		}
		got = append(got, line)
	}
	attrs := " reviewauth.verb=get reviewauth.resource=pods reviewauth.subresource= reviewauth.path="
	wantSpans := []string{
		"reviewauth.cache.Authorize" + attrs + " reviewauth.cache_hit=false reviewauth.decision=allowed",
		"reviewauth.cache.Authorize" + attrs + " reviewauth.cache_hit=true reviewauth.decision=allowed",
		"reviewauth.cache.Authorize" + attrs + " reviewauth.cache_hit=false reviewauth.decision=no_opinion",
	}
	if strings.Join(got, "\n") != strings.Join(wantSpans, "\n") {
		t.Errorf("spans:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantSpans, "\n"))
	}
}

// TestAuthorizerHitAllocs: a hit allocates nothing, either key.
func TestAuthorizerHitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	for _, sar := range []bool{false, true} {
		c := newAuthorizerCache(t, &fakeAuthorizer{authorize: allowAlice}, cache.AuthorizerOptions{SubjectAccessReviewKey: sar})
		a := getPodsBy("alice")
		ls, _ := labels.Parse("app in (a,b),tier")
		a.LabelSelectorRequirements, _ = ls.Requirements()
		a.FieldSelectorRequirements = fields.OneTermEqualSelector("spec.nodeName", "n").Requirements()
		var attrs authorizer.Attributes = a // boxed once, as a caller holds them
		ctx := context.Background()
		c.Authorize(ctx, attrs)
		if n := testing.AllocsPerRun(1000, func() { c.Authorize(ctx, attrs) }); n != 0 {
			t.Errorf("SubjectAccessReviewKey %v: Authorize() on a hit = %v allocs; want 0", sar, n)
		}
	}
}
