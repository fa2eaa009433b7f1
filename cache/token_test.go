package cache_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/cache"
	"github.com/reviewauth/reviewauth/metrics"
)

// fakeToken is an authenticator.Token whose answer is a function of the
// token and the context's audiences, counting its calls per token.
type fakeToken struct {
	mu     sync.Mutex
	calls  map[string]int
	answer func(ctx context.Context, token string) (*authenticator.Response, bool, error)
}

func newFakeToken(answer func(ctx context.Context, token string) (*authenticator.Response, bool, error)) *fakeToken {
	return &fakeToken{calls: map[string]int{}, answer: answer}
}

func (f *fakeToken) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	f.mu.Lock()
	f.calls[token]++
	f.mu.Unlock()
	return f.answer(ctx, token)
}

func (f *fakeToken) count(token string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[token]
}

func (f *fakeToken) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		n += c
	}
	return n
}

// alice authenticates every token as alice, for the context's audiences.
func alice(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	auds, _ := authenticator.AudiencesFrom(ctx)
	return &authenticator.Response{User: &user.DefaultInfo{Name: "alice"}, Audiences: auds}, true, nil
}

func newTokenCache(t testing.TB, inner authenticator.Token, opts cache.TokenOptions) *cache.TokenAuthenticator {
	t.Helper()
	c, err := cache.NewTokenAuthenticator(inner, opts)
	if err != nil {
		t.Fatalf("NewTokenAuthenticator() = %v", err)
	}
	return c
}

// TestTokenTTLEdges: an identity lives SuccessTTL, a rejection FailureTTL:
// a hit at TTL-1ns, a new call at TTL.
func TestTokenTTLEdges(t *testing.T) {
	t.Parallel()
	rejected := func(context.Context, string) (*authenticator.Response, bool, error) {
		return nil, false, &reviewauth.RejectedError{Reason: "no"}
	}
	refused := func(context.Context, string) (*authenticator.Response, bool, error) { return nil, false, nil }
	tests := []struct {
		name   string
		answer func(context.Context, string) (*authenticator.Response, bool, error)
		opts   cache.TokenOptions
		ttl    time.Duration
	}{
		{"identity, default", alice, cache.TokenOptions{}, cache.DefaultSuccessTTL},
		{"identity, custom", alice, cache.TokenOptions{SuccessTTL: 3 * time.Second}, 3 * time.Second},
		{"rejection, default", rejected, cache.TokenOptions{}, cache.DefaultFailureTTL},
		{"refusal (nil, false, nil), custom", refused, cache.TokenOptions{FailureTTL: 7 * time.Second}, 7 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakeClock(time.Now())
			inner := newFakeToken(tt.answer)
			tt.opts.Clock = clk
			c := newTokenCache(t, inner, tt.opts)
			first, ok1, err1 := c.AuthenticateToken(context.Background(), "tok")
			for _, step := range []struct {
				by    time.Duration
				calls int
			}{{tt.ttl - time.Nanosecond, 1}, {time.Nanosecond, 2}} {
				clk.Step(step.by)
				resp, ok, err := c.AuthenticateToken(context.Background(), "tok")
				if ok != ok1 || fmt.Sprint(err) != fmt.Sprint(err1) || (step.calls == 1 && (resp != first || err != err1)) {
					t.Errorf("AuthenticateToken() = (%v, %v, %v); want the first answer (%v, %v, %v)", resp, ok, err, first, ok1, err1)
				}
				if n := inner.count("tok"); n != step.calls {
					t.Errorf("calls after %v more = %d; want %d", step.by, n, step.calls)
				}
			}
		})
	}
}

// TestTokenDisabledTTLs: a negative TTL caches nothing of that kind.
func TestTokenDisabledTTLs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		ok   bool
		opts cache.TokenOptions
	}{
		{"identities", true, cache.TokenOptions{SuccessTTL: -1}},
		{"rejections", false, cache.TokenOptions{FailureTTL: -1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inner := newFakeToken(func(context.Context, string) (*authenticator.Response, bool, error) {
				if tt.ok {
					return &authenticator.Response{User: &user.DefaultInfo{Name: "alice"}}, true, nil
				}
				return nil, false, nil
			})
			c := newTokenCache(t, inner, tt.opts)
			for range 3 {
				c.AuthenticateToken(context.Background(), "tok")
			}
			if n := inner.count("tok"); n != 3 {
				t.Errorf("calls = %d; want 3 (nothing cached)", n)
			}
		})
	}
}

