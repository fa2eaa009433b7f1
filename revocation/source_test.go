package revocation_test

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/reviewauth/reviewauth/revocation"
)

// TestOutOfSyncUntilListed: before its first list, and while lists fail
// (the API server down or refusing the revoker's RBAC), the revoker says
// it is out of sync, in Synced and in reviewauth_revocation_synced; once
// a list succeeds it is in sync.
func TestOutOfSyncUntilListed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, revocation.Options{Watch: []revocation.Resource{revocation.Pods, revocation.Node}, NodeName: "node-a"})
	if h.rev.Synced() {
		t.Errorf("Synced() before Run = true; want false")
	}
	h.res["pods"].failLists(errors.New("connection refused"))
	h.start()
	h.watcher("nodes")
	h.waitFor("a pod list fails", func() bool { return len(h.res["pods"].log()) > 0 })
	if h.rev.Synced() {
		t.Errorf("Synced() with pods never listed = true; want false")
	}
	if got := h.metric("reviewauth_revocation_synced"); got != 0 {
		t.Errorf("reviewauth_revocation_synced = %v; want 0", got)
	}
	h.res["pods"].failLists(nil)
	h.watcher("pods")
	if !h.rev.Synced() {
		t.Errorf("Synced() after both lists = false; want true")
	}
	if got := h.metric("reviewauth_revocation_synced"); got != 1 {
		t.Errorf("reviewauth_revocation_synced = %v; want 1", got)
	}
	h.stop()
	if h.rev.Synced() {
		t.Errorf("Synced() after Run returned = true; want false")
	}
	if got := h.metric("reviewauth_revocation_synced"); got != 0 {
		t.Errorf("reviewauth_revocation_synced after Run = %v; want 0", got)
	}
}

// TestWatchErrorUntilRelisted: a watch that ends in an error takes the
// revoker out of sync while it cannot list again, then back in sync with
// what it missed revoked: an API server restart as the revoker sees it.
func TestWatchErrorUntilRelisted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, revocation.Options{Watch: []revocation.Resource{revocation.Pods}, NodeName: "node-a"})
	pods := h.res["pods"]
	pods.set(pod("a/p", "u-p"))
	h.start()
	w := h.watcher("pods")
	pods.failLists(errors.New("connection refused"))
	w.Error(expired())
	h.waitFor("a relist fails", func() bool { return !h.rev.Synced() })
	if got := h.metric("reviewauth_revocation_synced"); got != 0 {
		t.Errorf("reviewauth_revocation_synced while lists fail = %v; want 0", got)
	}
	pods.set()
	pods.failLists(nil)
	h.watcher("pods")
	h.expect("revoke u-p")
	if !h.rev.Synced() {
		t.Errorf("Synced() after the relist = false; want true")
	}
}

// TestStalledWatch: a watch that delivers nothing, not even the API
// server's once-a-minute bookmark, for the stall timeout takes the revoker
// out of sync (not a nanosecond before) and is replaced by a new watch from
// the same resource version; the revoker is back in sync once the new
// watch shows it caught up (a bookmark). Every event or bookmark moves the
// deadline.
func TestStalledWatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, revocation.Options{Watch: []revocation.Resource{revocation.Pods}, NodeName: "node-a", StallTimeout: time.Minute + time.Second})
	h.res["pods"].set(pod("a/p", "u-p"))
	h.res["pods"].rv = 7
	h.start()
	w := h.watcher("pods")
	stall := time.Minute + time.Second
	h.waitArmed(epoch.Add(stall))
	h.clock.SetTime(epoch.Add(30 * time.Second))
	w.Action(watch.Bookmark, bookmark())
	h.waitArmed(epoch.Add(30*time.Second + stall)) // the bookmark moved the deadline
	h.clock.SetTime(epoch.Add(stall))
	if !h.rev.Synced() {
		t.Fatalf("Synced() at the first deadline, after a bookmark = false; want true")
	}
	h.clock.SetTime(epoch.Add(30*time.Second + stall - time.Nanosecond))
	if !h.rev.Synced() {
		t.Fatalf("Synced() a nanosecond before the stall timeout = false; want true")
	}
	h.clock.SetTime(epoch.Add(30*time.Second + stall))
	if h.rev.Synced() {
		t.Errorf("Synced() at the stall timeout = true; want false")
	}
	w2 := h.watcher("pods")
	if got := h.metric("reviewauth_revocation_resyncs_total", "resource", "pods", "reason", "stalled"); got != 1 {
		t.Errorf("reviewauth_revocation_resyncs_total{pods,stalled} = %v; want 1", got)
	}
	if got := h.metric("reviewauth_revocation_synced"); got != 0 {
		t.Errorf("reviewauth_revocation_synced after a stall = %v; want 0", got)
	}
	if got, want := h.res["pods"].log(), []string{"list spec.nodeName=node-a", "watch spec.nodeName=node-a rv=7", "watch spec.nodeName=node-a rv=99"}; len(got) != 3 || got[2] != want[2] {
		t.Errorf("requests = %q; want %q", got, want)
	}
	w2.Delete(pod("a/p", "u-p")) // events flow again: acted on, but not proof of being caught up
	h.expect("revoke u-p")
	if h.rev.Synced() {
		t.Errorf("Synced() after an event of the new watch = true; want false until a bookmark")
	}
	w2.Action(watch.Bookmark, bookmark())
	h.waitFor("in sync after the new watch's bookmark", h.rev.Synced)
}
