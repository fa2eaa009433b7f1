package revocation_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/reviewauth/reviewauth/revocation"
)

// TestNewValidates: New refuses options that cannot work, naming the
// problem, and accepts each resource with what it needs.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	for _, tc := range []struct {
		name string
		opts revocation.Options
		want string // "" for no error
	}{
		{"nothing", revocation.Options{}, "nothing to watch"},
		{"unknown", revocation.Options{Watch: []revocation.Resource{"secrets"}}, `unknown resource "secrets"`},
		{"pods without a node", revocation.Options{Watch: []revocation.Resource{revocation.Pods}, Identities: rec}, "node's name"},
		{"node without a node", revocation.Options{Watch: []revocation.Resource{revocation.Node}, Identities: rec}, "node's name"},
		{"bad node name", revocation.Options{Watch: []revocation.Resource{revocation.Pods}, NodeName: "Node A", Identities: rec}, `node name "Node A"`},
		{"pods without a revoker", revocation.Options{Watch: []revocation.Resource{revocation.Pods}, NodeName: "n"}, "needs an IdentityRevoker"},
		{"serviceaccounts without a client", revocation.Options{Watch: []revocation.Resource{revocation.ServiceAccounts}, Identities: rec}, "needs a metadata client"},
		{"roles without a forgetter", revocation.Options{Watch: []revocation.Resource{revocation.Roles}}, "needs a DecisionForgetter"},
		{"clusterroles without a client", revocation.Options{Watch: []revocation.Resource{revocation.ClusterRoles}, Decisions: rec}, "needs an RBAC client"},
		{"namespaces for nothing", revocation.Options{Watch: []revocation.Resource{revocation.ClusterRoles}, Decisions: rec, Namespaces: []string{"a"}}, "neither is watched"},
		{"bad namespace", revocation.Options{Watch: []revocation.Resource{revocation.Roles}, Decisions: rec, Namespaces: []string{"A_b"}}, `namespace "A_b"`},
		{"negative stall timeout", revocation.Options{Watch: []revocation.Resource{revocation.Roles}, Decisions: rec, StallTimeout: -1}, "stall timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := revocation.New(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "revocation: ") {
				t.Errorf("New() = %v; want an error with %q", err, tc.want)
			}
		})
	}
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	for _, w := range revocation.Resources {
		if _, err := revocation.NewForConfig(cfg, revocation.Options{Watch: []revocation.Resource{w}, NodeName: "n", Identities: rec, Decisions: rec}); err != nil {
			t.Errorf("NewForConfig(%s) = %v; want nil", w, err)
		}
	}
	if _, err := revocation.NewForConfig(nil, revocation.Options{}); err == nil {
		t.Errorf("NewForConfig(nil) = nil error; want one")
	}
}

// TestRunOnce: Run runs once; a second call fails at once and the first
// goes on.
func TestRunOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, revocation.Options{Watch: []revocation.Resource{revocation.Pods}, NodeName: "n"})
	h.start()
	h.watcher("pods")
	if err := h.rev.Run(context.Background()); !errors.Is(err, revocation.ErrRunning) {
		t.Errorf("second Run() = %v; want ErrRunning", err)
	}
	h.last["pods"].Delete(pod("a/p", "u"))
	h.expect("revoke u")
}
