package cache_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/cache"
)

// outcome is what a decorated call came to, in the words both decorators
// share.
type outcome string

const (
	success     outcome = "success"     // authenticated, allowed
	rejected    outcome = "rejected"    // unauthenticated, denied
	unavailable outcome = "unavailable" // could not check
)

func tokenOutcome(ok bool, err error) outcome {
	switch {
	case ok && err == nil:
		return success
	case errors.Is(err, reviewauth.ErrUnavailable):
		return unavailable
	}
	return rejected
}

func decisionOutcome(d authorizer.Decision, err error) outcome {
	switch {
	case err != nil && d == authorizer.DecisionAllow:
		return "allow with an error"
	case err != nil && errors.Is(err, reviewauth.ErrUnavailable):
		return unavailable
	case err != nil:
		return "error not matching ErrUnavailable"
	case d == authorizer.DecisionAllow:
		return success
	}
	return rejected
}

// answer is what a fake wrapped authenticator or authorizer gives.
type answer int

const (
	yes    answer = iota // authenticated / Allow
	no                   // rejected / Deny
	outage               // an error matching ErrUnavailable
	other                // an error that does not
)

// subject is a decorator over a fake whose next answer the test sets,
// seen through the vocabulary both share.
type subject struct {
	answer atomic.Int32
	calls  atomic.Int32
	call   func(ctx context.Context) outcome
}

func (s *subject) set(a answer) { s.answer.Store(int32(a)) }

var errOutage = &reviewauth.ReviewError{Review: "test", Code: 503}

// tokenSubject is a TokenAuthenticator over a fake authenticator.
func tokenSubject(t *testing.T, opts cache.TokenOptions) *subject {
	t.Helper()
	s := &subject{}
	inner := authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		s.calls.Add(1)
		switch answer(s.answer.Load()) {
		case yes:
			return &authenticator.Response{User: &user.DefaultInfo{Name: "alice"}}, true, nil
		case no:
			return nil, false, &reviewauth.RejectedError{Reason: "no"}
		case outage:
			return nil, false, errOutage
		}
		return nil, false, errors.New("other")
	})
	c, err := cache.NewTokenAuthenticator(inner, opts)
	if err != nil {
		t.Fatal(err)
	}
	s.call = func(ctx context.Context) outcome {
		_, ok, err := c.AuthenticateToken(ctx, "token")
		return tokenOutcome(ok, err)
	}
	return s
}

// authorizerSubject is an Authorizer over a fake authorizer.
func authorizerSubject(t *testing.T, opts cache.AuthorizerOptions) *subject {
	t.Helper()
	s := &subject{}
	inner := authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		s.calls.Add(1)
		switch answer(s.answer.Load()) {
		case yes:
			return authorizer.DecisionAllow, "", nil
		case no:
			return authorizer.DecisionDeny, "no", nil
		case outage:
			return authorizer.DecisionDeny, "", errOutage
		}
		return authorizer.DecisionDeny, "", errors.New("other")
	})
	c, err := cache.NewAuthorizer(inner, opts)
	if err != nil {
		t.Fatal(err)
	}
	attrs := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "alice"}, Verb: "get", Path: "/metrics"}
	s.call = func(ctx context.Context) outcome {
		d, _, err := c.Authorize(ctx, attrs)
		return decisionOutcome(d, err)
	}
	return s
}

