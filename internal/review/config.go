package review

import (
	"cmp"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/reviewauth/reviewauth"
)

// RESTConfig loads the configuration of a review client that o describes:
// from the kubeconfig file at o.Kubeconfig, or the in-cluster
// configuration when it is empty, with o's QPS and burst (zero leaves
// [NewClient]'s defaults to apply).
func RESTConfig(o reviewauth.ClientOptions) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.Kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	}
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	return cfg, nil
}

// Positive returns v, or def when v is zero or negative: the default of an
// Options bound.
func Positive[T cmp.Ordered](v, def T) T {
	var zero T
	if v <= zero {
		return def
	}
	return v
}

// ClientFlags are the flags authn.Flags and authz.Flags share, for one kind
// of review: --PREFIX-kubeconfig, --PREFIX-qps, --PREFIX-burst and
// --PREFIX-max-in-flight, with PREFIX "authentication" or "authorization".
type ClientFlags struct {
	Pkg      string // "authn" or "authz", the prefix of errors
	Prefix   string // "authentication" or "authorization"
	Kind     string // "TokenReview" or "SubjectAccessReview"
	Resource string // "tokenreviews.authentication.k8s.io", ...
}

// AddFlags registers the client flags on fs, over c and maxInFlight,
// showing their defaults.
func (f ClientFlags) AddFlags(fs *pflag.FlagSet, c *reviewauth.ClientOptions, maxInFlight *int) {
	fs.StringVar(&c.Kubeconfig, f.Prefix+"-kubeconfig", c.Kubeconfig,
		"kubeconfig file pointing at the 'core' kubernetes server with enough rights to create "+f.Resource+". Empty means the in-cluster configuration.")
	if *maxInFlight == 0 {
		*maxInFlight = DefaultMaxInFlight
	}
	fs.IntVar(maxInFlight, f.Prefix+"-max-in-flight", *maxInFlight,
		"How many "+f.Kind+"s may be in flight at once; more callers wait.")
	if c.QPS == 0 {
		c.QPS = DefaultQPS
	}
	if c.Burst == 0 {
		c.Burst = DefaultBurst
	}
	fs.Float32Var(&c.QPS, f.Prefix+"-qps", c.QPS, "QPS limit of the "+f.Kind+" client.")
	fs.IntVar(&c.Burst, f.Prefix+"-burst", c.Burst, "Burst limit of the "+f.Kind+" client.")
}

// Validate reports negative limits, naming the flag.
func (f ClientFlags) Validate(c reviewauth.ClientOptions, maxInFlight int) []error {
	var errs []error
	if maxInFlight < 0 {
		errs = append(errs, fmt.Errorf("--%s-max-in-flight: must be positive, got %d", f.Prefix, maxInFlight))
	}
	if c.QPS < 0 {
		errs = append(errs, fmt.Errorf("--%s-qps: must not be negative, got %v", f.Prefix, c.QPS))
	}
	if c.Burst < 0 {
		errs = append(errs, fmt.Errorf("--%s-burst: must not be negative, got %d", f.Prefix, c.Burst))
	}
	return errs
}

// RESTConfig loads c, naming the kubeconfig flag in its error.
func (f ClientFlags) RESTConfig(c reviewauth.ClientOptions) (*rest.Config, error) {
	cfg, err := RESTConfig(c)
	if err != nil {
		return nil, fmt.Errorf("--%s-kubeconfig: %w", f.Prefix, err)
	}
	return cfg, nil
}

// Load runs validate (the Flags' Validate), then loads c: what Flags.New
// does before it builds.
func (f ClientFlags) Load(c reviewauth.ClientOptions, validate func() error) (*rest.Config, error) {
	if err := validate(); err != nil {
		return nil, err
	}
	cfg, err := f.RESTConfig(c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Pkg, err)
	}
	return cfg, nil
}
