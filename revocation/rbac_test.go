package revocation_test

import (
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/reviewauth/reviewauth/revocation"
)

func userSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

func group(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
}

func sa(ns, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
}

func meta(nsName string) metav1.ObjectMeta {
	o := object("", nsName, "uid-"+nsName)
	return o.ObjectMeta
}

func role(nsName string, verbs ...string) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: meta(nsName), Rules: []rbacv1.PolicyRule{{Verbs: verbs, APIGroups: []string{""}, Resources: []string{"pods"}}}}
}

func clusterRole(name string, verbs ...string) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: meta(name), Rules: []rbacv1.PolicyRule{{Verbs: verbs, APIGroups: []string{""}, Resources: []string{"nodes/metrics"}}}}
}

func roleBinding(nsName, kind, roleName string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: meta(nsName), RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: roleName}, Subjects: subjects}
}

func clusterRoleBinding(name, roleName string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: meta(name), RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName}, Subjects: subjects}
}

// rbacHarness is a started harness watching every RBAC resource of the
// world below, past its first lists (which flush nothing).
func rbacHarness(t *testing.T, opts revocation.Options) *harness {
	t.Helper()
	opts.Watch = []revocation.Resource{revocation.ClusterRoles, revocation.Roles}
	h := newHarness(t, opts)
	h.res["clusterroles"].set(clusterRole("view", "get"), clusterRole("other", "get"))
	h.res["clusterrolebindings"].set(
		clusterRoleBinding("alice-view", "view", userSubject("alice")),
		clusterRoleBinding("devs-other", "other", group("devs")))
	h.res["roles"].set(role("ns1/edit", "get", "update"))
	h.res["rolebindings"].set(
		roleBinding("ns1/bob-edit", "Role", "edit", userSubject("bob"), sa("", "app")),
		roleBinding("ns1/robot-edit", "Role", "edit", sa("ns3", "robot")),
		roleBinding("ns2/carol-view", "ClusterRole", "view", userSubject("carol")))
	h.start()
	for _, r := range []string{"clusterroles", "clusterrolebindings", "roles", "rolebindings"} {
		h.watcher(r)
	}
	return h
}

// TestRBACChangesFlushTheUsersTheyAffect: a change that can take a
// permission away flushes the decisions of the users it can affect: a
// binding deleted, or updated without some subjects, its (removed)
// subjects (service accounts by their user name, a subject's empty
// namespace being the binding's); a role changed or deleted, the subjects
// of every binding naming it; a group subject, everything. What only
// grants (a new binding, a new role, a subject added) and what RBAC does
// not read (labels, a resource version) flush nothing.
func TestRBACChangesFlushTheUsersTheyAffect(t *testing.T) {
	t.Parallel()
	type event struct {
		resource string
		action   string // add, modify, delete
		obj      runtime.Object
	}
	relabelled := clusterRole("view", "get")
	relabelled.Labels = map[string]string{"team": "x"}
	relabelled.ResourceVersion = "2"
	for _, tc := range []struct {
		name  string
		event event
		want  []string // nil: nothing
	}{
		{"rolebinding deleted", event{"rolebindings", "delete", roleBinding("ns1/bob-edit", "Role", "edit", userSubject("bob"), sa("", "app"))},
			[]string{"user bob", "user system:serviceaccount:ns1:app"}},
		{"clusterrolebinding deleted", event{"clusterrolebindings", "delete", clusterRoleBinding("alice-view", "view", userSubject("alice"))},
			[]string{"user alice"}},
		{"group subject removed", event{"clusterrolebindings", "modify", clusterRoleBinding("devs-other", "other", group("ops"))},
			[]string{"all"}},
		{"group subject added", event{"clusterrolebindings", "modify", clusterRoleBinding("devs-other", "other", group("devs"), group("ops"))}, nil},
		{"group binding deleted", event{"clusterrolebindings", "delete", clusterRoleBinding("devs-other", "other", group("devs"))},
			[]string{"all"}},
		{"clusterrole's rules changed", event{"clusterroles", "modify", clusterRole("view", "get", "list")},
			[]string{"user alice", "user carol"}},
		{"clusterrole deleted", event{"clusterroles", "delete", clusterRole("view", "get")},
			[]string{"user alice", "user carol"}},
		{"clusterrole relabelled", event{"clusterroles", "modify", relabelled}, nil},
		{"role's rules changed", event{"roles", "modify", role("ns1/edit", "get")},
			[]string{"user bob", "user system:serviceaccount:ns1:app", "user system:serviceaccount:ns3:robot"}},
		{"role created", event{"roles", "add", role("ns2/edit", "get")}, nil},
		{"binding created", event{"rolebindings", "add", roleBinding("ns2/dave", "Role", "missing", userSubject("dave"))}, nil},
		{"binding's subjects changed", event{"rolebindings", "modify", roleBinding("ns1/bob-edit", "Role", "edit", userSubject("eve"), sa("", "app"))},
			[]string{"user bob"}},
		{"binding's role changed", event{"rolebindings", "modify", roleBinding("ns2/carol-view", "ClusterRole", "other", userSubject("carol"))},
			[]string{"user carol"}},
		{"binding unchanged", event{"rolebindings", "modify", roleBinding("ns2/carol-view", "ClusterRole", "view", userSubject("carol"))}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := rbacHarness(t, revocation.Options{SecondFlush: -1})
			w := h.last[tc.event.resource]
			switch tc.event.action {
			case "add":
				w.Add(tc.event.obj)
			case "modify":
				w.Modify(tc.event.obj)
			case "delete":
				w.Delete(tc.event.obj)
			}
			if tc.want != nil {
				h.expect(tc.want...)
			}
			// A sync point: a later deletion, whose flush must be the next.
			h.last["clusterrolebindings"].Delete(clusterRoleBinding("sync", "view", userSubject("sync")))
			h.expect("user sync")
			users := 0.0
			for _, c := range tc.want {
				if c != "all" {
					users++
				}
			}
			if got := h.metric("reviewauth_revocation_decision_flushes_total", "scope", "user"); got != users+1 {
				t.Errorf("reviewauth_revocation_decision_flushes_total{scope=user} = %v; want %v", got, users+1)
			}
		})
	}
}

