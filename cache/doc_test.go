package cache_test

// The differential tests behind the table of differences in doc.go: package
// cache against k8s.io/apiserver v0.37.2's own caches, over the same
// wrapped authenticators and authorizers.
//
// Each side is checked against a small model of its cache (entries, TTLs,
// what is cached, what a call answers), step by step: apiserver's actual
// token cache against the model with apiserver's rules, ours against the
// model with ours. The two rule sets differ exactly by the deliberate
// differences listed in doc.go, one switch each, so a behaviour of ours
// that is neither apiserver's nor listed fails the test; every table row
// that pins a difference also checks that the difference shows. What a
// sequential model cannot say (concurrent callers, callers that leave,
// timeouts) has rows of its own.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "unsafe" // go:linkname, for apiserver's token cache on a fake clock

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/apiserver/plugin/pkg/authorizer/webhook"
	webhookmetrics "k8s.io/apiserver/plugin/pkg/authorizer/webhook/metrics"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/cache"
	"github.com/reviewauth/reviewauth/metrics"
)

// newAPIServerTokenCache is k8s.io/apiserver's token cache constructor with
// a clock (tokencache.New is newWithClock on the real clock), so that the
// oracle steps time with ours instead of sleeping.
//
//go:linkname newAPIServerTokenCache k8s.io/apiserver/pkg/authentication/token/cache.newWithClock
func newAPIServerTokenCache(inner authenticator.Token, cacheErrs bool, successTTL, failureTTL time.Duration, clk clock.Clock) authenticator.Token

// The TTLs both token caches run with in the differential tests: apiserver's
// delegated authentication passes cacheErrs=false.
const (
	diffSuccessTTL = 5 * time.Second
	diffFailureTTL = 3 * time.Second
)

// tokenKind is what a scripted authenticator answers for a token.
type tokenKind uint8

const (
	tkOK               tokenKind = iota // (identity, true, nil)
	tkOKNotes                           // the same, with a warning and an audit annotation
	tkRefused                           // (nil, false, nil)
	tkRejected                          // (nil, false, *reviewauth.RejectedError)
	tkPlainError                        // (nil, false, errors.New(...)): apiserver's webhook reports a rejection so
	tkUnavailable                       // (nil, false, *reviewauth.ReviewError)
	tkOKWithError                       // (identity, true, plain error)
	tkNilUser                           // (Response without a user, true, nil)
	tkRefusedNotes                      // (nil, false, nil), with a warning and an audit annotation
	tkResponseNotOK                     // (identity, false, nil)
	tkOKWithRejection                   // (identity, true, *reviewauth.RejectedError)
	tkNoCacheRejection                  // (nil, false, cache.NoCache(*reviewauth.RejectedError))
	tkPanic                             // panics (table only: apiserver logs a 64 KiB stack each time)
	numFuzzTokenKinds  = tkPanic
)

var tokenKindNames = [...]string{"ok", "ok with notes", "refused", "rejected", "plain error", "unavailable",
	"ok with an error", "no user", "refused with notes", "response without ok", "ok with a rejection",
	"NoCache rejection", "panic"}

func (k tokenKind) String() string { return tokenKindNames[k] }

// scriptedTokens authenticates each token as the kind its world says now,
// for the audiences of the call's context, and counts its calls.
type scriptedTokens struct {
	world *tokenWorld
	calls atomic.Int64
}

// world is what scripted authenticators or authorizers answer, by token
// or user name: the zero K until set. Both sides of a rig share one.
type world[K any] struct {
	mu    sync.Mutex
	kinds map[string]K
}

func newWorld[K any]() *world[K] { return &world[K]{kinds: map[string]K{}} }

func (w *world[K]) kind(name string) K {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.kinds[name]
}

func (w *world[K]) set(name string, k K) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.kinds[name] = k
}

type tokenWorld = world[tokenKind]

func (s *scriptedTokens) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	s.calls.Add(1)
	auds, _ := authenticator.AudiencesFrom(ctx)
	id := func() *authenticator.Response {
		return &authenticator.Response{User: &user.DefaultInfo{Name: token}, Audiences: auds}
	}
	note := func() {
		warning.AddWarning(ctx, "authn", "warning for "+token)
		audit.AddAuditAnnotation(ctx, "note/"+token, "v")
	}
	rejected := func() error { return &reviewauth.RejectedError{Reason: "rejected " + token} }
	plain := func() error { return errors.New("plain " + token) }
	switch s.world.kind(token) {
	case tkOK:
		return id(), true, nil
	case tkOKNotes:
		note()
		return id(), true, nil
	case tkRefused:
		return nil, false, nil
	case tkRejected:
		return nil, false, rejected()
	case tkPlainError:
		return nil, false, plain()
	case tkUnavailable:
		return nil, false, &reviewauth.ReviewError{Review: "TokenReview", Code: 503}
	case tkOKWithError:
		return id(), true, plain()
	case tkNilUser:
		return &authenticator.Response{Audiences: auds}, true, nil
	case tkRefusedNotes:
		note()
		return nil, false, nil
	case tkResponseNotOK:
		return id(), false, nil
	case tkOKWithRejection:
		return id(), true, rejected()
	case tkNoCacheRejection:
		return nil, false, cache.NoCache(rejected())
	}
	panic("panic for " + token)
}

// tokenRules are the rules of a token cache model. The zero value is
// k8s.io/apiserver's token cache with cacheErrs=false; each field is one
// deliberate difference of package cache, named as in doc.go's table.
type tokenRules struct {
	// T1: a definite rejection (an error matching
	// reviewauth.ErrUnauthenticated) is cached for FailureTTL.
	cachesRejections bool
	// T2: authenticated without a user is "could not check", uncached.
	noUserUnavailable bool
	// T3: a panic is "could not check" (503), not an InternalError.
	panicUnavailable bool
}

var (
	apiserverTokenRules = tokenRules{}
	ourTokenRules       = tokenRules{cachesRejections: true, noUserUnavailable: true, panicUnavailable: true}
)

// tokenModel is a token cache as its rules describe it.
type tokenModel struct {
	rules   tokenRules
	entries map[string]tokenEntry
	calls   int64
}

type tokenEntry struct {
	kind    tokenKind
	token   string
	auds    []string
	expires time.Time
}

func newTokenModel(r tokenRules) *tokenModel {
	return &tokenModel{rules: r, entries: map[string]tokenEntry{}}
}

// authenticate returns what the cache answers at now for token under the
// context audiences auds (nil: none), when the world answers kind.
func (m *tokenModel) authenticate(now time.Time, token string, auds []string, kind tokenKind) string {
	key := fmt.Sprintf("%q %q", token, auds) // no audiences and empty ones share a key, in both caches
	if e, ok := m.entries[key]; ok && now.Before(e.expires) {
		return m.answer(e.kind, e.token, e.auds)
	}
	m.calls++
	if ttl := m.ttl(kind); ttl > 0 {
		m.entries[key] = tokenEntry{kind, token, auds, now.Add(ttl)}
	} else {
		delete(m.entries, key)
	}
	return m.answer(kind, token, auds)
}

