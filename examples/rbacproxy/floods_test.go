package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/reviewauth/reviewauth/examples/internal/clitest"
	"github.com/reviewauth/reviewauth/internal/reliability"
	"github.com/reviewauth/reviewauth/serving"
)

// Bounds of the process-level flood test.
const (
	// floodExtraFiles bounds the files the process holds beyond its
	// budget of client connections while attacked, counted from its files
	// before (listeners, API server and upstream connections, log files):
	// connections waiting to be admitted (as many as the budget), one
	// being swapped in, and, as the fake API server speaks HTTP/1.1 (a
	// real one speaks HTTP/2, one connection), a connection per review in
	// flight (16 TokenReviews, 16 SubjectAccessReviews) and the JWKS
	// fetch, and one more upstream connection.
	floodExtraFiles = reliability.Budget + 1 + 2*16 + 1 + 1
	// floodRun is how long each attack is measured here (the library's
	// goal tests measure longer).
	floodRun = 3 * time.Second
)

// TestFloods (issue #22): rbacproxy as a process, with --max-connections=64
// and every other serving default (JWKS pre-verification on), attacked by
// 112 connections of each kind from the scraper's own address, reopening
// at once: idle TLS connections, slowloris, unauthenticated body-less
// POSTs, and JWT-shaped junk tokens. A scraper on a new connection every
// 100ms is served within 1s at least 95% of the time, one on a connection
// opened before every time; the process never holds more files than
// before plus the budget (and floodExtraFiles); each unverifiable junk
// token costs at most one TokenReview and a forged one none, while a
// scraper with a fresh token for every scrape keeps its p95 within 1s;
// and SIGTERM in the middle of an attack ends the process within its
// shutdown grace.
func TestFloods(t *testing.T) {
	// Timings on a 2-core machine: never beside another flood test.
	reliability.Exclusive(t)
	e := newEnv(t)
	proc := clitest.Start(t, e.args(fmt.Sprintf("--max-connections=%d", reliability.Budget))...)
	url := proc.Addr + "/metrics"
	addr := strings.TrimPrefix(proc.Addr, "https://")
	keepAlive := reliability.KeepAliveClient()
	defer keepAlive.CloseIdleConnections()
	scrape := func(client *http.Client, token func() string) func(ctx context.Context) error {
		return func(ctx context.Context) error { return reliability.HTTPGet(client, url, "Bearer "+token(), 200)(ctx) }
	}
	sameToken := func() string { return e.scraper }
	if err := scrape(keepAlive, sameToken)(t.Context()); err != nil {
		t.Fatalf("scrape before the attacks: %v", err)
	}
	baseFiles, err := reliability.OpenFiles(proc.Pid())
	if err != nil {
		t.Skipf("cannot count the process's files: %v", err)
	}
	files := func() int64 { n, _ := reliability.OpenFiles(proc.Pid()); return int64(n) }
	// check logs an attack's figures, reports the files over the bound and
	// returns the timing goals missed.
	check := func(name string, newTries, existingTries *reliability.Tries, peakFiles int64) []string {
		t.Helper()
		n, x := newTries.Summary(reliability.Bound), existingTries.Summary(reliability.Bound)
		t.Logf("%s: new connection: %v", name, n)
		t.Logf("%s: existing connection: %v", name, x)
		t.Logf("%s: peak open files %d (before: %d, budget %d)", name, peakFiles, baseFiles, reliability.Budget)
		if limit := int64(baseFiles + reliability.Budget + floodExtraFiles); peakFiles > limit {
			t.Errorf("%s: %d open files; want at most %d (before, plus the budget, plus %d)", name, peakFiles, limit, floodExtraFiles)
		}
		return append(n.Missed("new-connection", reliability.NewGoal), x.Missed("existing-connection", reliability.ExistingGoal)...)
	}
	for _, a := range []reliability.Attack{reliability.HTTPIdle, reliability.HTTPSlowloris, reliability.HTTPBodylessPost} {
		reliability.Goal(t, string(a), func() []string {
			sampler := reliability.Sample(files)
			var res reliability.AttackResult
			newTries, existingTries := reliability.Measure(t.Context(), floodRun,
				reliability.AttackFunc(t, reliability.AttackSpec{Addr: addr, Kind: a, N: reliability.Attackers, Path: "/metrics"}, &res),
				scrape(reliability.NewConnectionClient(), sameToken), scrape(keepAlive, sameToken))
			return check(string(a), newTries, existingTries, sampler.Stop())
		})
	}

	// Junk tokens; the scraper mints a token for every scrape, as a
	// client of the upstream CSI sidecar does: each costs a review.
	scraper := &user.DefaultInfo{Name: scraperName, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	fresh := func() string { return e.api.MintToken(scraper, []string{audience}, time.Now().Add(time.Hour)) }
	reliability.Goal(t, "junk tokens", func() []string {
		sampler := reliability.Sample(files)
		var res reliability.AttackResult
		newTries, existingTries := reliability.Measure(t.Context(), floodRun,
			reliability.AttackFunc(t, reliability.AttackSpec{URL: url, Kind: reliability.JunkHTTPAttack, N: reliability.Attackers, Genuine: e.scraper}, &res),
			scrape(reliability.NewConnectionClient(), fresh), scrape(keepAlive, fresh))
		missed := check("junk tokens", newTries, existingTries, sampler.Stop())
		unverifiable, forged, maxPer := reliability.JunkReviews(e.api.TokenReviews(), reliability.KeyID(e.scraper))
		p95 := newTries.Summary(reliability.Bound).P95
		t.Logf("junk tokens: %d sent; TokenReviews of unverifiable ones %d (at most %d per token), of forged ones %d; new-connection p95 %v",
			res.Sent, unverifiable, maxPer, forged, p95)
		if forged != 0 || maxPer > 1 {
			t.Errorf("TokenReviews of forged junk = %d (want 0); most reviews of one unverifiable junk token = %d (want at most 1)", forged, maxPer)
		}
		if p95 > reliability.Bound {
			missed = append(missed, fmt.Sprintf("new-connection p95 = %v; want at most %v", p95, reliability.Bound))
		}
		return missed
	})

	// SIGTERM mid-attack.
	attack := reliability.StartAttack(t, reliability.AttackSpec{Addr: addr, Kind: reliability.HTTPSlowloris, N: reliability.Attackers, Path: "/metrics"})
	time.Sleep(reliability.Ramp) // the attack under way: a wait for load, not for a timer
	took := proc.Terminate(t)
	attack.Stop(t)
	t.Logf("SIGTERM mid-attack: exited after %v", took.Round(time.Millisecond))
	if took > serving.DefaultShutdownTimeout+2*time.Second {
		t.Errorf("exit %v after SIGTERM mid-attack; want within the shutdown grace (%v)", took, serving.DefaultShutdownTimeout)
	}
}
