package serving

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/metrics"
	"github.com/reviewauth/reviewauth/revocation"
)

// RevocationFlags configure the revoker (package revocation) that
// [Flags.Build] builds beside the caches, when Watch names something. The
// zero value watches nothing: cached identities and decisions live their
// TTLs. [Flags.AddRevocationFlags] registers them.
type RevocationFlags struct {
	// Watch is --revocation-watch: what to watch (revocation.Resource
	// names: pods, node, serviceaccounts, clusterroles, roles).
	Watch []string
	// Namespaces is --revocation-namespaces: serviceaccounts and roles
	// only in these namespaces.
	Namespaces []string
	// AsNode is --revocation-as-node: read this node's pods and Node as
	// the node.
	AsNode bool
}

// AddRevocationFlags registers --revocation-watch, --revocation-namespaces
// and --revocation-as-node on fs, with the values f.Revocation holds as
// their defaults.
func (f *Flags) AddRevocationFlags(fs *pflag.FlagSet) {
	r := &f.Revocation
	fs.StringSliceVar(&r.Watch, "revocation-watch", r.Watch,
		"What to watch so that a revoked token or permission stops working within seconds, not at the end of the cache TTLs: "+
			"pods (this node's, --node-name: a deleted pod's tokens), node (this node: its tokens), serviceaccounts (a deleted ServiceAccount's tokens), "+
			"clusterroles (ClusterRoles and ClusterRoleBindings: the decisions of the users a change affects), roles (Roles and RoleBindings: the same). "+
			"Each is a list and a watch on the API server, and needs list and watch of it (see the deploy manifests); while the watches are not in sync "+
			"(reviewauth_revocation_synced 0) the TTLs apply. Empty: nothing is watched.")
	fs.StringSliceVar(&r.Namespaces, "revocation-namespaces", r.Namespaces,
		"Watch serviceaccounts and roles (--revocation-watch) only in these namespaces (one watch each); empty: in every namespace (one watch each). "+
			"Tokens of other namespaces' ServiceAccounts and permissions granted by RoleBindings elsewhere then live their TTLs.")
	fs.BoolVar(&r.AsNode, "revocation-as-node", r.AsNode,
		"Read this node's pods and Node (--revocation-watch=pods,node) as the node, system:node:NODE, by constrained impersonation (associated-node: "+
			"needs this service's pod-bound token and the impersonate:associated-node and impersonate-on:associated-node:list/watch RBAC of the deploy manifests), "+
			"so that the API server's Node authorizer confines the reads to this node's objects, as the kubelet's; otherwise they need list and watch of pods and nodes in the whole cluster.")
}

// validate checks the revocation flags against the others.
func (r *RevocationFlags) validate(node string) error {
	var errs []error
	for _, w := range r.Watch {
		switch revocation.Resource(w) {
		case revocation.Pods, revocation.Node:
			if node == "" {
				errs = append(errs, fmt.Errorf("--revocation-watch=%s needs --node-name", w))
			}
		case revocation.ServiceAccounts, revocation.ClusterRoles, revocation.Roles:
		default:
			errs = append(errs, fmt.Errorf("--revocation-watch: unknown %q (known: pods, node, serviceaccounts, clusterroles, roles)", w))
		}
	}
	if len(r.Namespaces) > 0 && !r.watches(revocation.ServiceAccounts) && !r.watches(revocation.Roles) {
		errs = append(errs, errors.New("--revocation-namespaces needs --revocation-watch with serviceaccounts or roles"))
	}
	if r.AsNode && !r.watches(revocation.Pods) && !r.watches(revocation.Node) {
		errs = append(errs, errors.New("--revocation-as-node needs --revocation-watch with pods or node"))
	}
	return errors.Join(errs...)
}

func (r *RevocationFlags) watches(w revocation.Resource) bool {
	for _, s := range r.Watch {
		if revocation.Resource(s) == w {
			return true
		}
	}
	return false
}

// buildRevoker returns the revoker the revocation flags describe, or nil
// when they watch nothing. It reads with the authentication kubeconfig,
// the service's own credentials.
func (f *Flags) buildRevoker(an *authn.Authenticator, sar *authz.Authorizer, m *metrics.Metrics) (*revocation.Revoker, error) {
	r, node := &f.Revocation, f.Authz.NodeName
	if len(r.Watch) == 0 {
		return nil, nil
	}
	cfg, err := f.Authn.RESTConfig()
	if err != nil {
		return nil, fmt.Errorf("--authentication-kubeconfig: %w", err)
	}
	opts := revocation.Options{
		NodeName:   node,
		Namespaces: r.Namespaces,
		Identities: an,
		Decisions:  sar,
		Metrics:    m,
	}
	for _, w := range r.Watch {
		opts.Watch = append(opts.Watch, revocation.Resource(w))
	}
	if r.AsNode {
		nc := rest.CopyConfig(cfg)
		nc.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + node}
		nc.UserAgent = strings.TrimSpace(rest.DefaultKubernetesUserAgent() + " reviewauth-revocation")
		c, err := metadata.NewForConfig(nc)
		if err != nil {
			return nil, fmt.Errorf("--revocation-as-node: %w", err)
		}
		opts.NodeMetadata = c
	}
	rev, err := revocation.NewForConfig(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("--revocation-watch: %w", err)
	}
	return rev, nil
}
