package revocation_test

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reviewauth/reviewauth/revocation"
)

// TestDeletedObjectsRevokeTheirTokens: a delete event of a pod on this
// node, the node, or a ServiceAccount revokes the identities bound to its
// UID, and only that; an update of a live object revokes nothing; the
// watches ask for this node's pods and this node only, as the kubelet
// does, from the list's resource version.
func TestDeletedObjectsRevokeTheirTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		watch    revocation.Resource
		resource string
		kind     string
		names    []string
		fields   string
	}{
		{revocation.Pods, "pods", "Pod", []string{"a/p1", "b/p2"}, "spec.nodeName=node-a"},
		{revocation.Node, "nodes", "Node", []string{"node-a"}, "metadata.name=node-a"},
		{revocation.ServiceAccounts, "serviceaccounts", "ServiceAccount", []string{"a/sa1", "a/sa2"}, ""},
	} {
		t.Run(tc.resource, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, revocation.Options{Watch: []revocation.Resource{tc.watch}, NodeName: "node-a"})
			res := h.res[tc.resource]
			var objs []*metav1.PartialObjectMetadata
			for i, n := range tc.names {
				o := object(tc.kind, n, fmt.Sprintf("uid-%d", i+1))
				objs = append(objs, o)
				res.list = append(res.list, o)
			}
			res.rv = 10
			h.start()
			w := h.watcher(tc.resource)
			if !h.rev.Synced() {
				t.Errorf("Synced() = false after the first list; want true")
			}
			if got := h.metric("reviewauth_revocation_synced"); got != 1 {
				t.Errorf("reviewauth_revocation_synced = %v; want 1", got)
			}
			w.Modify(objs[0])
			w.Delete(objs[len(objs)-1])
			h.expect(fmt.Sprintf("revoke uid-%d", len(objs)))
			h.expectNone()
			if got := h.metric("reviewauth_revocations_total", "resource", tc.resource); got != 1 {
				t.Errorf("reviewauth_revocations_total{resource=%q} = %v; want 1", tc.resource, got)
			}
			want := []string{"list " + tc.fields, "watch " + tc.fields + " rv=10"}
			if got := res.log(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Errorf("requests = %q; want %q", got, want)
			}
		})
	}
}

// TestRelistRevokesWhatDisappeared: after a watch error (the API server
// restarted, the resource version expired), the revoker lists again and
// revokes every object the new list no longer holds, or holds under
// another UID (deleted and created again while no event could arrive);
// it counts the relist.
func TestRelistRevokesWhatDisappeared(t *testing.T) {
	t.Parallel()
	h := newHarness(t, revocation.Options{Watch: []revocation.Resource{revocation.Pods}, NodeName: "node-a"})
	pods := h.res["pods"]
	pods.set(pod("a/kept", "u-kept"), pod("a/gone", "u-gone"), pod("a/again", "u-again-1"))
	h.start()
	w := h.watcher("pods")
	pods.set(pod("a/kept", "u-kept"), pod("a/again", "u-again-2"), pod("a/new", "u-new"))
	w.Error(expired())
	h.watcher("pods")
	h.expect("revoke u-gone", "revoke u-again-1")
	if !h.rev.Synced() {
		t.Errorf("Synced() = false after the relist; want true")
	}
	if got := h.metric("reviewauth_revocation_resyncs_total", "resource", "pods", "reason", "relist"); got != 1 {
		t.Errorf("reviewauth_revocation_resyncs_total{pods,relist} = %v; want 1", got)
	}
	if got := h.metric("reviewauth_revocations_total", "resource", "pods"); got != 2 {
		t.Errorf("reviewauth_revocations_total{pods} = %v; want 2", got)
	}
}

// TestSameNameAnotherUID: an update that carries another UID under the
// same name is another object; the one it replaced was deleted.
func TestSameNameAnotherUID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, revocation.Options{Watch: []revocation.Resource{revocation.ServiceAccounts}})
	h.res["serviceaccounts"].set(object("ServiceAccount", "a/app", "u-old"))
	h.start()
	w := h.watcher("serviceaccounts")
	w.Add(object("ServiceAccount", "a/app", "u-new"))
	h.expect("revoke u-old")
	w.Delete(object("ServiceAccount", "a/app", "u-new"))
	h.expect("revoke u-new")
}

// TestDeletionLeeway: an object being deleted keeps its tokens until
// DeletionLeeway past its deletionTimestamp, when the API server refuses
// them too; then they are revoked, not a nanosecond before. One that is
// gone before is revoked at once, and not again.
func TestDeletionLeeway(t *testing.T) {
	t.Parallel()
	h := newHarness(t, revocation.Options{Watch: []revocation.Resource{revocation.Pods}, NodeName: "node-a"})
	h.res["pods"].set(pod("a/slow", "u-slow"), pod("a/quick", "u-quick"))
	h.start()
	w := h.watcher("pods")
	dt := epoch.Add(10 * time.Second) // a 10 s grace period
	at := dt.Add(revocation.DeletionLeeway)
	w.Modify(deleting(pod("a/slow", "u-slow"), dt))
	w.Modify(deleting(pod("a/quick", "u-quick"), dt))
	w.Delete(deleting(pod("a/quick", "u-quick"), dt))
	h.expect("revoke u-quick")
	h.waitArmed(at) // before the stall timeout, at epoch + 90 s
	h.clock.SetTime(at.Add(-time.Nanosecond))
	w.Delete(pod("b/sync", "u-sync")) // a sync point: nothing came before it
	h.expect("revoke u-sync")
	h.clock.SetTime(at)
	h.expect("revoke u-slow")
	w.Delete(pod("b/sync2", "u-sync2"))
	h.expect("revoke u-sync2") // u-slow was revoked once, u-quick not again
}
