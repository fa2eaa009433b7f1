package authgroup_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/reviewauth/reviewauth/internal/authgroup"
)

// apiserver is k8s.io/apiserver's AuthenticatedGroupAdder around an
// authenticator that returns u: the oracle.
func apiserver(u user.Info) user.Info {
	adder := group.NewAuthenticatedGroupAdder(authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
		return &authenticator.Response{User: u}, true, nil
	}))
	resp, ok, err := adder.AuthenticateRequest(httptest.NewRequest("GET", "/", nil))
	if !ok || err != nil {
		panic("the adder refused a user")
	}
	return resp.User
}

var users = []*user.DefaultInfo{
	{Name: "alice"},
	{Name: "alice", UID: "u-1", Groups: []string{"team-a"}, Extra: map[string][]string{"scopes": {"a", "b"}}},
	{Name: "bob", Groups: []string{"team-b", user.AllAuthenticated}},
	{Name: "bob", Groups: []string{user.AllAuthenticated, "team-b"}},
	{Name: "carol", Groups: []string{user.AllUnauthenticated}},
	{Name: user.Anonymous},
	{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}},
	{Name: user.Anonymous, Groups: []string{"team-a"}},
	{Name: ""},
	{Name: "system:node:node-1", Groups: []string{user.NodesGroup}},
	{Name: "dave", Groups: []string{"System:Authenticated", "system:authenticated "}},
}

// TestAddMatchesAPIServer: Add gives every user what apiserver's
// AuthenticatedGroupAdder gives it, name, UID, groups (in order) and extra;
// and returns the user itself, without allocating, when it adds nothing
// (not parallel: it counts allocations).
func TestAddMatchesAPIServer(t *testing.T) {
	for _, u := range users {
		want, got := apiserver(u), authgroup.Add(u)
		if diff := cmp.Diff(toDefault(want), toDefault(got)); diff != "" {
			t.Errorf("Add(%+v) (-apiserver +ours):\n%s", u, diff)
		}
		if (want == user.Info(u)) != (got == user.Info(u)) {
			t.Errorf("Add(%+v) returned the user itself: %v; apiserver's adder: %v", u, got == user.Info(u), want == user.Info(u))
		}
	}
	present := users[2]
	if n := testing.AllocsPerRun(100, func() { authgroup.Add(present) }); n != 0 {
		t.Errorf("Add(a user with the group) allocates %v times; want 0", n)
	}
}

func toDefault(u user.Info) user.DefaultInfo {
	return user.DefaultInfo{Name: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: u.GetExtra()}
}

// FuzzAdd compares Add with apiserver's adder for any name and groups.
func FuzzAdd(f *testing.F) {
	f.Add("alice", "team-a", user.AllAuthenticated)
	f.Add(user.Anonymous, "", "")
	f.Add("bob", user.AllUnauthenticated, "x")
	f.Fuzz(func(t *testing.T, name, g1, g2 string) {
		for _, groups := range [][]string{nil, {g1}, {g1, g2}} {
			u := &user.DefaultInfo{Name: name, UID: g2, Groups: groups}
			if diff := cmp.Diff(toDefault(apiserver(u)), toDefault(authgroup.Add(u))); diff != "" {
				t.Fatalf("Add(%+v) (-apiserver +ours):\n%s", u, diff)
			}
		}
	})
}