func (m *tokenModel) ttl(k tokenKind) time.Duration {
	switch k {
	case tkOK, tkOKNotes:
		return diffSuccessTTL
	case tkNilUser:
		if m.rules.noUserUnavailable {
			return 0
		}
		return diffSuccessTTL
	case tkRefused, tkRefusedNotes, tkResponseNotOK:
		return diffFailureTTL
	case tkRejected, tkOKWithRejection:
		if m.rules.cachesRejections {
			return diffFailureTTL
		}
	}
	return 0
}

// answer is what a caller observes (see observeToken) for an answer of
// kind: warnings and audit annotations reach callers of successes only.
func (m *tokenModel) answer(k tokenKind, token string, auds []string) string {
	switch k {
	case tkOK:
		return fmt.Sprintf("user %s audiences %q", token, auds)
	case tkOKNotes:
		return fmt.Sprintf("user %s audiences %q; warnings [authn: warning for %s]; annotations map[note/%s:v]", token, auds, token, token)
	case tkRefused, tkRefusedNotes, tkResponseNotOK:
		return "refused"
	case tkRejected, tkOKWithRejection, tkNoCacheRejection:
		return "rejected: rejected " + token
	case tkPlainError, tkOKWithError:
		return "error: plain " + token
	case tkUnavailable:
		return "unavailable"
	case tkNilUser:
		if m.rules.noUserUnavailable {
			return "unavailable"
		}
		return "authenticated without a user"
	}
	if m.rules.panicUnavailable {
		return "unavailable"
	}
	return "internal error"
}

// observeToken says what a caller observed: the answer, and the warnings
// and audit annotations its context received.
func observeToken(ctx context.Context, rec *warningRecorder, resp *authenticator.Response, ok bool, err error) string {
	var s string
	switch {
	case err != nil && (ok || resp != nil):
		s = fmt.Sprintf("an error with an identity: (%v, %v, %v)", resp, ok, err)
	case err != nil:
		var rej *reviewauth.RejectedError
		var re *reviewauth.ReviewError
		switch {
		case errors.As(err, &rej):
			s = "rejected: " + rej.Reason
		case errors.As(err, &re):
			s = "unavailable"
		case apierrors.IsInternalError(err):
			s = "internal error"
		default:
			s = "error: " + err.Error()
		}
	case !ok && resp != nil:
		s = "refused, with a response"
	case !ok:
		s = "refused"
	case resp == nil || resp.User == nil:
		s = "authenticated without a user"
	default:
		s = fmt.Sprintf("user %s audiences %q", resp.User.GetName(), resp.Audiences)
	}
	return s + rec.String() + annotationsOf(ctx)
}

// warningRecorder is a caller's warning.Recorder.
type warningRecorder struct {
	mu       sync.Mutex
	warnings []string
}

func (r *warningRecorder) AddWarning(agent, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warnings = append(r.warnings, agent+": "+text)
}

func (r *warningRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.warnings) == 0 {
		return ""
	}
	return fmt.Sprintf("; warnings %v", r.warnings)
}

func annotationsOf(ctx context.Context) string {
	ac := audit.AuditContextFrom(ctx)
	if ac == nil {
		return ""
	}
	a := ac.GetEventAnnotations()
	if len(a) == 0 {
		return ""
	}
	return fmt.Sprintf("; annotations %v", a)
}

// callerContext is the context of one caller: a warning recorder, an audit
// context (as apiserver's filters give one), and audiences if auds is not
// nil.
func callerContext(auds []string) (context.Context, *warningRecorder) {
	rec := &warningRecorder{}
	ctx := warning.WithWarningRecorder(audit.WithAuditContext(context.Background()), rec)
	if auds != nil {
		ctx = authenticator.WithAudiences(ctx, auds)
	}
	return ctx, rec
}

// tokenRig runs the same calls through apiserver's token cache and ours,
// each over its own scripted authenticator of one shared world, and checks
// each side against its model at every step.
type tokenRig struct {
	t             testing.TB
	clk           *clocktesting.FakeClock
	world         *tokenWorld
	theirs, ours  authenticator.Token
	theirInner    *scriptedTokens
	ourInner      *scriptedTokens
	theirModel    *tokenModel
	ourModel      *tokenModel
	log           []string
	differed      bool // the two models answered differently at some step
	differedCalls bool // or called their authenticators a different number of times
}