// TestManyUsersFlushAll: a deletion that affects more than 64 users flushes
// everything at once, rather than user by user.
func TestManyUsersFlushAll(t *testing.T) {
	t.Parallel()
	h := rbacHarness(t, revocation.Options{SecondFlush: -1})
	var subjects []rbacv1.Subject
	for i := range 65 {
		subjects = append(subjects, userSubject(fmt.Sprint("u", i)))
	}
	h.last["clusterrolebindings"].Delete(clusterRoleBinding("many", "view", subjects...))
	h.expect("all")
	h.last["clusterrolebindings"].Delete(clusterRoleBinding("64", "view", subjects[:64]...))
	want := make([]string, 64)
	for i := range want {
		want[i] = fmt.Sprint("user u", i)
	}
	h.expect(want...)
}

// TestSecondFlush: SecondFlush after a change, its decisions are flushed
// again (not a nanosecond before), so that an answer the API server gave
// before its own RBAC informer saw the change does not live a TTL; due
// second flushes are merged; a negative SecondFlush means none.
func TestSecondFlush(t *testing.T) {
	t.Parallel()
	h := rbacHarness(t, revocation.Options{})
	t1 := epoch.Add(5 * time.Second)
	h.clock.SetTime(t1)
	h.last["rolebindings"].Delete(roleBinding("ns1/bob-edit", "Role", "edit", userSubject("bob"), sa("", "app")))
	h.expect("user bob", "user system:serviceaccount:ns1:app")
	h.waitArmed(t1.Add(revocation.DefaultSecondFlush))
	h.clock.SetTime(t1.Add(revocation.DefaultSecondFlush - time.Nanosecond))
	h.last["clusterrolebindings"].Delete(clusterRoleBinding("alice-view", "view", userSubject("alice")))
	h.expect("user alice") // nothing before it
	h.clock.SetTime(t1.Add(revocation.DefaultSecondFlush))
	h.expect("user bob", "user system:serviceaccount:ns1:app")
	h.clock.SetTime(t1.Add(2*revocation.DefaultSecondFlush - time.Nanosecond)) // alice's
	h.expect("user alice")
	if got := h.metric("reviewauth_revocation_decision_flushes_total", "scope", "user"); got != 6 {
		t.Errorf("reviewauth_revocation_decision_flushes_total{scope=user} = %v; want 6", got)
	}

	none := rbacHarness(t, revocation.Options{SecondFlush: -1})
	none.last["clusterrolebindings"].Delete(clusterRoleBinding("alice-view", "view", userSubject("alice")))
	none.expect("user alice")
	none.waitArmed(epoch.Add(revocation.DefaultStallTimeout)) // no flush to wait for
	none.clock.SetTime(epoch.Add(time.Hour))
	none.last["clusterrolebindings"].Delete(clusterRoleBinding("sync", "view", userSubject("sync")))
	none.expect("user sync")
}

// TestRelistFlushesAll: after a watch error the revoker lists again and,
// since it may have missed changes, flushes every decision; its first
// lists flushed nothing (until then, decisions live their TTL).
func TestRelistFlushesAll(t *testing.T) {
	t.Parallel()
	h := rbacHarness(t, revocation.Options{SecondFlush: -1})
	h.last["clusterrolebindings"].Delete(clusterRoleBinding("sync", "view", userSubject("sync")))
	h.expect("user sync") // nothing before it
	h.last["rolebindings"].Error(expired())
	h.watcher("rolebindings")
	h.expect("all")
	if got := h.metric("reviewauth_revocation_resyncs_total", "resource", "rolebindings", "reason", "relist"); got != 1 {
		t.Errorf("reviewauth_revocation_resyncs_total{rolebindings,relist} = %v; want 1", got)
	}
}
