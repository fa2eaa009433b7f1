package authn

import (
	"errors"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/internal/review"
	"github.com/reviewauth/reviewauth/internal/ttlflag"
)

// Flags is Options plus the client to review with, as set from the command
// line. The zero value has every default; AddFlags registers its flags,
// Validate checks them, and New builds the Authenticator. A Flags is not
// safe for concurrent use: flags are parsed once, before anything runs.
//
// The cache TTL flags mean what they mean in k8s.io/apiserver:
// --authentication-token-webhook-cache-ttl=0 disables the identity cache, so
// that every request is reviewed (no revocation window beyond the API
// server's own), and --authentication-token-webhook-cache-failure-ttl=0
// disables the rejection cache. The flags store that as the Options'
// "disabled" value, a negative TTL; the fields keep the Options' meaning (0
// is the default, negative disables), so the zero Flags is safe.
type Flags struct {
	Options
	// Client is how to reach the API server: --authentication-kubeconfig,
	// --authentication-qps and --authentication-burst.
	Client reviewauth.ClientOptions
}

// clientFlags are the client flags authn shares with authz.
var clientFlags = review.ClientFlags{Pkg: "authn", Prefix: "authentication", Kind: "TokenReview", Resource: "tokenreviews.authentication.k8s.io"}

// AddFlags registers fs flags for f:
//
//	--authentication-kubeconfig                    kubeconfig of the API server (default: in-cluster)
//	--authentication-audiences                     audiences this service accepts (required)
//	--authentication-token-webhook-cache-ttl       how long an identity is cached (default 1m; 0 disables)
//	--authentication-token-webhook-cache-failure-ttl how long a rejection is cached (default 10s; 0 disables)
//	--authentication-max-in-flight                 TokenReviews in flight at most (default 16)
//	--authentication-qps, --authentication-burst   review client limits (default 200, 400)
//	--authentication-allow-api-server-audience     DANGEROUS: accept API server tokens
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	clientFlags.AddFlags(fs, &f.Client, &f.MaxInFlight)
	fs.StringSliceVar(&f.Audiences, "authentication-audiences", f.Audiences, "Audiences this service accepts tokens for (repeatable or comma-separated). Required: callers must request tokens for one of them.")
	fs.Var(ttlflag.New(&f.SuccessTTL, DefaultSuccessTTL), "authentication-token-webhook-cache-ttl", "How long an authenticated identity is cached; never past the token's exp. Also the time a revoked token keeps working. 0 disables the cache: every request is reviewed.")
	fs.Var(ttlflag.New(&f.FailureTTL, DefaultFailureTTL), "authentication-token-webhook-cache-failure-ttl", "How long a rejected token is remembered. 0 disables the cache: every request with a rejected token is reviewed again.")
	fs.BoolVar(&f.AllowAPIServerAudience, "authentication-allow-api-server-audience", f.AllowAPIServerAudience, "DANGEROUS: with no --authentication-audiences, accept tokens for the API server's own audience, which this service could replay against the API server.")
}

// Validate reports every problem with f, naming the flag.
func (f *Flags) Validate() error {
	var errs []error
	switch {
	case len(f.Audiences) == 0 && !f.AllowAPIServerAudience:
		errs = append(errs, errors.New("--authentication-audiences: required: name the audience callers request tokens for"))
	case len(f.Audiences) > 0 && f.AllowAPIServerAudience:
		errs = append(errs, errors.New("--authentication-allow-api-server-audience: cannot be combined with --authentication-audiences"))
	}
	for _, a := range f.Audiences {
		if a == "" {
			errs = append(errs, errors.New("--authentication-audiences: empty audience"))
		}
	}
	errs = append(errs, clientFlags.Validate(f.Client, f.MaxInFlight)...)
	return errors.Join(errs...)
}

// RESTConfig loads the client configuration f.Client describes: the
// kubeconfig file, or the in-cluster configuration, with f's QPS and burst.
// Use it for [SelfCheck].
func (f *Flags) RESTConfig() (*rest.Config, error) { return clientFlags.RESTConfig(f.Client) }

// New validates f and builds the Authenticator it describes, with
// [NewForConfig].
func (f *Flags) New() (*Authenticator, error) {
	cfg, err := clientFlags.Load(f.Client, f.Validate)
	if err != nil {
		return nil, err
	}
	return NewForConfig(cfg, f.Options)
}