// TestStaleIfErrorRule checks the one rule for TTLs and stale-if-error
// (cache/stale.go) against both decorators: a success is served stale only
// while the wrapped one cannot check, within StaleIfError past a positive
// TTL; never with caching disabled, never for another error, never to a
// caller that left, never after a rejection.
func TestStaleIfErrorRule(t *testing.T) {
	t.Parallel()
	const ttl, grace = time.Minute, 30 * time.Second
	tests := []struct {
		name      string
		ttl       time.Duration // of successes; negative disables
		stale     time.Duration
		elapsed   time.Duration
		then      answer
		cancelled bool // the caller's context has ended
		want      outcome
		wantCalls int32
	}{
		{"fresh: a hit", ttl, grace, ttl - time.Nanosecond, outage, false, success, 1},
		{"at the TTL without StaleIfError: could not check", ttl, 0, ttl, outage, false, unavailable, 2},
		{"stale during an outage: served", ttl, grace, ttl, outage, false, success, 2},
		{"1ns before the grace ends: served", ttl, grace, ttl + grace - time.Nanosecond, outage, false, success, 2},
		{"at the grace's end: could not check", ttl, grace, ttl + grace, outage, false, unavailable, 2},
		{"stale, then another error: not served", ttl, grace, ttl, other, false, "", 2},
		{"stale, then a rejection: rejected", ttl, grace, ttl, no, false, rejected, 2},
		{"stale, the caller left: could not check", ttl, grace, ttl, outage, true, unavailable, 1},
		{"caching disabled: never stale", -1, grace, 0, outage, false, unavailable, 2},
		{"caching disabled, a second later: never stale", -1, grace, time.Second, outage, false, unavailable, 2},
	}
	for _, tt := range tests {
		for _, kind := range []string{"token", "authorizer"} {
			t.Run(kind+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				clk := clocktesting.NewFakeClock(time.Now())
				var s *subject
				if kind == "token" {
					s = tokenSubject(t, cache.TokenOptions{SuccessTTL: tt.ttl, StaleIfError: tt.stale, Clock: clk})
				} else {
					s = authorizerSubject(t, cache.AuthorizerOptions{AllowedTTL: tt.ttl, StaleIfError: tt.stale, Clock: clk})
				}
				s.set(yes)
				if got := s.call(context.Background()); got != success {
					t.Fatalf("first call = %s; want %s", got, success)
				}
				clk.Step(tt.elapsed)
				s.set(tt.then)
				ctx := context.Background()
				if tt.cancelled {
					c, cancel := context.WithCancel(ctx)
					cancel()
					ctx = c
				}
				want := tt.want
				if want == "" { // another error: each decorator's own meaning
					want = map[string]outcome{"token": rejected, "authorizer": "error not matching ErrUnavailable"}[kind]
				}
				if got := s.call(ctx); got != want {
					t.Errorf("call at +%v = %s; want %s", tt.elapsed, got, want)
				}
				if n := s.calls.Load(); n != tt.wantCalls {
					t.Errorf("calls of the wrapped %s = %d; want %d", kind, n, tt.wantCalls)
				}
				if tt.then == no || tt.then == other {
					// The rejection, or the error that was not
					// "could not check", also removed the stale
					// success.
					s.set(outage)
					clk.Step(cache.DefaultFailureTTL) // == DefaultDeniedTTL; within the grace
					if cache.DefaultFailureTTL != cache.DefaultDeniedTTL || ttl+cache.DefaultFailureTTL >= ttl+grace {
						t.Fatal("the test needs the rejection to expire within the grace")
					}
					if got := s.call(context.Background()); got != unavailable {
						t.Errorf("after the rejection, during an outage = %s; want %s", got, unavailable)
					}
				}
			})
		}
	}
}

// TestTTLSumsSaturate: a success whose TTL plus StaleIfError passes the
// longest Duration is cached (for the longest Duration), in both
// decorators, rather than overflowing into "keep nothing".
func TestTTLSumsSaturate(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Hour + 1, math.MaxInt64 / 2} {
		for _, kind := range []string{"token", "authorizer"} {
			t.Run(fmt.Sprint(kind, ttl), func(t *testing.T) {
				t.Parallel()
				clk := clocktesting.NewFakeClock(time.Now())
				var s *subject
				if kind == "token" {
					s = tokenSubject(t, cache.TokenOptions{SuccessTTL: ttl, StaleIfError: time.Hour, Clock: clk})
				} else {
					s = authorizerSubject(t, cache.AuthorizerOptions{AllowedTTL: ttl, StaleIfError: time.Hour, Clock: clk})
				}
				for range 2 {
					if got := s.call(context.Background()); got != success {
						t.Fatalf("call = %s; want %s", got, success)
					}
					clk.Step(24 * time.Hour)
				}
				if n := s.calls.Load(); n != 1 {
					t.Errorf("calls with TTL %v + StaleIfError 1h = %d; want 1 (cached)", ttl, n)
				}
			})
		}
	}
}