// TestTokenExpCapsTTL: an identity is never cached past its JWT's exp.
func TestTokenExpCapsTTL(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	const left = 30 * time.Second
	tok := authtest.MintJWT(map[string]any{"sub": "alice", "exp": start.Add(left).Unix()})
	for _, tt := range []struct {
		elapsed time.Duration
		calls   int
	}{{left - time.Nanosecond, 1}, {left, 2}} {
		clk := clocktesting.NewFakeClock(start)
		inner := newFakeToken(alice)
		c := newTokenCache(t, inner, cache.TokenOptions{SuccessTTL: time.Hour, StaleIfError: time.Hour, Clock: clk})
		c.AuthenticateToken(context.Background(), tok)
		clk.SetTime(start.Add(tt.elapsed))
		c.AuthenticateToken(context.Background(), tok)
		if n := inner.count(tok); n != tt.calls {
			t.Errorf("calls at exp-%v = %d; want %d", left-tt.elapsed, n, tt.calls)
		}
	}
}

// TestTokenErrorsAreNotCached: "could not check" is never cached, nor is an
// error that is not a definite rejection (it is returned as it is, as by
// k8s.io/apiserver's token cache); definite rejections (matching
// reviewauth.ErrUnauthenticated) and refusals are cached; a rejection
// marked NoCache is returned without the mark and not cached; an identity
// without a user is "could not check".
func TestTokenErrorsAreNotCached(t *testing.T) {
	t.Parallel()
	rej := &reviewauth.RejectedError{Reason: "no"}
	plain := errors.New("oidc: bad signature")
	tests := []struct {
		name      string
		resp      *authenticator.Response
		ok        bool
		err       error
		wantErr   error // matched with errors.Is; nil: none
		wantIdent bool  // the very error value comes back
		wantCalls int
	}{
		{"unavailable", nil, false, errOutage, reviewauth.ErrUnavailable, true, 2},
		{"rejection", nil, false, rej, reviewauth.ErrUnauthenticated, true, 1},
		{"plain error passes uncached", nil, false, plain, plain, true, 2},
		{"plain error with a response", &authenticator.Response{User: &user.DefaultInfo{Name: "a"}}, true, plain, plain, true, 2},
		{"rejection with a response", &authenticator.Response{User: &user.DefaultInfo{Name: "a"}}, true, rej, reviewauth.ErrUnauthenticated, true, 1},
		{"wrapped rejection", nil, false, fmt.Errorf("oidc: %w", reviewauth.ErrUnauthenticated), reviewauth.ErrUnauthenticated, true, 1},
		{"NoCache plain error", nil, false, cache.NoCache(plain), plain, false, 2},
		{"refusal", nil, false, nil, nil, false, 1},
		{"NoCache rejection", nil, false, cache.NoCache(rej), reviewauth.ErrUnauthenticated, false, 2},
		{"authenticated without a user", &authenticator.Response{}, true, nil, reviewauth.ErrUnavailable, false, 2},
		{"authenticated without a response", nil, true, nil, reviewauth.ErrUnavailable, false, 2},
		{"authenticated with an outage", &authenticator.Response{User: &user.DefaultInfo{Name: "a"}}, true, errOutage, reviewauth.ErrUnavailable, true, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inner := newFakeToken(func(context.Context, string) (*authenticator.Response, bool, error) { return tt.resp, tt.ok, tt.err })
			c := newTokenCache(t, inner, cache.TokenOptions{})
			for i := range 2 {
				resp, ok, err := c.AuthenticateToken(context.Background(), "tok")
				if ok || resp != nil {
					t.Fatalf("AuthenticateToken() #%d = (%v, %v, %v); want not authenticated", i+1, resp, ok, err)
				}
				if (tt.wantErr == nil) != (err == nil) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
					t.Fatalf("AuthenticateToken() #%d error = %v; want %v", i+1, err, tt.wantErr)
				}
				if tt.wantIdent && err != tt.err {
					t.Errorf("AuthenticateToken() #%d error = %#v; want the wrapped authenticator's own %#v", i+1, err, tt.err)
				}
				var nc interface{ Unwrap() error }
				if errors.As(err, &nc) && strings.Contains(fmt.Sprintf("%T", nc), "noCache") {
					t.Errorf("AuthenticateToken() #%d error = %T; want the mark removed", i+1, err)
				}
			}
			if n := inner.count("tok"); n != tt.wantCalls {
				t.Errorf("calls = %d; want %d", n, tt.wantCalls)
			}
		})
	}
	if cache.NoCache(nil) != nil {
		t.Error("NoCache(nil) != nil")
	}
}

