package serving

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/httpauth"
	"github.com/reviewauth/reviewauth/internal/observe"
	"github.com/reviewauth/reviewauth/internal/review"
	"github.com/reviewauth/reviewauth/metrics"
	"github.com/reviewauth/reviewauth/revocation"
)

// Flags are the command-line flags of a service protected by reviewauth:
// authn's, authz's and httpauth's flags (k8s.io/apiserver's delegated
// authentication and authorization flag names), the short forms
// --kubeconfig and --audience, and --authentication-jwks-preverify (on by
// default). The zero value has every library default, and JWKS
// pre-verification on. AddFlags (and AddHTTPFlags for an
// HTTP service) registers them, [Flags.Build] builds the authenticator,
// the authorizer and the metrics they describe.
type Flags struct {
	Authn authn.Flags
	Authz authz.Flags
	// HTTP holds --client-ca-file and --authorization-always-allow-paths,
	// registered by AddHTTPFlags only.
	HTTP httpauth.Flags

	// Kubeconfig is the short form of --authentication-kubeconfig and
	// --authorization-kubeconfig: it sets whichever of them is unset.
	Kubeconfig string
	// Audiences are added to --authentication-audiences.
	Audiences []string
	// NoJWKSPreverify turns off JWKS pre-verification
	// (--authentication-jwks-preverify=false), which is on by default:
	// each token's signature is checked against the cluster's
	// service-account keys (authn.JWKSVerifier, GET /openid/v1/jwks, which
	// the system:service-account-issuer-discovery ClusterRole allows; it
	// is bound to every service account, system:serviceaccounts, by
	// default) before it is reviewed. Only where the API server itself
	// refuses is a token refused without a TokenReview: a JWT naming the
	// key id the API server derives from a key of the cluster, whose
	// signature no key under it verifies. A token the cluster signed,
	// spelled canonically, valid now and for the service's audience is
	// verified, and takes most turns of the review queue under a flood;
	// every other token (not a JWT, no key id, a key id the cluster does
	// not publish, another spelling, expired, another audience) is
	// reviewed as without it, with a guaranteed share of the queue. Where
	// the key set cannot be read, Build logs it at start (an error naming
	// the ClusterRole), reviewauth_jwks_preverify_available says 0, and
	// every token is reviewed.
	NoJWKSPreverify bool
	// Revocation configures the revoker Build builds beside the caches,
	// registered by AddRevocationFlags only (see [RevocationFlags]).
	Revocation RevocationFlags
}

// AddFlags registers authn's and authz's flags, --kubeconfig, --audience
// and --authentication-jwks-preverify on fs.
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	f.Authn.AddFlags(fs)
	f.Authz.AddFlags(fs)
	fs.StringVar(&f.Kubeconfig, "kubeconfig", f.Kubeconfig,
		"kubeconfig for TokenReviews and SubjectAccessReviews (sets --authentication-kubeconfig and --authorization-kubeconfig when they are unset); in-cluster configuration when empty")
	fs.StringSliceVar(&f.Audiences, "audience", f.Audiences,
		"audience callers' tokens must be issued for (repeatable); added to --authentication-audiences")
	fs.Var(invertedBool{&f.NoJWKSPreverify}, "authentication-jwks-preverify",
		"Check each token's signature against the cluster's service-account keys (/openid/v1/jwks, allowed by the system:service-account-issuer-discovery ClusterRole, bound to every service account (system:serviceaccounts) by default) before reviewing it: tokens the API server would refuse as forged cost no TokenReview, and verified ones (canonical, valid now, for this audience) take most turns under a flood, the others a guaranteed share. No genuine token is refused: tokens it cannot check are reviewed. Where the keys cannot be read, this is logged at start and every token is reviewed.")
	fs.Lookup("authentication-jwks-preverify").NoOptDefVal = "true"
}

// invertedBool is a boolean flag that sets the negation of its field.
type invertedBool struct{ p *bool }

func (v invertedBool) String() string {
	if v.p != nil && *v.p {
		return "false"
	}
	return "true"
}

func (v invertedBool) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*v.p = !b
	return nil
}

func (v invertedBool) Type() string { return "bool" }

// AddHTTPFlags registers httpauth's flags, --client-ca-file and
// --authorization-always-allow-paths, on fs.
func (f *Flags) AddHTTPFlags(fs *pflag.FlagSet) { f.HTTP.AddFlags(fs) }