func newTokenRig(t testing.TB) *tokenRig {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	w := newWorld[tokenKind]()
	r := &tokenRig{t: t, clk: clk, world: w,
		theirInner: &scriptedTokens{world: w}, ourInner: &scriptedTokens{world: w},
		theirModel: newTokenModel(apiserverTokenRules), ourModel: newTokenModel(ourTokenRules)}
	r.theirs = newAPIServerTokenCache(r.theirInner, false, diffSuccessTTL, diffFailureTTL, clk)
	ours, err := cache.NewTokenAuthenticator(r.ourInner, cache.TokenOptions{
		SuccessTTL: diffSuccessTTL, FailureTTL: diffFailureTTL, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.ours = ours
	return r
}

// authenticate makes one call on each side, for token with the context
// audiences auds (nil: none).
func (r *tokenRig) authenticate(token string, auds []string) {
	r.t.Helper()
	kind := r.world.kind(token)
	r.log = append(r.log, fmt.Sprintf("authenticate(%s, %q) [%v]", token, auds, kind))
	now := r.clk.Now()
	var answers []string
	for _, side := range []struct {
		name  string
		a     authenticator.Token
		inner *scriptedTokens
		model *tokenModel
	}{{"apiserver", r.theirs, r.theirInner, r.theirModel}, {"cache", r.ours, r.ourInner, r.ourModel}} {
		ctx, rec := callerContext(auds)
		resp, ok, err := side.a.AuthenticateToken(ctx, token)
		got := observeToken(ctx, rec, resp, ok, err)
		answers = append(answers, got)
		want := side.model.authenticate(now, token, auds, kind)
		if got != want || side.inner.calls.Load() != side.model.calls {
			r.t.Fatalf("%s: %q after %d calls; its model (rules %+v): %q after %d calls\nsteps:\n  %s",
				side.name, got, side.inner.calls.Load(), side.model.rules, want, side.model.calls, strings.Join(r.log, "\n  "))
		}
	}
	if r.theirModel.calls != r.ourModel.calls {
		r.differedCalls = true
	}
	if answers[0] != answers[1] {
		r.differed = true
	}
}

func (r *tokenRig) step(d time.Duration) {
	r.log = append(r.log, fmt.Sprintf("step(%v)", d))
	r.clk.Step(d)
}

func (r *tokenRig) set(token string, k tokenKind) {
	r.log = append(r.log, fmt.Sprintf("set(%s, %v)", token, k))
	r.world.set(token, k)
}

// The fuzz vocabulary: tokens, audience sets, clock steps.
var (
	diffTokens    = []string{"t0", "t1", "t2"}
	diffAudiences = [][]string{nil, {}, {"a"}, {"a", "b"}, {"b", "a"}}
	diffSteps     = []time.Duration{time.Nanosecond, diffFailureTTL - time.Nanosecond, diffFailureTTL,
		diffSuccessTTL - time.Nanosecond, diffSuccessTTL, time.Second, time.Hour}
)

// runTokenScript interprets script two bytes at a time: an operation and
// its argument (authenticate a token for an audience set, step the clock,
// change what the world answers for a token).
func runTokenScript(t testing.TB, script []byte) *tokenRig {
	r := newTokenRig(t)
	for i := 0; i+1 < len(script) && i < 128; i += 2 {
		op, arg := script[i], int(script[i+1])
		switch op % 4 {
		case 0, 1:
			r.authenticate(diffTokens[arg%len(diffTokens)], diffAudiences[(arg/len(diffTokens))%len(diffAudiences)])
		case 2:
			r.step(diffSteps[arg%len(diffSteps)])
		case 3:
			r.set(diffTokens[arg%len(diffTokens)], tokenKind((arg/len(diffTokens))%int(numFuzzTokenKinds)))
		}
	}
	return r
}

// tokenOp is one step of a table row.
type tokenOp func(r *tokenRig)

func auth(token string, auds ...string) tokenOp {
	return func(r *tokenRig) { r.authenticate(token, auds) }
}
func authNoAud(token string) tokenOp        { return func(r *tokenRig) { r.authenticate(token, nil) } }
func step(d time.Duration) tokenOp          { return func(r *tokenRig) { r.step(d) } }
func set(token string, k tokenKind) tokenOp { return func(r *tokenRig) { r.set(token, k) } }

// TestTokenAgainstAPIServer: sequences of calls through both token caches,
// each side checked against its model at every step. Rows without a
// difference must see the two caches behave alike; each row that pins a
// difference of doc.go's table must see it.
func TestTokenAgainstAPIServer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		diff string // the doc.go row it pins; "" for none
		ops  []tokenOp
	}{
		{"identity cached for SuccessTTL", "", []tokenOp{authNoAud("t"), step(diffSuccessTTL - time.Nanosecond), authNoAud("t"), step(time.Nanosecond), authNoAud("t")}},
		{"refusal cached for FailureTTL", "", []tokenOp{set("t", tkRefused), authNoAud("t"), step(diffFailureTTL - time.Nanosecond), authNoAud("t"), step(time.Nanosecond), authNoAud("t")}},
		{"response without ok is a refusal", "", []tokenOp{set("t", tkResponseNotOK), authNoAud("t"), authNoAud("t")}},
		{"plain error passes uncached", "", []tokenOp{set("t", tkPlainError), authNoAud("t"), authNoAud("t"), set("t", tkOK), authNoAud("t")}},
		{"outage passes uncached", "", []tokenOp{set("t", tkUnavailable), authNoAud("t"), set("t", tkOK), authNoAud("t")}},
		{"ok with an error is the error, uncached", "", []tokenOp{set("t", tkOKWithError), authNoAud("t"), authNoAud("t")}},
		{"NoCache rejection uncached", "", []tokenOp{set("t", tkNoCacheRejection), authNoAud("t"), set("t", tkOK), authNoAud("t")}},
		{"warnings and annotations replayed on hits", "", []tokenOp{set("t", tkOKNotes), authNoAud("t"), authNoAud("t"), auth("t", "a"), auth("t", "a")}},
		{"notes of a refusal reach nobody", "", []tokenOp{set("t", tkRefusedNotes), authNoAud("t"), authNoAud("t")}},
		{"keyed by context audiences, in order", "", []tokenOp{auth("t", "a"), auth("t", "a", "b"), auth("t", "b", "a"), authNoAud("t"), auth("t"), set("t", tkRefused), auth("t", "a"), authNoAud("t")}},
		{"an identity replaced after its TTL", "", []tokenOp{authNoAud("t"), set("t", tkRefused), authNoAud("t"), step(diffSuccessTTL), authNoAud("t")}},
		{"empty token cached like any other", "", []tokenOp{authNoAud(""), authNoAud(""), set("", tkRefused), step(diffSuccessTTL), authNoAud(""), authNoAud("")}},
		{"T1 definite rejection cached", "T1", []tokenOp{set("t", tkRejected), authNoAud("t"), set("t", tkOK), authNoAud("t"), step(diffFailureTTL - time.Nanosecond), authNoAud("t"), step(time.Nanosecond), authNoAud("t")}},
		{"T1 ok with a rejection cached as one", "T1", []tokenOp{set("t", tkOKWithRejection), authNoAud("t"), authNoAud("t")}},
		{"T2 authenticated without a user", "T2", []tokenOp{set("t", tkNilUser), authNoAud("t"), authNoAud("t"), set("t", tkOK), authNoAud("t")}},
		{"T3 panic", "T3", []tokenOp{set("t", tkPanic), authNoAud("t"), set("t", tkOK), authNoAud("t")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newTokenRig(t)
			for _, op := range tt.ops {
				op(r)
			}
			if differs := r.differed || r.differedCalls; differs != (tt.diff != "") {
				t.Errorf("the two caches differed: %v; want %v (%s)\nsteps:\n  %s", differs, tt.diff != "", tt.diff, strings.Join(r.log, "\n  "))
			}
		})
	}
}

// FuzzAgainstAPIServer runs a script of calls, clock steps and changes of
// what the wrapped authenticator and authorizer answer, through package
// cache and k8s.io/apiserver's caches (the token cache itself; the webhook
// authorizer's caching, reproduced), each side checked against its model
// at every step.
func FuzzAgainstAPIServer(f *testing.F) {
	f.Add([]byte{0, 0, 3, 3, 0, 0, 2, 4, 0, 0})
	f.Add([]byte{3, 9, 0, 0, 2, 2, 0, 0, 2, 0, 0, 0, 3, 12, 0, 0, 1, 5, 1, 8})
	for k := range numFuzzTokenKinds {
		f.Add([]byte{3, byte(int(k) * len(diffTokens)), 0, 0, 0, 0, 2, 1, 0, 0, 2, 4, 0, 0, 3, 0, 0, 0})
	}
	f.Fuzz(func(t *testing.T, script []byte) {
		runTokenScript(t, script)
		runAuthzScript(t, script)
	})
}

// webhookCache is the caching of k8s.io/apiserver's webhook authorizer
// (plugin/pkg/authorizer/webhook, v0.37.2: WebhookAuthorizer.Authorize),
// reproduced around any authorizer, as the oracle for cache.NewAuthorizer:
// an LRUExpireCache of 8192 entries keyed by the JSON of the
// SubjectAccessReview spec the attributes make; on a miss one call, never
// shared with concurrent callers, on the caller's context; a status
// without an error cached, an Allow for authorizedTTL and anything else
// for unauthorizedTTL, when the caller-controlled attributes (selectors not
// counted) total less than 10000 bytes; an error returned with
// decisionOnError and not cached. The wrapped authorizer stands for the
// API server: its decision and reason stand for the status, or, with an
// error, for decisionOnError. ConditionsAwareAuthorize is Authorize's
// answer, through the same cache (the webhook is not conditions-aware).
type webhookCache struct {
	inner                          authorizer.Authorizer
	lru                            *utilcache.LRUExpireCache
	authorizedTTL, unauthorizedTTL time.Duration
}

