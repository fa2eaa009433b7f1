package authn_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/metrics"
)

func TestStaleIfError(t *testing.T) {
	t.Parallel()
	const ttl, grace = time.Minute, 30 * time.Second
	tests := []struct {
		name      string
		elapsed   time.Duration
		fault     *authtest.Fault // nil: the API server answers
		revoke    bool
		exp       time.Duration // token lifetime; 0 = none
		wantOK    bool
		wantErr   error
		wantStale float64
	}{
		{"fresh during an outage: a plain hit", ttl - time.Nanosecond, &authtest.Fault{Status: 503}, false, 0, true, nil, 0},
		{"stale during an outage: served", ttl + 10*time.Second, &authtest.Fault{Status: 503}, false, 0, true, nil, 1},
		{"1ns before the grace ends: served", ttl + grace - time.Nanosecond, &authtest.Fault{Status: 503}, false, 0, true, nil, 1},
		{"exactly at the grace's end: unavailable", ttl + grace, &authtest.Fault{Status: 503}, false, 0, false, reviewauth.ErrUnavailable, 0},
		{"stale, API server answers: reviewed again", ttl + 10*time.Second, nil, false, 0, true, nil, 0},
		{"stale, token revoked: rejection wins", ttl + 10*time.Second, nil, true, 0, false, reviewauth.ErrUnauthenticated, 0},
		{"never past exp", ttl + 10*time.Second, &authtest.Fault{Status: 503}, false, ttl + 5*time.Second, false, reviewauth.ErrUnavailable, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
			clk := clocktesting.NewFakeClock(start)
			srv := authtest.Start(t, authtest.WithClock(clk))
			m := metrics.New()
			a := newAuth(t, srv, authn.Options{Audiences: []string{aud}, Clock: clk, SuccessTTL: ttl, StaleIfError: grace, Backoff: noRetries, Metrics: m})
			var exp time.Time
			if tt.exp > 0 {
				exp = start.Add(tt.exp)
			}
			tok := srv.MintToken(backup, []string{aud}, exp)
			if _, ok, err := a.AuthenticateToken(context.Background(), tok); !ok {
				t.Fatalf("first AuthenticateToken() = %v", err)
			}
			clk.SetTime(start.Add(tt.elapsed))
			if tt.fault != nil {
				srv.InjectFault(authtest.TokenReviews, *tt.fault)
			}
			if tt.revoke {
				srv.RevokeToken(tok)
			}
			_, ok, err := a.AuthenticateToken(context.Background(), tok)
			if ok != tt.wantOK || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("AuthenticateToken() at +%v = (%v, %v); want (%v, %v)", tt.elapsed, ok, err, tt.wantOK, tt.wantErr)
			}
			want := "reviewauth_stale_serves_total{cache=\"token\"} "
			got := testutil.CollectAndCount(m, "reviewauth_stale_serves_total")
			if tt.wantStale == 0 && got != 0 {
				t.Errorf("stale serves series = %d; want none", got)
			}
			if tt.wantStale > 0 {
				if err := testutil.CollectAndCompare(m, strings.NewReader("# HELP reviewauth_stale_serves_total Allowed results served past their TTL because the API server was unavailable (stale-if-error), by cache.\n# TYPE reviewauth_stale_serves_total counter\n"+want+"1\n"), "reviewauth_stale_serves_total"); err != nil {
					t.Error(err)
				}
			}
			if tt.revoke {
				// The rejection also removed the stale identity.
				srv.InjectFault(authtest.TokenReviews, authtest.Fault{Status: 503})
				clk.Step(authn.DefaultFailureTTL)
				if _, ok, _ := a.AuthenticateToken(context.Background(), tok); ok {
					t.Errorf("revoked token authenticated from a stale entry after its rejection")
				}
			}
		})
	}
}
