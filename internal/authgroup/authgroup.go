// Package authgroup gives every authenticated user the group
// system:authenticated, exactly as k8s.io/apiserver's AuthenticatedGroupAdder
// (pkg/authentication/group) does around the API server's, the kubelet's and
// kube-rbac-proxy's union of authenticators. It is the one implementation
// behind httpauth (client certificates, bearer tokens, custom request
// authenticators) and grpcauth, which use it without importing each other.
// TestAddMatchesAPIServer compares it with apiserver's adder.
package authgroup

import "k8s.io/apiserver/pkg/authentication/user"

// Add returns u with system:authenticated appended to its groups, as a new
// *user.DefaultInfo with u's name, UID and extra (apiserver's adder builds
// the same), unless u needs no group: its name is system:anonymous, or it
// already has system:authenticated or system:unauthenticated. Then it
// returns u itself, without allocating. u must not be nil.
func Add(u user.Info) user.Info {
	if u.GetName() == user.Anonymous {
		return u
	}
	groups := u.GetGroups()
	for _, g := range groups {
		if g == user.AllAuthenticated || g == user.AllUnauthenticated {
			return u
		}
	}
	withGroup := make([]string, 0, len(groups)+1)
	withGroup = append(withGroup, groups...)
	return &user.DefaultInfo{
		Name:   u.GetName(),
		UID:    u.GetUID(),
		Groups: append(withGroup, user.AllAuthenticated),
		Extra:  u.GetExtra(),
	}
}
