package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// TestRevocationByTTLOrRevoker: revocation within 2 s by TTLs of 2 s costs
// a TokenReview and a SAR per request (callers every 10 s never hit a 2 s
// cache), where a revoker leaves the TokenReviews at reviewauth's and adds
// only the SARs of its flushes: two per caller and flush at most.
func TestRevocationByTTLOrRevoker(t *testing.T) {
	t.Parallel()
	p := smallParams()
	p.ChurnPerHour = 0.5 // replaced pods are revoked
	p.RBACFlushesPerHour = 60
	base := mustRun(t, p, "reviewauth")
	revoker := mustRun(t, p, "reviewauth+revoker")
	ttl := mustRun(t, p, "reviewauth-2s")
	btr, bsar := base.steady()
	rtr, rsar := revoker.steady()
	ttr, tsar := ttl.steady()
	perNode := float64(p.Callers) / p.Interval.Seconds() // requests/s per node
	if math.Abs(ttr-perNode) > 0.05*perNode || math.Abs(tsar-perNode) > 0.05*perNode {
		t.Errorf("reviewauth-2s: %.3g TokenReviews/s, %.3g SARs/s per node; want about %.3g each (one per request)", ttr, tsar, perNode)
	}
	if rtr != btr {
		t.Errorf("reviewauth+revoker: %.3g TokenReviews/s per node; want reviewauth's %.3g (a revoked pod's token is not used again)", rtr, btr)
	}
	flushes := p.RBACFlushesPerHour / 3600 * 2 * float64(p.Callers) // at most a SAR per caller per flush
	if rsar <= bsar || rsar > bsar+flushes {
		t.Errorf("reviewauth+revoker: %.3g SARs/s per node; want more than reviewauth's %.3g, at most %.3g more", rsar, bsar, flushes)
	}
}

// TestWatchModel: the revoker's watches are counted from the workload:
// a pod's events at the churn, the node's updates, every RBAC change, a
// bookmark per watch per interval; and the report prints them.
func TestWatchModel(t *testing.T) {
	t.Parallel()
	w := defaultWatchModel()
	rows := w.rows(0.1)
	if len(rows) != 3 {
		t.Fatalf("rows = %v; want pods, node, clusterroles", rows)
	}
	want := []struct {
		watches, listed int
		events          float64
	}{{1, 30, 30 * 0.1 * 7 / 3600}, {1, 1, 12.0 / 3600}, {2, 500, 60.0 / 3600}}
	for i, r := range rows {
		if r.watches != want[i].watches || r.listed != want[i].listed || math.Abs(r.events-want[i].events) > 1e-12 {
			t.Errorf("row %d = %+v; want %+v", i, r, want[i])
		}
	}
	p := defaultParams()
	var out bytes.Buffer
	writeRevocation(&out, p, nil)
	for _, s := range []string{"| **total** | **4** |", "20000 watches", "2655000 objects listed"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, out.String())
		}
	}
	w.Bookmark = 0
	if w.validate() == nil {
		t.Errorf("validate() with no bookmark interval = nil; want an error")
	}
	w = defaultWatchModel()
	w.Resources = []string{"secrets"}
	if w.validate() == nil {
		t.Errorf("validate() with an unknown resource = nil; want an error")
	}
}