// TestTokenSharedCallTimeout: a call cut by Timeout is "could not check",
// whatever error the wrapped authenticator made of its context, and is not
// cached.
func TestTokenSharedCallTimeout(t *testing.T) {
	t.Parallel()
	inner := newFakeToken(func(ctx context.Context, _ string) (*authenticator.Response, bool, error) {
		<-ctx.Done()
		return nil, false, errors.New("gave up") // not ErrUnavailable
	})
	c := newTokenCache(t, inner, cache.TokenOptions{Timeout: 10 * time.Millisecond})
	for i := range 2 {
		_, ok, err := c.AuthenticateToken(context.Background(), "tok")
		var re *reviewauth.ReviewError
		if ok || !errors.As(err, &re) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("AuthenticateToken() #%d = (%v, %v); want a ReviewError wrapping DeadlineExceeded", i+1, ok, err)
		}
	}
	if n := inner.count("tok"); n != 2 {
		t.Errorf("calls = %d; want 2 (not cached)", n)
	}
}

// TestTokenColdHerd: 100 concurrent identical cold calls make one call of
// the wrapped authenticator; different tokens do not share.
func TestTokenColdHerd(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	inner := newFakeToken(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		<-release
		return alice(ctx, token)
	})
	m := metrics.New()
	c := newTokenCache(t, inner, cache.TokenOptions{Metrics: m, Name: "herd"})
	const n = 100
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range n + 1 {
		tok := "tok"
		if i == n {
			tok = "other"
		}
		wg.Go(func() {
			if _, ok, _ := c.AuthenticateToken(context.Background(), tok); !ok {
				failed.Add(1)
			}
		})
	}
	for metricValue(t, m, "reviewauth_cache_coalesced_total", "herd") < n-1 || inner.total() < 2 {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	if failed.Load() != 0 || inner.count("tok") != 1 || inner.count("other") != 1 {
		t.Errorf("failed %d; calls tok %d, other %d; want 0, 1, 1", failed.Load(), inner.count("tok"), inner.count("other"))
	}
}

// TestTokenCallerLeavesOnItsOwnDeadline: a caller whose context ends leaves
// at once with "could not check"; the shared call goes on for a caller
// with a later deadline, which gets its answer.
func TestTokenCallerLeavesOnItsOwnDeadline(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	inner := newFakeToken(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		started <- struct{}{}
		<-release
		return alice(ctx, token)
	})
	m := metrics.New()
	c := newTokenCache(t, inner, cache.TokenOptions{Metrics: m})
	short, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { _, _, err := c.AuthenticateToken(short, "tok"); first <- err }()
	<-started
	second := make(chan bool, 1)
	go func() { _, ok, _ := c.AuthenticateToken(context.Background(), "tok"); second <- ok }()
	for metricValue(t, m, "reviewauth_cache_coalesced_total", "token") < 1 {
		runtime.Gosched()
	}
	cancel()
	if err := <-first; !errors.Is(err, reviewauth.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("the caller that left = %v; want ErrUnavailable wrapping context.Canceled", err)
	}
	close(release)
	if !<-second {
		t.Error("the caller that stayed was not authenticated: the shared call must outlive the first caller")
	}
	if n := inner.count("tok"); n != 1 {
		t.Errorf("calls = %d; want 1", n)
	}
}

// TestTokenBounded: each cache holds MaxEntries, at the limit and past it;
// rejections do not evict identities.
func TestTokenBounded(t *testing.T) {
	t.Parallel()
	inner := newFakeToken(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		if strings.HasPrefix(token, "bad") {
			return nil, false, nil
		}
		return alice(ctx, token)
	})
	c := newTokenCache(t, inner, cache.TokenOptions{MaxEntries: 2})
	auth := func(tok string) { c.AuthenticateToken(context.Background(), tok) }
	auth("a")
	auth("b")
	for i := range 10 { // a flood of rejections
		auth(fmt.Sprint("bad", i))
	}
	auth("a")
	auth("b") // at the limit: both cached
	if inner.count("a") != 1 || inner.count("b") != 1 {
		t.Fatalf("calls a %d, b %d; want 1, 1 (rejections must not evict identities)", inner.count("a"), inner.count("b"))
	}
	auth("c") // limit + 1: evicts a, the least recently used
	auth("b")
	auth("a")
	if inner.count("a") != 2 || inner.count("b") != 1 || inner.count("c") != 1 {
		t.Errorf("calls a %d, b %d, c %d; want 2, 1, 1", inner.count("a"), inner.count("b"), inner.count("c"))
	}
}