// complete applies the short forms. It is idempotent.
func (f *Flags) complete() {
	if f.Authn.Client.Kubeconfig == "" {
		f.Authn.Client.Kubeconfig = f.Kubeconfig
	}
	if f.Authz.Client.Kubeconfig == "" {
		f.Authz.Client.Kubeconfig = f.Kubeconfig
	}
	for _, a := range f.Audiences {
		if !slices.Contains(f.Authn.Audiences, a) {
			f.Authn.Audiences = append(f.Authn.Audiences, a)
		}
	}
}

// Validate reports every problem with the flags, naming the flag.
func (f *Flags) Validate() error {
	f.complete()
	return errors.Join(f.Authn.Validate(), f.Authz.Validate(), f.HTTP.Validate(), f.Revocation.validate(f.Authz.NodeName))
}

// Built is what [Flags.Build] returns.
type Built struct {
	// Authenticator reviews bearer tokens.
	Authenticator *authn.Authenticator
	// Authorizer is the chain the flags describe (always-allow groups,
	// node locality, SubjectAccessReview).
	Authorizer authorizer.Authorizer
	// SAR is the SubjectAccessReview authorizer alone.
	SAR *authz.Authorizer
	// Metrics are the authenticator's, the authorizer's and (through
	// [Built.HTTPOptions]) the middleware's, registered on Registry.
	Metrics *metrics.Metrics
	// Registry holds Metrics and the Go and process collectors: serve it
	// at /metrics (see [Built.Handler]).
	Registry *prometheus.Registry
	// Revoker, when the revocation flags watch something, revokes the
	// Authenticator's cached identities and flushes SAR's cached decisions
	// as what they rest on changes; nil otherwise. Nothing runs until its
	// Run is called.
	Revoker *revocation.Revoker

	http httpauth.Flags
}

// SelfCheckTimeout bounds Build's start-up check of the service's own
// credentials.
const SelfCheckTimeout = 15 * time.Second

// Build validates the flags, builds the authenticator (with the JWKS
// pre-verifier if asked), the authorizer and the metrics registry, and
// checks that the service's own credentials may create the reviews it will
// send (authn.SelfCheck and authz.SelfCheck). When the API server says they
// may not (or refuses them), Build fails fast with its message, which names
// the identity and the ClusterRole it needs (system:auth-delegator):
// without it every request would be answered 503. When the API server
// cannot be asked, Build logs a warning to klog.FromContext(ctx) and goes
// on: the API server may come up later, and until it does requests are
// answered "could not check" (503).
func (f *Flags) Build(ctx context.Context) (*Built, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f.Authn.Metrics = m
	f.Authz.Metrics = m
	var fetchJWKS func(context.Context) ([]byte, error)
	if !f.NoJWKSPreverify {
		cfg, err := f.Authn.RESTConfig()
		if err != nil {
			return nil, fmt.Errorf("--authentication-kubeconfig: %w", err)
		}
		c, err := review.NewClient(cfg)
		if err != nil {
			return nil, fmt.Errorf("--authentication-jwks-preverify: %w", err)
		}
		rec := observe.Of(m)
		fetchJWKS = func(ctx context.Context) ([]byte, error) {
			b, err := c.Get(ctx, jwksPath, jwksMaxBytes)
			rec.JWKSAvailable(err == nil)
			return b, err
		}
		v, err := authn.NewJWKSVerifierFunc(fetchJWKS, authn.JWKSOptions{})
		if err != nil {
			return nil, fmt.Errorf("--authentication-jwks-preverify: %w", err)
		}
		f.Authn.PreVerifier = v
	}
	an, err := f.Authn.New()
	if err != nil {
		return nil, err
	}
	sar, err := f.Authz.NewAuthorizer()
	if err != nil {
		return nil, err
	}
	chain, err := f.Authz.Chain(sar)
	if err != nil {
		return nil, err
	}
	if err := f.selfCheck(ctx); err != nil {
		return nil, err
	}
	if fetchJWKS != nil {
		checkJWKS(ctx, fetchJWKS)
	}
	b := &Built{Authenticator: an, Authorizer: chain, SAR: sar, Metrics: m, Registry: reg, http: f.HTTP}
	if b.Revoker, err = f.buildRevoker(an, sar, m); err != nil {
		return nil, err
	}
	return b, nil
}

