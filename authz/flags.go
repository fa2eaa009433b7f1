package authz

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/internal/review"
	"github.com/reviewauth/reviewauth/internal/ttlflag"
)

// ClientOptions says how to reach the API server that answers
// SubjectAccessReviews: a kubeconfig path (empty means in-cluster) and the
// client's QPS and burst (zero means [DefaultQPS] and [DefaultBurst]).
type ClientOptions = review.ClientOptions

// Flags is Options plus the local decisions and the client, as set from
// the command line with the flag names of k8s.io/apiserver's delegated
// authorization options. The zero value has every default, and every local
// decision off. AddFlags registers the flags, Validate checks them, and New
// builds the authorizer.
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
	Options
	Client ClientOptions

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
	fs.StringVar(&f.Client.Kubeconfig, "authorization-kubeconfig", f.Client.Kubeconfig,
		"kubeconfig file pointing at the 'core' kubernetes server with enough rights to create subjectaccessreviews.authorization.k8s.io. Empty means the in-cluster configuration.")
	fs.Var(ttlflag.New(&f.AllowedTTL, DefaultAllowedTTL), "authorization-webhook-cache-authorized-ttl",
		"How long an Allow is cached. Also how long a revoked RoleBinding keeps working. 0 disables the cache: every request is reviewed.")
	fs.Var(ttlflag.New(&f.DeniedTTL, DefaultDeniedTTL), "authorization-webhook-cache-unauthorized-ttl",
		"How long a Deny is cached. Also how long a new RoleBinding takes to work. 0 disables the cache: every denied request is reviewed again.")
	fs.StringSliceVar(&f.AlwaysAllowGroups, "authorization-always-allow-groups", f.AlwaysAllowGroups,
		"Groups allowed everything without a SubjectAccessReview, e.g. system:masters. Default none.")
	fs.IntVar(&f.MaxInFlight, "authorization-max-in-flight", or(f.MaxInFlight, DefaultMaxInFlight),
		"How many SubjectAccessReviews may be in flight at once; more callers wait.")
	fs.Float32Var(&f.Client.QPS, "authorization-qps", or(f.Client.QPS, float32(DefaultQPS)), "QPS limit of the SubjectAccessReview client.")
	fs.IntVar(&f.Client.Burst, "authorization-burst", or(f.Client.Burst, DefaultBurst), "Burst limit of the SubjectAccessReview client.")
	ignored := f.CacheKeyIgnoredExtras
	if ignored == nil {
		ignored = []string{CredentialIDExtra}
	}
	fs.StringSliceVar(&f.CacheKeyIgnoredExtras, "authorization-cache-ignored-extras", ignored,
		"User extra keys left out of the SubjectAccessReview cache key (the review still carries them), so that a client minting a token per call shares one cached decision. Set it empty if an authorizer in the cluster decides on one of them.")
	fs.StringVar(&f.NodeName, "node-name", f.NodeName, "The node this agent runs on.")
	fs.BoolVar(&f.RequireSameNode, "authorization-require-same-node", f.RequireSameNode,
		"Allow only callers whose node-bound service-account token names --node-name, in addition to the SubjectAccessReview.")
}

// Validate reports every problem with f, naming the flag.
func (f *Flags) Validate() error {
	var errs []error
	for _, g := range f.AlwaysAllowGroups {
		if strings.TrimSpace(g) == "" {
			errs = append(errs, errors.New("--authorization-always-allow-groups: empty group"))
		}
	}
	if f.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("--authorization-max-in-flight: must be positive, got %d", f.MaxInFlight))
	}
	if f.Client.QPS < 0 {
		errs = append(errs, fmt.Errorf("--authorization-qps: must not be negative, got %v", f.Client.QPS))
	}
	if f.Client.Burst < 0 {
		errs = append(errs, fmt.Errorf("--authorization-burst: must not be negative, got %d", f.Client.Burst))
	}
	if f.RequireSameNode && f.NodeName == "" {
		errs = append(errs, errors.New("--node-name: required by --authorization-require-same-node"))
	}
	return errors.Join(errs...)
}

// New validates f and builds the authorizer it describes:
//
//	First(AlwaysAllowGroups, All(NodeLocal, SAR))
//
// where the local parts are present only when configured. It also returns
// the SubjectAccessReview authorizer itself, for callers that compose their
// own chain.
func (f *Flags) New() (authorizer.Authorizer, *Authorizer, error) {
	if err := f.Validate(); err != nil {
		return nil, nil, err
	}
	cfg, err := f.Client.RESTConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("authz: --authorization-kubeconfig: %w", err)
	}
	sar, err := NewForConfig(cfg, f.Options)
	if err != nil {
		return nil, nil, err
	}
	var chain []authorizer.UnconditionalAuthorizer
	if len(f.AlwaysAllowGroups) > 0 {
		chain = append(chain, AlwaysAllowGroups(f.AlwaysAllowGroups...))
	}
	var last authorizer.UnconditionalAuthorizer = sar
	if f.RequireSameNode {
		last = All(NodeLocal(NodeLocalOptions{NodeName: f.NodeName}), sar)
	}
	if len(chain) == 0 {
		if f.RequireSameNode {
			return All(NodeLocal(NodeLocalOptions{NodeName: f.NodeName}), sar), sar, nil
		}
		return sar, sar, nil
	}
	return First(append(chain, last)...), sar, nil
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