type webhookEntry struct {
	d      authorizer.Decision
	reason string
}

func newWebhookCache(inner authorizer.Authorizer, authorizedTTL, unauthorizedTTL time.Duration, clk utilcache.Clock) *webhookCache {
	return &webhookCache{inner: inner, lru: utilcache.NewLRUExpireCacheWithClock(8192, clk), authorizedTTL: authorizedTTL, unauthorizedTTL: unauthorizedTTL}
}

func (w *webhookCache) Authorize(ctx context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	key, err := json.Marshal(webhookSpec(attr))
	if err != nil {
		return authorizer.DecisionNoOpinion, "", err
	}
	if e, ok := w.lru.Get(string(key)); ok {
		return e.(webhookEntry).d, e.(webhookEntry).reason, nil
	}
	d, reason, err := w.inner.Authorize(ctx, attr)
	if err != nil {
		return d, reason, err
	}
	if webhookShouldCache(attr) {
		ttl := w.unauthorizedTTL
		if d == authorizer.DecisionAllow {
			ttl = w.authorizedTTL
		}
		w.lru.Add(string(key), webhookEntry{d, reason}, ttl)
	}
	return d, reason, nil
}

func (w *webhookCache) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(w.Authorize(ctx, a))
}

func (w *webhookCache) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// webhookSpec is the spec WebhookAuthorizer.Authorize builds, whose JSON
// keys its cache (resourceAttributesFrom and the selector conversions,
// copied).
func webhookSpec(attr authorizer.Attributes) authorizationv1.SubjectAccessReviewSpec {
	var spec authorizationv1.SubjectAccessReviewSpec
	if u := attr.GetUser(); u != nil {
		spec = authorizationv1.SubjectAccessReviewSpec{User: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
		if extra := u.GetExtra(); extra != nil {
			spec.Extra = map[string]authorizationv1.ExtraValue{}
			for k, v := range extra {
				spec.Extra[k] = v
			}
		}
	}
	if !attr.IsResourceRequest() {
		spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: attr.GetPath(), Verb: attr.GetVerb()}
		return spec
	}
	ra := &authorizationv1.ResourceAttributes{Namespace: attr.GetNamespace(), Verb: attr.GetVerb(), Group: attr.GetAPIGroup(),
		Version: attr.GetAPIVersion(), Resource: attr.GetResource(), Subresource: attr.GetSubresource(), Name: attr.GetName()}
	if reqs, _ := attr.GetFieldSelector(); len(reqs) > 0 {
		var out []metav1.FieldSelectorRequirement
		for _, r := range reqs {
			switch r.Operator {
			case selection.Equals, selection.DoubleEquals, selection.In:
				out = append(out, metav1.FieldSelectorRequirement{Key: r.Field, Operator: metav1.FieldSelectorOpIn, Values: []string{r.Value}})
			case selection.NotEquals, selection.NotIn:
				out = append(out, metav1.FieldSelectorRequirement{Key: r.Field, Operator: metav1.FieldSelectorOpNotIn, Values: []string{r.Value}})
			}
		}
		if len(out) > 0 {
			ra.FieldSelector = &authorizationv1.FieldSelectorAttributes{Requirements: out}
		}
	}
	if reqs, _ := attr.GetLabelSelector(); len(reqs) > 0 {
		var out []metav1.LabelSelectorRequirement
		for _, r := range reqs {
			lr := metav1.LabelSelectorRequirement{Key: r.Key()}
			if values := r.ValuesUnsorted(); len(values) > 0 {
				lr.Values = values
			}
			switch r.Operator() {
			case selection.Equals, selection.DoubleEquals, selection.In:
				lr.Operator = metav1.LabelSelectorOpIn
			case selection.NotEquals, selection.NotIn:
				lr.Operator = metav1.LabelSelectorOpNotIn
			case selection.Exists:
				lr.Operator = metav1.LabelSelectorOpExists
			case selection.DoesNotExist:
				lr.Operator = metav1.LabelSelectorOpDoesNotExist
			default:
				continue
			}
			out = append(out, lr)
		}
		if len(out) > 0 {
			ra.LabelSelector = &authorizationv1.LabelSelectorAttributes{Requirements: out}
		}
	}
	spec.ResourceAttributes = ra
	return spec
}

// webhookShouldCache is the webhook's shouldCache: selectors not counted.
func webhookShouldCache(attr authorizer.Attributes) bool {
	n := len(attr.GetNamespace()) + len(attr.GetVerb()) + len(attr.GetAPIGroup()) + len(attr.GetAPIVersion()) +
		len(attr.GetResource()) + len(attr.GetSubresource()) + len(attr.GetName()) + len(attr.GetPath())
	return n < 10000
}

// decisionKind is what a scripted authorizer decides for a user.
type decisionKind uint8

const (
	dkAllow decisionKind = iota
	dkDeny
	dkNoOpinion
	dkAllowError
	dkDenyError
	dkNoOpinionError
	dkUnavailable // NoOpinion, with a *reviewauth.ReviewError
	dkAllowNotes  // Allow, with a warning and an audit annotation
	numDecisionKinds
)

var decisionKindNames = [...]string{"allow", "deny", "no opinion", "allow with an error", "deny with an error",
	"no opinion with an error", "unavailable", "allow with notes"}

func (k decisionKind) String() string { return decisionKindNames[k] }

func (k decisionKind) decision() authorizer.Decision {
	switch k {
	case dkAllow, dkAllowError, dkAllowNotes:
		return authorizer.DecisionAllow
	case dkDeny, dkDenyError:
		return authorizer.DecisionDeny
	}
	return authorizer.DecisionNoOpinion
}

func (k decisionKind) err() error {
	switch k {
	case dkAllowError, dkDenyError, dkNoOpinionError:
		return errors.New("webhook error")
	case dkUnavailable:
		return &reviewauth.ReviewError{Review: "SubjectAccessReview", Code: 503}
	}
	return nil
}

// scriptedAuthorizer decides for each user as its world says now, and
// counts its calls. Its decisions read the user's name and its groups as a
// set (as RBAC does), and the request.
type scriptedAuthorizer struct {
	world *decisionWorld
	calls atomic.Int64
}

type decisionWorld = world[decisionKind]

func (s *scriptedAuthorizer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	s.calls.Add(1)
	k := s.world.kind(a.GetUser().GetName())
	if k == dkAllowNotes {
		warning.AddWarning(ctx, "authz", "warning for "+a.GetUser().GetName())
		audit.AddAuditAnnotation(ctx, "note/"+a.GetUser().GetName(), "v")
	}
	return k.decision(), fmt.Sprintf("%v for %s", k, a.GetUser().GetName()), k.err()
}

