package authz

import (
	"errors"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/internal/review"
	"github.com/reviewauth/reviewauth/internal/ttlflag"
)

// Flags is Options plus the local decisions and the client, as set from
// the command line with the flag names of k8s.io/apiserver's delegated
// authorization options. The zero value has every default, and every local
// decision off. AddFlags registers the flags, Validate checks them, and New
// builds the authorizer. A Flags is not safe for concurrent use: flags are
// parsed once, before anything runs.
//
// The cache TTL flags mean what they mean in k8s.io/apiserver:
// --authorization-webhook-cache-authorized-ttl=0 and
// --authorization-webhook-cache-unauthorized-ttl=0 disable caching of that
// decision, so that every request is reviewed. The flags store that as the
// Options' "disabled" value, a negative TTL; the fields keep the Options'
// meaning (0 is the default, negative disables), so the zero Flags is safe.
//
// apiserver's --authorization-always-allow-paths is not here: such paths
// are served to anonymous requests, before authorization, which is the HTTP
// transport's job. httpauth.Flags registers it, for httpauth.Options'
// AlwaysAllowPaths; a gRPC server, which has no paths, does not take it.
type Flags struct {
	// Client is how to reach the API server: --authorization-kubeconfig,
	// --authorization-qps and --authorization-burst.
	Client reviewauth.ClientOptions
	Options

	// AlwaysAllowGroups are groups whose members are allowed everything
	// without a review. Default none: apiserver allows system:masters by
	// default; here it is opt-in.
	AlwaysAllowGroups []string
	// NodeName is the node this agent runs on. With RequireSameNode, only
	// callers whose node-bound token names it are allowed.
	NodeName string
	// RequireSameNode composes [NodeLocal] in front of the
	// SubjectAccessReview: both must allow.
	RequireSameNode bool
}

// AddFlags registers fs flags for f:
//
//	--authorization-kubeconfig                       kubeconfig of the API server (default: in-cluster)
//	--authorization-webhook-cache-authorized-ttl     how long an Allow is cached (default 1m; 0 disables)
//	--authorization-webhook-cache-unauthorized-ttl   how long a Deny is cached (default 10s; 0 disables)
//	--authorization-always-allow-groups              groups allowed everything (default none)
//	--authorization-max-in-flight                    SubjectAccessReviews in flight at most (default 16)
//	--authorization-qps, --authorization-burst       review client limits (default 200, 400)
//	--authorization-cache-ignored-extras             user extras left out of the cache key (default credential-id)
//	--node-name                                      this agent's node
//	--authorization-require-same-node                allow only callers bound to --node-name
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	clientFlags.AddFlags(fs, &f.Client, &f.MaxInFlight)
	fs.Var(ttlflag.New(&f.AllowedTTL, DefaultAllowedTTL), "authorization-webhook-cache-authorized-ttl", "How long an Allow is cached. Also how long a revoked RoleBinding keeps working. 0 disables the cache: every request is reviewed.")
	fs.Var(ttlflag.New(&f.DeniedTTL, DefaultDeniedTTL), "authorization-webhook-cache-unauthorized-ttl", "How long a Deny is cached. Also how long a new RoleBinding takes to work. 0 disables the cache: every denied request is reviewed again.")
	fs.StringSliceVar(&f.AlwaysAllowGroups, "authorization-always-allow-groups", f.AlwaysAllowGroups, "Groups allowed everything without a SubjectAccessReview, e.g. system:masters. Default none.")
	ignored := f.CacheKeyIgnoredExtras
	if ignored == nil {
		ignored = []string{CredentialIDExtra}
	}
	fs.StringSliceVar(&f.CacheKeyIgnoredExtras, "authorization-cache-ignored-extras", ignored, "User extra keys left out of the SubjectAccessReview cache key (the review still carries them), so that a client minting a token per call shares one cached decision. Set it empty if an authorizer in the cluster decides on one of them.")
	fs.StringVar(&f.NodeName, "node-name", f.NodeName, "The node this agent runs on.")
	fs.BoolVar(&f.RequireSameNode, "authorization-require-same-node", f.RequireSameNode, "Allow only callers whose node-bound service-account token names --node-name, in addition to the SubjectAccessReview.")
}

// Validate reports every problem with f, naming the flag.
func (f *Flags) Validate() error {
	var errs []error
	for _, g := range f.AlwaysAllowGroups {
		if strings.TrimSpace(g) == "" {
			errs = append(errs, errors.New("--authorization-always-allow-groups: empty group"))
		}
	}
	errs = append(errs, clientFlags.Validate(f.Client, f.MaxInFlight)...)
	if f.RequireSameNode && f.NodeName == "" {
		errs = append(errs, errors.New("--node-name: required by --authorization-require-same-node"))
	}
	return errors.Join(errs...)
}

// clientFlags are the client flags authz shares with authn.
var clientFlags = review.ClientFlags{Pkg: "authz", Prefix: "authorization", Kind: "SubjectAccessReview", Resource: "subjectaccessreviews.authorization.k8s.io"}

// RESTConfig loads the client configuration f.Client describes: the
// kubeconfig file, or the in-cluster configuration, with f's QPS and burst.
// Use it for [SelfCheck].
func (f *Flags) RESTConfig() (*rest.Config, error) { return clientFlags.RESTConfig(f.Client) }

// New validates f and builds the authorizer it describes: [Flags.Chain] in
// front of the SubjectAccessReview [Authorizer] of [Flags.NewAuthorizer].
func (f *Flags) New() (authorizer.Authorizer, error) {
	sar, err := f.NewAuthorizer()
	if err != nil {
		return nil, err
	}
	return f.Chain(sar)
}

// NewAuthorizer validates f and builds the SubjectAccessReview [Authorizer]
// alone, with [NewForConfig], for callers that compose a chain of their
// own (or that want both: pass it to [Flags.Chain]).
func (f *Flags) NewAuthorizer() (*Authorizer, error) {
	cfg, err := clientFlags.Load(f.Client, f.Validate)
	if err != nil {
		return nil, err
	}
	return NewForConfig(cfg, f.Options)
}

// Chain validates f and puts the local decisions f describes in front of
// az:
//
//	First(AlwaysAllowGroups, All(NodeLocal, az))
//
// where the local parts are present only when configured; with none it
// returns az itself (as an [authorizer.Authorizer] when it is one). A nil
// az is an error.
func (f *Flags) Chain(az authorizer.UnconditionalAuthorizer) (authorizer.Authorizer, error) {
	if az == nil {
		return nil, errors.New("authz: Flags.Chain with a nil authorizer")
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	last := az
	if f.RequireSameNode {
		last = All(NodeLocal(NodeLocalOptions{NodeName: f.NodeName}), az)
	}
	if len(f.AlwaysAllowGroups) > 0 {
		return First(AlwaysAllowGroups(f.AlwaysAllowGroups...), last), nil
	}
	if full, ok := last.(authorizer.Authorizer); ok {
		return full, nil
	}
	return All(last), nil
}