// TestTokenKeyedByContextAudiences: the context's audiences are part of the
// key, as in k8s.io/apiserver's token cache: the same token for other
// audiences is asked again; no audiences and an empty list share.
func TestTokenKeyedByContextAudiences(t *testing.T) {
	t.Parallel()
	inner := newFakeToken(alice)
	c := newTokenCache(t, inner, cache.TokenOptions{})
	bg := context.Background()
	steps := []struct {
		ctx       context.Context
		wantCalls int
		wantAuds  []string
	}{
		{bg, 1, nil},
		{authenticator.WithAudiences(bg, nil), 1, nil},
		{authenticator.WithAudiences(bg, authenticator.Audiences{"a"}), 2, []string{"a"}},
		{authenticator.WithAudiences(bg, authenticator.Audiences{"a"}), 2, []string{"a"}},
		{authenticator.WithAudiences(bg, authenticator.Audiences{"b"}), 3, []string{"b"}},
		{authenticator.WithAudiences(bg, authenticator.Audiences{"a", "b"}), 4, []string{"a", "b"}},
		{authenticator.WithAudiences(bg, authenticator.Audiences{"ab"}), 5, []string{"ab"}},
		{authenticator.WithAudiences(bg, authenticator.Audiences{""}), 6, []string{""}},
	}
	for i, s := range steps {
		resp, ok, err := c.AuthenticateToken(s.ctx, "tok")
		if !ok || err != nil || fmt.Sprint(resp.Audiences) != fmt.Sprint(s.wantAuds) {
			t.Errorf("step %d: AuthenticateToken() = (%v, %v, %v); want audiences %v", i, resp, ok, err, s.wantAuds)
		}
		if n := inner.count("tok"); n != s.wantCalls {
			t.Errorf("step %d: calls = %d; want %d", i, n, s.wantCalls)
		}
	}
}

// TestTokenLocalRefusals: an empty token is cached like any other, as
// k8s.io/apiserver's token cache does; a token past MaxTokenSize is refused
// without a call, at the limit it is not.
func TestTokenLocalRefusals(t *testing.T) {
	t.Parallel()
	inner := newFakeToken(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		if token == "" {
			return nil, false, nil
		}
		return alice(ctx, token)
	})
	const max = 64
	c := newTokenCache(t, inner, cache.TokenOptions{MaxTokenSize: max})
	for range 2 {
		if resp, ok, err := c.AuthenticateToken(context.Background(), ""); resp != nil || ok || err != nil {
			t.Errorf("AuthenticateToken(\"\") = (%v, %v, %v); want (nil, false, nil)", resp, ok, err)
		}
	}
	if n := inner.count(""); n != 1 {
		t.Errorf("calls for the empty token = %d; want 1 (cached)", n)
	}
	at, over := strings.Repeat("a", max), strings.Repeat("a", max+1)
	if _, ok, err := c.AuthenticateToken(context.Background(), at); !ok || err != nil {
		t.Errorf("token at MaxTokenSize = (%v, %v); want success", ok, err)
	}
	_, ok, err := c.AuthenticateToken(context.Background(), over)
	if ok || !errors.Is(err, reviewauth.ErrUnauthenticated) || strings.Contains(err.Error(), over) {
		t.Errorf("token past MaxTokenSize = (%v, %v); want ErrUnauthenticated, without the token", ok, err)
	}
	if n := inner.count(over); n != 0 {
		t.Errorf("calls for a token past MaxTokenSize = %d; want 0", n)
	}
}

// TestTokenPanicNeverLeaksTheToken: a panic in the wrapped authenticator is
// "could not check" for every caller, and its message loses the token.
func TestTokenPanicNeverLeaksTheToken(t *testing.T) {
	t.Parallel()
	const secret = "c2VjcmV0LXRva2Vu"
	inner := newFakeToken(func(_ context.Context, token string) (*authenticator.Response, bool, error) {
		panic("blew up on " + token)
	})
	c := newTokenCache(t, inner, cache.TokenOptions{})
	_, ok, err := c.AuthenticateToken(context.Background(), secret)
	var re *reviewauth.ReviewError
	if ok || !errors.As(err, &re) || strings.Contains(fmt.Sprintf("%v %+v", err, err), secret) {
		t.Errorf("AuthenticateToken() = (%v, %v); want a ReviewError without the token", ok, err)
	}
	if !strings.Contains(err.Error(), "blew up on [REDACTED]") {
		t.Errorf("error %q; want the panic, redacted", err)
	}
}