func (s *scriptedAuthorizer) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(s.Authorize(ctx, a))
}

func (s *scriptedAuthorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// authzRules are the rules of an authorizer cache model. The zero value is
// the webhook authorizer's caching; each field is one deliberate
// difference of package cache, named as in doc.go's table.
type authzRules struct {
	// A2: groups are a set in the key (the webhook keys their order).
	groupsAsSet bool
	// A3: selectors count towards the size from which nothing is cached
	// (kubernetes#141457).
	countsSelectors bool
	// A4: an entry expires at exactly its TTL (the webhook's
	// LRUExpireCache still serves it then, and expires it 1 ns later).
	expiresAtTTL bool
	// A5: Authorize and ConditionsAwareAuthorize are cached apart.
	kindsApart bool
	// A8: warnings and audit annotations are replayed on hits (the
	// webhook's SubjectAccessReview records none).
	replaysNotes bool
}

var (
	webhookRules  = authzRules{}
	ourAuthzRules = authzRules{groupsAsSet: true, countsSelectors: true, expiresAtTTL: true, kindsApart: true, replaysNotes: true}
)

// diffRequest is one request of the authorizer fuzz vocabulary.
type diffRequest struct {
	name    string
	attrs   authorizer.AttributesRecord
	ctlSize int // caller-controlled bytes, selectors not counted
	selSize int // bytes of the selectors
}

func diffRequests() []diffRequest {
	users := []*user.DefaultInfo{
		{Name: "alice", Groups: []string{"g1", "g2"}},
		{Name: "alice", Groups: []string{"g2", "g1"}},
		{Name: "bob", UID: "u-bob", Groups: []string{"g1"}, Extra: map[string][]string{"k": {"v"}}},
	}
	long := strings.Repeat("x", 10000)
	small, err := labels.Parse("app=web")
	if err != nil {
		panic(err)
	}
	// A selector of many values: small each, 10,000 bytes of values in sum.
	vals := make([]string, 200)
	for j := range vals {
		vals[j] = fmt.Sprintf("value-%03d-%s", j, long[:40])
	}
	many, err := labels.NewRequirement("app", selection.In, vals)
	if err != nil {
		panic(err)
	}
	var reqs []diffRequest
	for i, u := range users {
		get := authorizer.AttributesRecord{User: u, Verb: "get", Namespace: "ns", APIVersion: "v1", Resource: "pods", Name: "p", ResourceRequest: true}
		list := authorizer.AttributesRecord{User: u, Verb: "list", Namespace: "ns", APIVersion: "v1", Resource: "pods", ResourceRequest: true}
		listSel, bigSel := list, list
		listSel.LabelSelectorRequirements, _ = small.Requirements()
		bigSel.LabelSelectorRequirements = []labels.Requirement{*many}
		atLimit, belowLimit := get, get
		atLimit.Name = long[:10000-len("getnsv1pods")]
		belowLimit.Name = long[:10000-len("getnsv1pods")-1]
		metrics := authorizer.AttributesRecord{User: u, Verb: "get", Path: "/metrics"}
		for _, r := range []diffRequest{
			{"get", get, len("getnsv1podsp"), 0},
			{"list", list, len("listnsv1pods"), 0},
			{"list with a selector", listSel, len("listnsv1pods"), len("appweb")},
			{"list with a selector of 10,000 bytes", bigSel, len("listnsv1pods"), 10003},
			{"get of 10,000 bytes", atLimit, 10000, 0},
			{"get of 9,999 bytes", belowLimit, 9999, 0},
			{"get /metrics", metrics, len("get/metrics"), 0},
		} {
			r.name = fmt.Sprintf("%s(%d): %s", u.Name, i, r.name)
			reqs = append(reqs, r)
		}
	}
	return reqs
}

var diffReqs = diffRequests()

// diffRequestsPerUser is how many of diffReqs each user makes, in the same
// order.
const diffRequestsPerUser = 7

// authzModel is an authorizer cache as its rules describe it.
type authzModel struct {
	rules   authzRules
	entries map[string]authzEntry
	calls   int64
}

type authzEntry struct {
	kind    decisionKind
	user    string
	expires time.Time
}

func newAuthzModel(r authzRules) *authzModel {
	return &authzModel{rules: r, entries: map[string]authzEntry{}}
}

// authorize returns what the cache answers request i (by Authorize, or
// ConditionsAwareAuthorize if ca) at now, when the world decides kind.
func (m *authzModel) authorize(now time.Time, i int, ca bool, kind decisionKind) string {
	r := diffReqs[i]
	groups := slices.Clone(r.attrs.User.GetGroups())
	if m.rules.groupsAsSet {
		slices.Sort(groups)
	}
	key := fmt.Sprintf("%s %q %d", r.attrs.User.GetName(), groups, i%diffRequestsPerUser)
	if ca && m.rules.kindsApart {
		key += " conditions-aware"
	}
	if e, ok := m.entries[key]; ok && (now.Before(e.expires) || !m.rules.expiresAtTTL && now.Equal(e.expires)) {
		return m.answer(e.kind, e.user, true)
	}
	m.calls++
	size := r.ctlSize
	if m.rules.countsSelectors {
		size += r.selSize
	}
	if kind.err() == nil && size < 10000 {
		ttl := diffFailureTTL
		if kind.decision() == authorizer.DecisionAllow {
			ttl = diffSuccessTTL
		}
		m.entries[key] = authzEntry{kind, r.attrs.User.GetName(), now.Add(ttl)}
	}
	return m.answer(kind, r.attrs.User.GetName(), false)
}

// answer is what a caller observes (see observeDecision).
func (m *authzModel) answer(k decisionKind, name string, hit bool) string {
	s := fmt.Sprintf("%v %q", k.decision(), fmt.Sprintf("%v for %s", k, name))
	switch err := k.err(); {
	case errors.As(err, new(*reviewauth.ReviewError)):
		s += " unavailable"
	case err != nil:
		s += " error: " + err.Error()
	}
	if k == dkAllowNotes && (!hit || m.rules.replaysNotes) {
		s += fmt.Sprintf("; warnings [authz: warning for %s]; annotations map[note/%s:v]", name, name)
	}
	return s
}

func observeDecision(ctx context.Context, rec *warningRecorder, d authorizer.Decision, reason string, err error) string {
	s := fmt.Sprintf("%v %q", d, reason)
	var re *reviewauth.ReviewError
	switch {
	case errors.As(err, &re):
		s += " unavailable"
	case err != nil:
		s += " error: " + err.Error()
	}
	return s + rec.String() + annotationsOf(ctx)
}

// authzRig runs the same requests through the webhook's caching and ours,
// each over its own scripted authorizer of one shared world, and checks
// each side against its model at every step.
type authzRig struct {
	t                      testing.TB
	clk                    *clocktesting.FakeClock
	world                  *decisionWorld
	theirs, ours           authorizer.Authorizer
	theirInner, ourInner   *scriptedAuthorizer
	theirModel, ourModel   *authzModel
	log                    []string
	differed, differedCall bool
}

func newAuthzRig(t testing.TB) *authzRig {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	w := newWorld[decisionKind]()
	r := &authzRig{t: t, clk: clk, world: w, theirInner: &scriptedAuthorizer{world: w}, ourInner: &scriptedAuthorizer{world: w},
		theirModel: newAuthzModel(webhookRules), ourModel: newAuthzModel(ourAuthzRules)}
	r.theirs = newWebhookCache(r.theirInner, diffSuccessTTL, diffFailureTTL, clk)
	ours, err := cache.NewAuthorizer(r.ourInner, cache.AuthorizerOptions{AllowedTTL: diffSuccessTTL, DeniedTTL: diffFailureTTL, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	r.ours = ours
	return r
}

func (r *authzRig) authorize(i int, ca bool) {
	r.t.Helper()
	req := diffReqs[i]
	kind := r.world.kind(req.attrs.User.GetName())
	r.log = append(r.log, fmt.Sprintf("authorize(%s, conditions-aware %v) [%v]", req.name, ca, kind))
	now := r.clk.Now()
	var answers []string
	for _, side := range []struct {
		name  string
		a     authorizer.Authorizer
		inner *scriptedAuthorizer
		model *authzModel
	}{{"webhook", r.theirs, r.theirInner, r.theirModel}, {"cache", r.ours, r.ourInner, r.ourModel}} {
		ctx, rec := callerContext(nil)
		var d authorizer.Decision
		var reason string
		var err error
		if ca {
			cad := side.a.ConditionsAwareAuthorize(ctx, req.attrs)
			switch {
			case cad.IsAllow():
				d = authorizer.DecisionAllow
			case cad.IsNoOpinion():
				d = authorizer.DecisionNoOpinion
			}
			reason, err = cad.Reason(), cad.Error()
		} else {
			d, reason, err = side.a.Authorize(ctx, req.attrs)
		}
		got := observeDecision(ctx, rec, d, reason, err)
		answers = append(answers, got)
		want := side.model.authorize(now, i, ca, kind)
		if got != want || side.inner.calls.Load() != side.model.calls {
			r.t.Fatalf("%s: %q after %d calls; its model (rules %+v): %q after %d calls\nsteps:\n  %s",
				side.name, got, side.inner.calls.Load(), side.model.rules, want, side.model.calls, strings.Join(r.log, "\n  "))
		}
	}
	if answers[0] != answers[1] {
		r.differed = true
	}
	if r.theirModel.calls != r.ourModel.calls {
		r.differedCall = true
	}
}

func (r *authzRig) step(d time.Duration) {
	r.log = append(r.log, fmt.Sprintf("step(%v)", d))
	r.clk.Step(d)
}

func (r *authzRig) set(name string, k decisionKind) {
	r.log = append(r.log, fmt.Sprintf("set(%s, %v)", name, k))
	r.world.set(name, k)
}

// runAuthzScript interprets script two bytes at a time, as runTokenScript.
func runAuthzScript(t testing.TB, script []byte) *authzRig {
	r := newAuthzRig(t)
	names := []string{"alice", "bob"}
	for i := 0; i+1 < len(script) && i < 128; i += 2 {
		op, arg := script[i], int(script[i+1])
		switch op % 5 {
		case 0, 1:
			r.authorize(arg%len(diffReqs), false)
		case 2:
			r.authorize(arg%len(diffReqs), true)
		case 3:
			r.step(diffSteps[arg%len(diffSteps)])
		case 4:
			r.set(names[arg%len(names)], decisionKind((arg/len(names))%int(numDecisionKinds)))
		}
	}
	return r
}

// authzOp is one step of a table row.
type authzOp func(r *authzRig)

func authorize(i int) authzOp                    { return func(r *authzRig) { r.authorize(i, false) } }
func authzCA(i int) authzOp                      { return func(r *authzRig) { r.authorize(i, true) } }
func authzStep(d time.Duration) authzOp          { return func(r *authzRig) { r.step(d) } }
func decide(name string, k decisionKind) authzOp { return func(r *authzRig) { r.set(name, k) } }

// TestAuthorizerAgainstWebhook: sequences of requests through the webhook
// authorizer's caching and ours, each side checked against its model at
// every step; as TestTokenAgainstAPIServer.
func TestAuthorizerAgainstWebhook(t *testing.T) {
	t.Parallel()
	const (
		get, list, listSel, listBigSel, atLimit, belowLimit, metrics = 0, 1, 2, 3, 4, 5, 6
		alice2                                                       = diffRequestsPerUser // alice with her groups in another order
		bob                                                          = 2 * diffRequestsPerUser
	)
	tests := []struct {
		name string
		diff string
		ops  []authzOp
	}{
		{"allow cached for the allowed TTL", "", []authzOp{authorize(get), authzStep(diffSuccessTTL - time.Nanosecond), authorize(get), authzStep(time.Second), authorize(get)}},
		{"deny and no opinion cached for the denied TTL", "", []authzOp{decide("alice", dkDeny), authorize(get), decide("alice", dkAllow), authorize(get), authzStep(diffFailureTTL + time.Nanosecond), authorize(get), decide("bob", dkNoOpinion), authorize(bob + metrics), decide("bob", dkAllow), authorize(bob + metrics)}},
		{"errors with each decision come back as they are, uncached", "", []authzOp{decide("alice", dkAllowError), authorize(get), authorize(get), decide("alice", dkDenyError), authorize(get), decide("alice", dkNoOpinionError), authorize(list), authorize(list), decide("alice", dkUnavailable), authorize(metrics), decide("alice", dkAllow), authorize(metrics)}},
		{"keys by request and user", "", []authzOp{authorize(get), authorize(list), authorize(listSel), authorize(metrics), authorize(bob + get), decide("alice", dkDeny), authorize(get), authorize(list), authorize(listSel), authorize(metrics)}},
		{"not cached from 10,000 bytes", "", []authzOp{authorize(atLimit), authorize(belowLimit), decide("alice", dkDeny), authorize(atLimit), authorize(belowLimit)}},
		{"A2 groups as a set", "A2", []authzOp{authorize(get), authorize(alice2 + get)}},
		{"A3 selectors counted", "A3", []authzOp{authorize(listBigSel), decide("alice", dkDeny), authorize(listBigSel)}},
		{"A4 expired at exactly the TTL", "A4", []authzOp{authorize(get), authzStep(diffSuccessTTL), decide("alice", dkDeny), authorize(get)}},
		{"A5 conditions-aware calls cached apart", "A5", []authzOp{authorize(get), authzCA(get), decide("alice", dkDeny), authzCA(list), authorize(list)}},
		{"A8 notes replayed on hits", "A8", []authzOp{decide("alice", dkAllowNotes), authorize(get), authorize(get)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newAuthzRig(t)
			for _, op := range tt.ops {
				op(r)
			}
			if differs := r.differed || r.differedCall; differs != (tt.diff != "") {
				t.Errorf("the two caches differed: %v; want %v (%s)\nsteps:\n  %s", differs, tt.diff != "", tt.diff, strings.Join(r.log, "\n  "))
			}
		})
	}
}

// gatedTokens authenticates every token as a user of its name, with a
// warning and an audit annotation, once released; a call whose context
// ends first returns a refusal (as a careless authenticator may), and
// signals its return.
type gatedTokens struct {
	started  chan struct{}
	release  chan struct{}
	returned chan struct{}
	calls    atomic.Int64
}

func newGatedTokens() *gatedTokens {
	return &gatedTokens{started: make(chan struct{}, 100), release: make(chan struct{}), returned: make(chan struct{}, 100)}
}

func (g *gatedTokens) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	g.calls.Add(1)
	g.started <- struct{}{}
	defer func() { g.returned <- struct{}{} }()
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, false, nil
	}
	warning.AddWarning(ctx, "authn", "warning for "+token)
	audit.AddAuditAnnotation(ctx, "note/"+token, "v")
	return &authenticator.Response{User: &user.DefaultInfo{Name: token}}, true, nil
}

// TestTokenCallersAgainstAPIServer: what a sequential model cannot say,
// callers that share a call or leave it, on both token caches.
func TestTokenCallersAgainstAPIServer(t *testing.T) {
	t.Parallel()
	const want = "user t audiences []; warnings [authn: warning for t]; annotations map[note/t:v]"
	sides := func(t *testing.T, g *gatedTokens) map[string]authenticator.Token {
		ours, err := cache.NewTokenAuthenticator(g, cache.TokenOptions{SuccessTTL: diffSuccessTTL, FailureTTL: diffFailureTTL})
		if err != nil {
			t.Fatal(err)
		}
		return map[string]authenticator.Token{
			"apiserver": newAPIServerTokenCache(g, false, diffSuccessTTL, diffFailureTTL, clock.RealClock{}),
			"cache":     ours,
		}
	}
	call := func(a authenticator.Token, ctx context.Context, rec *warningRecorder) string {
		resp, ok, err := a.AuthenticateToken(ctx, "t")
		return observeToken(ctx, rec, resp, ok, err)
	}
	t.Run("concurrent callers share one call, and each gets its notes", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{"apiserver", "cache"} {
			g := newGatedTokens()
			a := sides(t, g)[name]
			got := make(chan string, 10)
			for range 10 {
				go func() { ctx, rec := callerContext(nil); got <- call(a, ctx, rec) }()
			}
			<-g.started
			close(g.release)
			for range 10 {
				if s := <-got; s != want {
					t.Errorf("%s: a caller got %q; want %q", name, s, want)
				}
			}
			if n := g.calls.Load(); n != 1 {
				t.Errorf("%s: %d calls; want 1", name, n)
			}
		}
	})
	t.Run("T4 a caller whose context has ended", func(t *testing.T) {
		t.Parallel()
		for name, wantCalls := range map[string]int64{"apiserver": 1, "cache": 0} {
			g := newGatedTokens()
			a := sides(t, g)[name]
			close(g.release)
			ctx, rec := callerContext(nil)
			ctx, cancel := context.WithCancel(ctx)
			cancel()
			s := call(a, ctx, rec)
			switch {
			case name == "cache" && s != "unavailable":
				t.Errorf("cache: the caller that had left got %q; want unavailable (a ReviewError wrapping context.Canceled)", s)
			case name == "apiserver" && s != "error: context canceled" && s != want:
				t.Errorf("apiserver: the caller that had left got %q; want its context's error, or the answer", s)
			}
			// apiserver's shared call runs on, detached, and caches its
			// answer: the next caller joins it or hits.
			ctx, rec = callerContext(nil)
			if s := call(a, ctx, rec); s != want {
				t.Errorf("%s: the next caller got %q; want %q", name, s, want)
			}
			if n := g.calls.Load(); n != wantCalls+boolInt(name == "cache") {
				t.Errorf("%s: %d calls; want %d", name, n, wantCalls+boolInt(name == "cache"))
			}
		}
	})
	t.Run("T5 a call every caller left", func(t *testing.T) {
		t.Parallel()
		for name, wantCalls := range map[string]int64{"apiserver": 1, "cache": 2} {
			g := newGatedTokens()
			a := sides(t, g)[name]
			ctx, rec := callerContext(nil)
			ctx, cancel := context.WithCancel(ctx)
			left := make(chan string, 1)
			go func() { left <- call(a, ctx, rec) }()
			<-g.started
			cancel()
			<-left
			if name == "apiserver" {
				close(g.release) // its call is detached: only the release ends it
			}
			<-g.returned
			// Ours: the call was cancelled when its caller left, and its
			// refusal must not be cached. A caller whose context has
			// ended sees only what is cached: probe until the call has
			// had every chance to store what it would.
			if name == "cache" {
				for range 1000 {
					pctx, prec := callerContext(nil)
					pctx, pcancel := context.WithCancel(pctx)
					pcancel()
					if s := call(a, pctx, prec); s != "unavailable" {
						t.Fatalf("cache: after the abandoned call, a cached %q; want nothing cached", s)
					}
					runtime.Gosched()
				}
				close(g.release)
			}
			ctx, rec = callerContext(nil)
			if s := call(a, ctx, rec); s != want {
				t.Errorf("%s: the next caller got %q; want %q", name, s, want)
			}
			if n := g.calls.Load(); n != wantCalls {
				t.Errorf("%s: %d calls; want %d", name, n, wantCalls)
			}
		}
	})
}