// selfCheck runs authn.SelfCheck and authz.SelfCheck on the configured
// clients. It returns their refusals, and logs that the API server could
// not be asked.
func (f *Flags) selfCheck(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, SelfCheckTimeout)
	defer cancel()
	var errs []error
	for _, c := range []struct {
		config func() (*rest.Config, error)
		check  func(context.Context, *rest.Config) error
	}{{f.Authn.RESTConfig, authn.SelfCheck}, {f.Authz.RESTConfig, authz.SelfCheck}} {
		cfg, err := c.config()
		if err != nil {
			return err
		}
		switch err := c.check(ctx, cfg); {
		case errors.Is(err, reviewauth.ErrRefused):
			errs = append(errs, err)
		case err != nil:
			klog.FromContext(ctx).Error(err, "Starting anyway: requests will be answered 503 until the API server answers")
		}
	}
	return errors.Join(errs...)
}

const (
	// jwksPath is where the API server serves its service-account keys.
	jwksPath = "/openid/v1/jwks"
	// jwksMaxBytes is authn.JWKSVerifier's bound on a key set: a larger
	// one is not used.
	jwksMaxBytes = 64 << 10
)

// checkJWKS reads the key set once at start, and says loudly when it
// cannot be read: pre-verification then refuses nothing, and a flood of
// forged tokens costs a TokenReview each.
func checkJWKS(ctx context.Context, fetch func(context.Context) ([]byte, error)) {
	ctx, cancel := context.WithTimeout(ctx, SelfCheckTimeout)
	defer cancel()
	logger := klog.FromContext(ctx)
	if _, err := fetch(ctx); err != nil {
		logger.Error(err, "JWKS pre-verification is unavailable: the cluster's service-account keys ("+jwksPath+") could not be read, so every token is reviewed, forged ones included, until they can be (retried as tokens arrive; reviewauth_jwks_preverify_available is 0). This service's identity needs the system:service-account-issuer-discovery ClusterRole (bound to every service account, system:serviceaccounts, by default); --authentication-jwks-preverify=false silences this")
		return
	}
	logger.V(2).Info("JWKS pre-verification is on: forged service-account tokens are refused without a review")
}

// HTTPOptions returns the httpauth.Options of the built parts and the
// HTTP flags, for mapper: Authenticator, Authorizer, Attributes,
// AlwaysAllowPaths (--authorization-always-allow-paths), Metrics, and
// ClientCertificates from certs when --client-ca-file is set (certs must
// then have been made with it, see [TLSFlags.Certificates]). Adjust the
// result, then pass it to httpauth.New.
func (b *Built) HTTPOptions(mapper httpauth.AttributesMapper, certs *Certificates) (httpauth.Options, error) {
	opts := httpauth.Options{
		Authenticator:    b.Authenticator,
		Authorizer:       b.Authorizer,
		Attributes:       mapper,
		AlwaysAllowPaths: b.http.AlwaysAllowPaths,
		Metrics:          b.Metrics,
	}
	if b.http.ClientCAFile != "" {
		if certs == nil || certs.clientCA == nil {
			return opts, errors.New("serving: --client-ca-file needs a TLS server whose Certificates carry the client CA")
		}
		cc, err := certs.ClientCertificates(httpauth.ClientCertOptions{})
		if err != nil {
			return opts, err
		}
		opts.ClientCertificates = cc
	}
	return opts, nil
}

// Middleware is httpauth.New of [Built.HTTPOptions].
func (b *Built) Middleware(mapper httpauth.AttributesMapper, certs *Certificates) (func(http.Handler) http.Handler, error) {
	opts, err := b.HTTPOptions(mapper, certs)
	if err != nil {
		return nil, err
	}
	return httpauth.New(opts)
}

// Handler serves the metrics of Registry at /metrics and, when health is
// not nil, /healthz, /livez and /readyz: the endpoints of a separate
// metrics port.
func (b *Built) Handler(health *Health) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(b.Registry, promhttp.HandlerOpts{}))
	if health != nil {
		for _, p := range []string{"/healthz", "/livez", "/readyz"} {
			mux.Handle(p, health)
		}
	}
	return mux
}