// TestTokenNoDoubleWrap: given a TokenAuthenticator, or an
// authn.Authenticator, NewTokenAuthenticator wraps what it wraps.
func TestTokenNoDoubleWrap(t *testing.T) {
	t.Parallel()
	inner := newFakeToken(alice)
	first := newTokenCache(t, inner, cache.TokenOptions{})
	second := newTokenCache(t, first, cache.TokenOptions{SuccessTTL: -1})
	if second.Uncached() != authenticator.Token(inner) {
		t.Errorf("NewTokenAuthenticator(a TokenAuthenticator).Uncached() = %T; want the authenticator it wraps", second.Uncached())
	}
	for range 2 {
		second.AuthenticateToken(context.Background(), "tok")
	}
	if n := inner.count("tok"); n != 2 {
		t.Errorf("calls = %d; want 2: the new options (SuccessTTL < 0) apply, with no cache behind them", n)
	}

	srv := authtest.Start(t)
	a, err := authn.NewForConfig(srv.Config(), authn.Options{Audiences: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	third := newTokenCache(t, a, cache.TokenOptions{})
	if _, ok := third.Uncached().(*authn.Client); !ok {
		t.Errorf("NewTokenAuthenticator(an authn.Authenticator).Uncached() = %T; want its *authn.Client", third.Uncached())
	}
	if _, err := cache.NewTokenAuthenticator(nil, cache.TokenOptions{}); err == nil {
		t.Error("NewTokenAuthenticator(nil) = nil error; want an error")
	}
}

// TestTokenMetricsAndSpans: the caches are counted under Name and
// Name_rejected; one span per call, named SpanName, with the context's
// audiences, hit and decision.
func TestTokenMetricsAndSpans(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	inner := newFakeToken(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		switch token {
		case "bad":
			return nil, false, nil
		case "down":
			return nil, false, errOutage
		}
		return alice(ctx, token)
	})
	c := newTokenCache(t, inner, cache.TokenOptions{Metrics: m, Name: "oidc", TracerProvider: tp})
	ctx := authenticator.WithAudiences(context.Background(), authenticator.Audiences{"a"})
	for _, tok := range []string{"good", "good", "bad", "bad", "down"} {
		c.AuthenticateToken(ctx, tok)
	}
	want := `
# HELP reviewauth_cache_hits_total Lookups that found a live entry, by cache. Includes the final counts of collected caches.
# TYPE reviewauth_cache_hits_total counter
reviewauth_cache_hits_total{cache="oidc"} 1
reviewauth_cache_hits_total{cache="oidc_rejected"} 1
`
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
	wantSpans := []string{
		"reviewauth.cache.AuthenticateToken reviewauth.audiences=[\"a\"] reviewauth.cache_hit=false reviewauth.decision=authenticated",
		"reviewauth.cache.AuthenticateToken reviewauth.audiences=[\"a\"] reviewauth.cache_hit=true reviewauth.decision=authenticated",
		"reviewauth.cache.AuthenticateToken reviewauth.audiences=[\"a\"] reviewauth.cache_hit=false reviewauth.decision=unauthenticated",
		"reviewauth.cache.AuthenticateToken reviewauth.audiences=[\"a\"] reviewauth.cache_hit=true reviewauth.decision=unauthenticated",
		"reviewauth.cache.AuthenticateToken reviewauth.audiences=[\"a\"] reviewauth.cache_hit=false reviewauth.decision=unavailable",
	}
	if strings.Join(got, "\n") != strings.Join(wantSpans, "\n") {
		t.Errorf("spans:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantSpans, "\n"))
	}
}

// TestTokenHitAllocs: a hit allocates nothing, without context audiences
// and with them.
func TestTokenHitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	c := newTokenCache(t, newFakeToken(alice), cache.TokenOptions{})
	tok := authtest.MintJWT(map[string]any{"sub": "alice", "pad": strings.Repeat("x", 600)})
	for _, ctx := range []context.Context{
		context.Background(),
		authenticator.WithAudiences(context.Background(), authenticator.Audiences{"snap.example"}),
	} {
		c.AuthenticateToken(ctx, tok)
		if n := testing.AllocsPerRun(1000, func() { c.AuthenticateToken(ctx, tok) }); n != 0 {
			t.Errorf("AuthenticateToken() on a hit = %v allocs; want 0", n)
		}
	}
}