// TestTokenContextValuesAgainstAPIServer: the shared call carries the
// context values of the caller that started it (its logger, its trace
// span, ...), apiserver's only the audiences (T7).
func TestTokenContextValuesAgainstAPIServer(t *testing.T) {
	t.Parallel()
	type key struct{}
	inner := authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		v, _ := ctx.Value(key{}).(string)
		return &authenticator.Response{User: &user.DefaultInfo{Name: v}}, true, nil
	})
	ours, err := cache.NewTokenAuthenticator(inner, cache.TokenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), key{}, "value")
	for name, tt := range map[string]struct {
		a    authenticator.Token
		want string
	}{"apiserver": {newAPIServerTokenCache(inner, false, time.Minute, time.Minute, clock.RealClock{}), ""}, "cache": {ours, "value"}} {
		if resp, ok, err := tt.a.AuthenticateToken(ctx, "t"); !ok || resp.User.GetName() != tt.want {
			t.Errorf("%s: the wrapped authenticator saw the value %q (%v); want %q", name, resp.User.GetName(), err, tt.want)
		}
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// gatedAuthorizer allows everyone once released. A call whose context ends
// first answers NoOpinion with the context's error, as the webhook
// authorizer does when its SubjectAccessReview fails (decisionOnError
// NoOpinion, apiserver's delegated default); a careless one (carelessly)
// answers NoOpinion without an error.
type gatedAuthorizer struct {
	started, release, returned chan struct{}
	careless                   bool
	calls                      atomic.Int64
}

func newGatedAuthorizer() *gatedAuthorizer {
	return &gatedAuthorizer{started: make(chan struct{}, 100), release: make(chan struct{}), returned: make(chan struct{}, 100)}
}

func (g *gatedAuthorizer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	g.calls.Add(1)
	g.started <- struct{}{}
	defer func() { g.returned <- struct{}{} }()
	select {
	case <-g.release:
		return authorizer.DecisionAllow, "allowed", nil
	case <-ctx.Done():
		if g.careless {
			return authorizer.DecisionNoOpinion, "", nil
		}
		return authorizer.DecisionNoOpinion, "", ctx.Err()
	}
}

func (g *gatedAuthorizer) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(g.Authorize(ctx, a))
}

