package grpcauth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/oauth2"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/grpcauth"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// jwt returns an unsigned JWT with the given iat and exp claims and a marker
// claim, enough for a client that only reads the lifetime.
func jwt(marker string, iat, exp time.Time) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "none"}) + "." +
		enc(map[string]any{"iat": iat.Unix(), "exp": exp.Unix(), "sub": marker}) + ".sig"
}

// writeToken writes tok the way the kubelet does: into a new timestamped
// directory, then swaps the ..data symlink to it.
func writeToken(t *testing.T, dir, tok string) {
	t.Helper()
	ts, err := os.MkdirTemp(dir, "..ts")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, "token"), []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "token")); errors.Is(err, os.ErrNotExist) {
		if err := os.Symlink("..data/token", filepath.Join(dir, "token")); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFileTokenSourceRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := clocktesting.NewFakePassiveClock(t0)
	first := jwt("first", t0, t0.Add(10*time.Minute)) // refresh point: t0+8m
	second := jwt("second", t0.Add(8*time.Minute), t0.Add(18*time.Minute))
	writeToken(t, dir, first)
	src := mustFileSource(t, filepath.Join(dir, "token"), grpcauth.FileOptions{RecheckInterval: time.Minute, Clock: clk})

	want := func(step string, tok string) {
		t.Helper()
		got, err := tokenOf(t.Context(), src)
		if err != nil {
			t.Fatalf("%s: Token() = %v", step, err)
		}
		if got != tok {
			t.Errorf("%s: Token() = %.20q...; want %.20q...", step, got, tok)
		}
	}
	want("first read", first)

	// The kubelet rotates; until the recheck interval has passed the cached
	// token is served without touching the file.
	writeToken(t, dir, second)
	clk.SetTime(t0.Add(time.Minute - time.Nanosecond))
	want("1ns before the recheck", first)
	clk.SetTime(t0.Add(time.Minute))
	want("at the recheck", second)
}

func TestFileTokenSourceRechecksPastEightyPercent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := clocktesting.NewFakePassiveClock(t0)
	first := jwt("first", t0, t0.Add(10*time.Minute))
	second := jwt("second", t0.Add(8*time.Minute), t0.Add(18*time.Minute))
	writeToken(t, dir, first)
	// A recheck interval longer than the lifetime: only the 80% rule can
	// find the rotated token.
	src := mustFileSource(t, filepath.Join(dir, "token"), grpcauth.FileOptions{RecheckInterval: time.Hour, Clock: clk})
	if _, err := tokenOf(t.Context(), src); err != nil {
		t.Fatal(err)
	}
	writeToken(t, dir, second)
	clk.SetTime(t0.Add(8*time.Minute - time.Nanosecond))
	if got, _ := tokenOf(t.Context(), src); got != first {
		t.Errorf("Token() at 80%% - 1ns = %.20q...; want the first token", got)
	}
	clk.SetTime(t0.Add(8 * time.Minute))
	if got, _ := tokenOf(t.Context(), src); got != second {
		t.Errorf("Token() at 80%% = %.20q...; want the rotated token", got)
	}
}

func TestFileTokenSourceNeverReturnsExpiredToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := clocktesting.NewFakePassiveClock(t0)
	tok := jwt("only", t0, t0.Add(10*time.Minute))
	writeToken(t, dir, tok)
	src := mustFileSource(t, filepath.Join(dir, "token"), grpcauth.FileOptions{Clock: clk})
	clk.SetTime(t0.Add(10*time.Minute - time.Nanosecond))
	if got, err := tokenOf(t.Context(), src); err != nil || got != tok {
		t.Errorf("Token() 1ns before exp = %.20q, %v; want the token", got, err)
	}
	clk.SetTime(t0.Add(10 * time.Minute))
	got, err := tokenOf(t.Context(), src)
	if err == nil || got != "" {
		t.Fatalf("Token() at exp, not rotated = %.20q, %v; want an error and no token", got, err)
	}
	if strings.Contains(err.Error(), tok) {
		t.Errorf("Token() error %q contains the token", err)
	}
	// Rotation heals it.
	next := jwt("next", t0.Add(10*time.Minute), t0.Add(20*time.Minute))
	writeToken(t, dir, next)
	if got, err := tokenOf(t.Context(), src); err != nil || got != next {
		t.Errorf("Token() after rotation = %.20q, %v; want the new token", got, err)
	}
}

func TestFileTokenSourceErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opaque := filepath.Join(dir, "opaque")
	if err := os.WriteFile(opaque, []byte("opaque-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		want    string
		wantErr bool
	}{
		{name: "missing file", path: filepath.Join(dir, "missing"), wantErr: true},
		{name: "empty file", path: empty, wantErr: true},
		{name: "opaque token without exp", path: opaque, want: "opaque-token"},
	}
	if src, err := grpcauth.NewFileTokenSource("", grpcauth.FileOptions{}); err == nil {
		t.Errorf("NewFileTokenSource(\"\") = %v, nil; want an error", src)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tokenOf(t.Context(), mustFileSource(t, tt.path, grpcauth.FileOptions{}))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("Token() = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// fakeCreator is a TokenCreator whose answers the test controls.
type fakeCreator struct {
	clk   *clocktesting.FakePassiveClock
	calls atomic.Int32
	fail  atomic.Bool
	// block, when set, is waited on by CreateToken, after it closes
	// entered.
	block   chan struct{}
	entered chan struct{}
	once    sync.Once
	// exited, when set, receives the context's error when a blocked
	// CreateToken returns.
	exited chan error
	// observe, when set, is called with every request's context.
	observe func(context.Context)

	mu   sync.Mutex
	last *authenticationv1.TokenRequest
	name string
}

func (f *fakeCreator) CreateToken(ctx context.Context, name string, tr *authenticationv1.TokenRequest, _ metav1.CreateOptions) (*authenticationv1.TokenRequest, error) {
	n := f.calls.Add(1)
	f.mu.Lock()
	f.last, f.name = tr.DeepCopy(), name
	f.mu.Unlock()
	if f.observe != nil {
		f.observe(ctx)
	}
	if f.block != nil {
		f.once.Do(func() { close(f.entered) })
		select {
		case <-f.block:
		case <-ctx.Done():
			if f.exited != nil {
				f.exited <- ctx.Err()
			}
			return nil, ctx.Err()
		}
	}
	if f.fail.Load() {
		return nil, errors.New("the server is currently unable to handle the request")
	}
	now := f.clk.Now()
	out := tr.DeepCopy()
	out.Status.Token = fmt.Sprintf("token-%d", n)
	out.Status.ExpirationTimestamp = metav1.NewTime(now.Add(time.Duration(*tr.Spec.ExpirationSeconds) * time.Second))
	return out, nil
}

func TestTokenRequestSourceRefresh(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakePassiveClock(t0)
	fc := &fakeCreator{clk: clk}
	src, err := grpcauth.NewTokenRequestSource(fc, grpcauth.TokenRequestOptions{
		ServiceAccount: "backup",
		Audiences:      []string{"snap.example"},
		Lifetime:       10 * time.Minute,
		Clock:          clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name  string
		at    time.Duration
		fail  bool
		want  string
		err   bool
		calls int32
	}{
		{name: "first call requests", at: 0, want: "token-1", calls: 1},
		{name: "fresh token is cached", at: 5 * time.Minute, want: "token-1", calls: 1},
		{name: "1ns before 80%", at: 8*time.Minute - time.Nanosecond, want: "token-1", calls: 1},
		{name: "at 80% refreshes", at: 8 * time.Minute, want: "token-2", calls: 2},
		// token-2 was issued at 8m for 10m: refresh at 16m, expiry at 18m.
		{name: "refresh failure serves the valid token", at: 16 * time.Minute, fail: true, want: "token-2", calls: 3},
		{name: "no retry within the retry interval", at: 16*time.Minute + 5*time.Second, fail: true, want: "token-2", calls: 3},
		{name: "retry after the interval", at: 16*time.Minute + 10*time.Second, fail: true, want: "token-2", calls: 4},
		{name: "1ns before expiry still valid", at: 18*time.Minute - time.Nanosecond, fail: true, want: "token-2", calls: 5},
		{name: "expired and refresh fails: error, no token", at: 18 * time.Minute, fail: true, err: true, calls: 6},
		{name: "recovery", at: 18*time.Minute + time.Second, want: "token-7", calls: 7},
	}
	ctx := klog.NewContext(t.Context(), logr.Discard())
	for _, s := range steps {
		clk.SetTime(t0.Add(s.at))
		fc.fail.Store(s.fail)
		got, err := tokenOf(ctx, src)
		if (err != nil) != s.err || got != s.want {
			t.Errorf("%s: Token() = %q, %v; want %q, error %v", s.name, got, err, s.want, s.err)
		}
		if n := fc.calls.Load(); n != s.calls {
			t.Errorf("%s: CreateToken calls = %d; want %d", s.name, n, s.calls)
		}
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.name != "backup" || strings.Join(fc.last.Spec.Audiences, ",") != "snap.example" || *fc.last.Spec.ExpirationSeconds != 600 {
		t.Errorf("CreateToken(%q, %+v); want backup, audience snap.example, 600 s", fc.name, fc.last.Spec)
	}
}

func TestTokenRequestSourceSharesOneRequest(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakePassiveClock(t0)
	fc := &fakeCreator{clk: clk, block: make(chan struct{}), entered: make(chan struct{})}
	src, err := grpcauth.NewTokenRequestSource(fc, grpcauth.TokenRequestOptions{ServiceAccount: "backup", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	const callers = 8
	var wg sync.WaitGroup
	got := make([]string, callers)
	for i := range callers {
		wg.Go(func() {
			got[i], _ = tokenOf(t.Context(), src)
		})
	}
	// Let the leader reach CreateToken, then release it.
	<-fc.entered
	// A caller whose context ends stops waiting.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if tok, err := tokenOf(ctx, src); err == nil {
		t.Errorf("Token(cancelled ctx) while a request is in flight = %q, nil; want an error", tok)
	}
	close(fc.block)
	wg.Wait()
	for i, g := range got {
		if g != "token-1" {
			t.Errorf("caller %d: Token() = %q; want token-1", i, g)
		}
	}
	if n := fc.calls.Load(); n != 1 {
		t.Errorf("CreateToken calls = %d; want 1 for %d concurrent callers", n, callers)
	}
}

func TestNewTokenRequestSourceValidates(t *testing.T) {
	t.Parallel()
	if _, err := grpcauth.NewTokenRequestSource(nil, grpcauth.TokenRequestOptions{ServiceAccount: "a"}); err == nil {
		t.Errorf("NewTokenRequestSource(nil, ...) = _, nil; want an error")
	}
	if _, err := grpcauth.NewTokenRequestSource(&fakeCreator{}, grpcauth.TokenRequestOptions{}); err == nil {
		t.Errorf("NewTokenRequestSource(_, no ServiceAccount) = _, nil; want an error")
	}
}

// waitSignal is a context that closes waiting the first time its Done
// method is asked for: a caller blocked in a select on ctx.Done() has
// reached its wait.
type waitSignal struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func newWaitSignal(ctx context.Context) *waitSignal {
	return &waitSignal{Context: ctx, waiting: make(chan struct{})}
}

func (w *waitSignal) Done() <-chan struct{} {
	w.once.Do(func() { close(w.waiting) })
	return w.Context.Done()
}

// TestTokenRequestSourceLeaderCancelled: the caller that started a
// TokenRequest gives up; another caller waiting for the same request still
// gets its token, and only one TokenRequest is made. The request must not
// run on the first caller's context.
func TestTokenRequestSourceLeaderCancelled(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakePassiveClock(t0)
	fc := &fakeCreator{clk: clk, block: make(chan struct{}), entered: make(chan struct{})}
	src, err := grpcauth.NewTokenRequestSource(fc, grpcauth.TokenRequestOptions{ServiceAccount: "backup", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	actx, cancelA := context.WithCancel(t.Context())
	aDone := make(chan error, 1)
	go func() {
		_, err := tokenOf(actx, src)
		aDone <- err
	}()
	<-fc.entered // A's TokenRequest is in flight

	bctx := newWaitSignal(t.Context())
	type result struct {
		tok string
		err error
	}
	bDone := make(chan result, 1)
	go func() {
		tok, err := tokenOf(bctx, src)
		bDone <- result{tok, err}
	}()
	<-bctx.waiting // B waits for A's request

	cancelA()
	if err := <-aDone; err == nil {
		t.Errorf("Token() of the cancelled caller = nil error; want its context's error")
	}
	close(fc.block)
	b := <-bDone
	if b.err != nil || b.tok != "token-1" {
		t.Errorf("Token() of the waiting caller = %q, %v; want token-1", b.tok, b.err)
	}
	if n := fc.calls.Load(); n != 1 {
		t.Errorf("CreateToken calls = %d; want 1", n)
	}
}

// TestTokenRequestSourceAbandonedRequestIsCancelled: when every caller has
// given up, the TokenRequest's context is cancelled, so that it does not
// run on for its whole timeout.
func TestTokenRequestSourceAbandonedRequestIsCancelled(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakePassiveClock(t0)
	fc := &fakeCreator{clk: clk, block: make(chan struct{}), entered: make(chan struct{}), exited: make(chan error, 1)}
	src, err := grpcauth.NewTokenRequestSource(fc, grpcauth.TokenRequestOptions{ServiceAccount: "backup", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := tokenOf(ctx, src)
		done <- err
	}()
	<-fc.entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Token() of the only, cancelled caller = %v; want context.Canceled", err)
	}
	if err := <-fc.exited; !errors.Is(err, context.Canceled) {
		t.Errorf("TokenRequest context error = %v; want context.Canceled once every caller left", err)
	}
}

// TestTokenRequestSourceTimeout: the shared TokenRequest runs under its own
// deadline, whatever the callers' contexts say.
func TestTokenRequestSourceTimeout(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		timeout time.Duration
		want    time.Duration
	}{
		{name: "default", want: 10 * time.Second},
		{name: "set", timeout: 3 * time.Second, want: 3 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakePassiveClock(t0)
			var left time.Duration
			var hasDeadline bool
			creator := creatorFunc(func(ctx context.Context) {
				var d time.Time
				d, hasDeadline = ctx.Deadline()
				left = time.Until(d)
			})
			src, err := grpcauth.NewTokenRequestSource(creator.with(clk), grpcauth.TokenRequestOptions{ServiceAccount: "backup", Clock: clk, Timeout: tt.timeout})
			if err != nil {
				t.Fatal(err)
			}
			// The caller has no deadline at all.
			if _, err := tokenOf(context.Background(), src); err != nil {
				t.Fatal(err)
			}
			if !hasDeadline || left > tt.want || left < tt.want-time.Second {
				t.Errorf("TokenRequest deadline: set %v, %v left; want %v", hasDeadline, left, tt.want)
			}
		})
	}
}

// creatorFunc is a TokenCreator that calls f with the request's context and
// grants a 10-minute token.
type creatorFunc func(ctx context.Context)

func (f creatorFunc) with(clk *clocktesting.FakePassiveClock) grpcauth.TokenCreator {
	return &fakeCreator{clk: clk, observe: f}
}

// TestTokenRequestSourceLateCallers: callers that find no token, and reach
// the shared request only after it has ended, take its token instead of
// starting another request. Many rounds, so that some callers land in that
// window.
func TestTokenRequestSourceLateCallers(t *testing.T) {
	t.Parallel()
	for round := range 500 {
		clk := clocktesting.NewFakePassiveClock(t0)
		fc := &fakeCreator{clk: clk, block: make(chan struct{}), entered: make(chan struct{})}
		src, err := grpcauth.NewTokenRequestSource(fc, grpcauth.TokenRequestOptions{ServiceAccount: "backup", Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if tok, err := tokenOf(t.Context(), src); tok != "token-1" {
					t.Errorf("round %d: Token() = %q, %v; want token-1", round, tok, err)
				}
			})
		}
		<-fc.entered
		close(fc.block)
		wg.Wait()
		if n := fc.calls.Load(); n != 1 {
			t.Fatalf("round %d: CreateToken calls = %d; want 1", round, n)
		}
	}
}

// mustFileSource is grpcauth.NewFileTokenSource, failing t on an error.
func mustFileSource(t *testing.T, path string, opts grpcauth.FileOptions) *grpcauth.FileTokenSource {
	t.Helper()
	src, err := grpcauth.NewFileTokenSource(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// tokenOf asks src for a token as PerRPCCredentials does (TokenContext when
// src has it) and returns its access token, "" with an error. It checks
// the token's type.
func tokenOf(ctx context.Context, src oauth2.TokenSource) (string, error) {
	var (
		tok *oauth2.Token
		err error
	)
	if cs, ok := src.(grpcauth.ContextTokenSource); ok {
		tok, err = cs.TokenContext(ctx)
	} else {
		tok, err = src.Token()
	}
	switch {
	case err != nil && tok != nil:
		return "", fmt.Errorf("a token with the error %w", err)
	case err != nil:
		return "", err
	case tok == nil:
		return "", errors.New("no token and no error")
	case tok.Type() != "Bearer":
		return "", fmt.Errorf("token type %q; want Bearer", tok.Type())
	}
	return tok.AccessToken, nil
}