// TestStaleIfErrorSameThroughAuthnAndAuthz runs the same scenarios through
// authn and authz, against a fake API server, and expects the same outcome
// from both: the drift issue #23 found (authn served a stale identity with
// caching disabled; authz did not) cannot come back.
func TestStaleIfErrorSameThroughAuthnAndAuthz(t *testing.T) {
	t.Parallel()
	const ttl, grace = time.Minute, 30 * time.Second
	tests := []struct {
		name    string
		ttl     time.Duration // of successes; negative disables
		elapsed time.Duration
		then    string // "outage", "revoke", "" (the API server answers)
		want    outcome
	}{
		{"fresh during an outage", ttl, ttl - time.Nanosecond, "outage", success},
		{"stale during an outage", ttl, ttl + time.Second, "outage", success},
		{"at the grace's end", ttl, ttl + grace, "outage", unavailable},
		{"stale, the API server answers", ttl, ttl + time.Second, "", success},
		{"stale, revoked", ttl, ttl + time.Second, "revoke", rejected},
		{"caching disabled, during an outage", -1, 0, "outage", unavailable},
		{"caching disabled, a second into an outage", -1, time.Second, "outage", unavailable},
	}
	backup := &user.DefaultInfo{Name: "system:serviceaccount:default:backup", Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	allow := authtest.Rules(authtest.Rule{Users: []string{backup.Name}, Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}})
	deny := authtest.Policy(func(authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
		return false, true, "revoked", ""
	})
	attrs := authorizer.AttributesRecord{User: backup, Verb: "get", Namespace: "default", APIVersion: "v1", Resource: "pods", Name: "p", ResourceRequest: true}
	noRetries := wait.Backoff{Steps: -1}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := map[string]outcome{}
			for _, kind := range []string{"authn", "authz"} {
				clk := clocktesting.NewFakeClock(time.Now())
				srv := authtest.Start(t, authtest.WithClock(clk))
				srv.SetPolicy(allow)
				var call func() outcome
				var endpoint authtest.Endpoint
				var revoke func()
				if kind == "authn" {
					a, err := authn.NewForConfig(srv.Config(), authn.Options{Audiences: []string{"a"}, SuccessTTL: tt.ttl, StaleIfError: grace, Clock: clk, Backoff: noRetries})
					if err != nil {
						t.Fatal(err)
					}
					tok := srv.MintToken(backup, []string{"a"}, time.Time{})
					call = func() outcome {
						_, ok, err := a.AuthenticateToken(context.Background(), tok)
						return tokenOutcome(ok, err)
					}
					endpoint, revoke = authtest.TokenReviews, func() { srv.RevokeToken(tok) }
				} else {
					a, err := authz.NewForConfig(srv.Config(), authz.Options{AllowedTTL: tt.ttl, StaleIfError: grace, Clock: clk, Backoff: noRetries})
					if err != nil {
						t.Fatal(err)
					}
					call = func() outcome { d, _, err := a.Authorize(context.Background(), attrs); return decisionOutcome(d, err) }
					endpoint, revoke = authtest.SubjectAccessReviews, func() { srv.SetPolicy(deny) }
				}
				if o := call(); o != success {
					t.Fatalf("%s: first call = %s; want %s", kind, o, success)
				}
				clk.Step(tt.elapsed)
				switch tt.then {
				case "outage":
					srv.InjectFault(endpoint, authtest.Fault{Status: 503})
				case "revoke":
					revoke()
				}
				got[kind] = call()
			}
			if got["authn"] != got["authz"] || got["authn"] != tt.want {
				t.Errorf("authn: %s, authz: %s; want both %s", got["authn"], got["authz"], tt.want)
			}
		})
	}
}

// ExampleTokenOptions_staleIfError: with caching of identities disabled
// (SuccessTTL < 0, or --authentication-token-webhook-cache-ttl=0),
// StaleIfError serves nothing: an outage is reported as such.
func ExampleTokenOptions_staleIfError() {
	down := false
	inner := authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
		if down {
			return nil, false, &reviewauth.ReviewError{Review: "TokenReview", Code: 503}
		}
		return &authenticator.Response{User: &user.DefaultInfo{Name: "alice"}}, true, nil
	})
	for _, ttl := range []time.Duration{time.Minute, -1} {
		clk := clocktesting.NewFakeClock(time.Now())
		c, _ := cache.NewTokenAuthenticator(inner, cache.TokenOptions{SuccessTTL: ttl, StaleIfError: time.Minute, Clock: clk})
		down = false
		c.AuthenticateToken(context.Background(), "t")
		down = true
		clk.Step(time.Minute + time.Second)
		_, ok, err := c.AuthenticateToken(context.Background(), "t")
		fmt.Println(ttl, ok, errors.Is(err, reviewauth.ErrUnavailable))
	}
	// Output:
	// 1m0s true false
	// -1ns false true
}