func (g *gatedAuthorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// TestAuthorizerCallersAgainstWebhook: what a sequential model cannot say,
// callers that share a call or leave it, on the webhook's caching and ours.
func TestAuthorizerCallersAgainstWebhook(t *testing.T) {
	t.Parallel()
	attrs := diffReqs[0].attrs
	sides := func(t *testing.T, g *gatedAuthorizer, m *metrics.Metrics) map[string]authorizer.Authorizer {
		ours, err := cache.NewAuthorizer(g, cache.AuthorizerOptions{AllowedTTL: diffSuccessTTL, DeniedTTL: diffFailureTTL, Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		return map[string]authorizer.Authorizer{"webhook": newWebhookCache(g, diffSuccessTTL, diffFailureTTL, clock.RealClock{}), "cache": ours}
	}
	call := func(a authorizer.Authorizer, ctx context.Context) string {
		d, reason, err := a.Authorize(ctx, attrs)
		return observeDecision(ctx, &warningRecorder{}, d, reason, err)
	}
	t.Run("A1 concurrent identical requests", func(t *testing.T) {
		t.Parallel()
		for name, wantCalls := range map[string]int64{"webhook": 10, "cache": 1} {
			g := newGatedAuthorizer()
			m := metrics.New()
			a := sides(t, g, m)[name]
			got := make(chan string, 10)
			for range 10 {
				go func() { got <- call(a, context.Background()) }()
			}
			for range wantCalls {
				<-g.started
			}
			for name == "cache" && metricValue(t, m, "reviewauth_cache_coalesced_total", "authorizer") < 9 {
				runtime.Gosched()
			}
			close(g.release)
			for range 10 {
				if s := <-got; s != `Allow "allowed"` {
					t.Errorf("%s: a caller got %q; want Allow", name, s)
				}
			}
			if n := g.calls.Load(); n != wantCalls {
				t.Errorf("%s: %d calls; want %d", name, n, wantCalls)
			}
		}
	})
	t.Run("A6 a caller whose context has ended", func(t *testing.T) {
		t.Parallel()
		for name, want := range map[string]string{"webhook": `NoOpinion "" error: context canceled`, "cache": `Deny "" unavailable`} {
			g := newGatedAuthorizer()
			a := sides(t, g, nil)[name]
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if s := call(a, ctx); s != want {
				t.Errorf("%s: the caller that had left got %q; want %q", name, s, want)
			}
		}
	})
	t.Run("A7 a careless NoOpinion of a call every caller left", func(t *testing.T) {
		t.Parallel()
		g := newGatedAuthorizer()
		g.careless = true
		a := sides(t, g, nil)["cache"]
		ctx, cancel := context.WithCancel(context.Background())
		left := make(chan string, 1)
		go func() { left <- call(a, ctx) }()
		<-g.started
		cancel()
		if s := <-left; s != `Deny "" unavailable` {
			t.Errorf("the caller that left got %q; want Deny, unavailable", s)
		}
		<-g.returned
		for range 1000 {
			pctx, pcancel := context.WithCancel(context.Background())
			pcancel()
			if s := call(a, pctx); s != `Deny "" unavailable` {
				t.Fatalf("after the abandoned call, a cached %q; want nothing cached", s)
			}
			runtime.Gosched()
		}
		close(g.release)
		if s := call(a, context.Background()); s != `Allow "allowed"` || g.calls.Load() != 2 {
			t.Errorf("the next caller got %q after %d calls; want Allow after 2", s, g.calls.Load())
		}
	})
}

// TestAuthorizerUnionLikeWebhook: union.New(cache.NewAuthorizer(webhook),
// rbac) behaves like union.New(webhook, rbac), for k8s.io/apiserver's own
// webhook authorizer (a SubjectAccessReview that fails gives its
// decisionOnError, NoOpinion or Deny, with the error) and for every
// decision a scripted authorizer gives, with an error or without, on a
// miss and on a hit.
func TestAuthorizerUnionLikeWebhook(t *testing.T) {
	t.Parallel()
	rbac := func(d authorizer.Decision) authorizer.Authorizer {
		return authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
			return d, "rbac", nil
		})
	}
	compare := func(t *testing.T, first authorizer.Authorizer, second authorizer.Authorizer, then func()) {
		t.Helper()
		ours, err := cache.NewAuthorizer(first, cache.AuthorizerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for round := range 2 {
			var got []string
			for _, a := range []authorizer.Authorizer{first, ours} {
				u, err := union.New(union.NamedAuthorizer{AuthorizerName: "first", Authorizer: a}, union.NamedAuthorizer{AuthorizerName: "rbac", Authorizer: second})
				if err != nil {
					t.Fatal(err)
				}
				d, reason, err := u.Authorize(context.Background(), diffReqs[0].attrs)
				got = append(got, fmt.Sprintf("%v %q %v", d, reason, err))
				if then != nil {
					then()
				}
			}
			if got[0] != got[1] {
				t.Errorf("round %d: union(first, rbac) = %s; union(cache(first), rbac) = %s", round, got[0], got[1])
			}
		}
	}
	srv := authtest.Start(t)
	cs, err := kubernetes.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, onError := range []authorizer.Decision{authorizer.DecisionNoOpinion, authorizer.DecisionDeny} {
		for _, second := range []authorizer.Decision{authorizer.DecisionAllow, authorizer.DecisionDeny, authorizer.DecisionNoOpinion} {
			t.Run(fmt.Sprintf("webhook failing with %v, rbac %v", onError, second), func(t *testing.T) {
				wh, err := webhook.NewFromInterface(cs.AuthorizationV1(), time.Minute, time.Minute, wait.Backoff{Steps: 1},
					onError, webhookmetrics.NoopAuthorizerMetrics{}, nil)
				if err != nil {
					t.Fatal(err)
				}
				srv.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{Status: 500})
				defer srv.ClearFaults()
				compare(t, wh, rbac(second), nil)
			})
		}
	}
	for k := range numDecisionKinds {
		for _, second := range []authorizer.Decision{authorizer.DecisionAllow, authorizer.DecisionDeny} {
			t.Run(fmt.Sprintf("%v, rbac %v", k, second), func(t *testing.T) {
				t.Parallel()
				w := newWorld[decisionKind]()
				w.set("alice", k)
				compare(t, &scriptedAuthorizer{world: w}, rbac(second), nil)
			})
		}
	}
}
