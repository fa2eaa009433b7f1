package serving

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/httpauth"
	"github.com/reviewauth/reviewauth/metrics"
)

// MetricsFilterOptions configures [MetricsFilterProvider]. Every field but
// Authentication.Audiences has a safe zero value.
//
// # Audience
//
// controller-runtime's own filter reviews tokens without an audience, so
// that it accepts any token for the API server: Prometheus scraping with its
// own service-account token. A token for the API server is a credential for
// the API server itself, which the operator (or anyone who compromises it)
// could replay with the scraper's permissions. Authentication.Audiences is
// therefore required, as everywhere in reviewauth: name an audience of the
// operator's metrics, say "my-operator-metrics", and give the scraper a
// projected token for it. For Prometheus, in its pod:
//
//	volumes:
//	- name: my-operator-metrics-token
//	  projected:
//	    sources:
//	    - serviceAccountToken:
//	        audience: my-operator-metrics
//	        expirationSeconds: 3600
//	        path: token
//	# mounted at /var/run/secrets/my-operator-metrics
//
// and in its scrape configuration (Prometheus reads the file on every
// scrape, so the kubelet's rotation needs nothing more):
//
//	authorization:
//	  credentials_file: /var/run/secrets/my-operator-metrics/token
//
// With the Prometheus Operator, add the volume through the Prometheus
// resource's volumes and volumeMounts, and name the file in the scrape
// configuration of the job. The RBAC is unchanged: the scraper's service
// account needs get on the nonResourceURL /metrics, as for
// controller-runtime's filter.
//
// A cluster whose scraper cannot be changed yet may set
// Authentication.AllowAPIServerAudience (and no Audiences) to accept API
// server tokens, as controller-runtime's filter does. That is DANGEROUS
// for the reason above and exists only for migrating; see
// authn.Options.AllowAPIServerAudience.
type MetricsFilterOptions struct {
	// Authentication configures the authenticator, built with
	// authn.NewForConfig from the manager's rest.Config: Audiences
	// (required, see above), cache TTLs, retries and so on, with authn's
	// defaults (success cache 1m, rejections 10s; controller-runtime: 1m,
	// no rejection cache). Its Metrics is set from Registerer when nil.
	Authentication authn.Options

	// Authorization configures the SubjectAccessReview authorizer, built
	// with authz.NewForConfig from the manager's rest.Config, with authz's
	// defaults (allowed 1m, denied 10s; controller-runtime: 5m and 30s).
	// Its Metrics is set from Registerer when nil.
	Authorization authz.Options

	// HTTP configures the middleware, as for httpauth.MetricsFilter: nil
	// Attributes means httpauth.NonResource, controller-runtime's
	// contract (nonResourceURLs and the lowercase method). Authenticator
	// and Authorizer must be nil: the provider builds them from
	// Authentication and Authorization. Its Metrics is set from
	// Registerer when nil.
	HTTP httpauth.Options

	// Registerer, if not nil, registers reviewauth's metrics
	// (metrics.New, given to the authenticator, the authorizer and the
	// middleware) when the provider is called. Pass controller-runtime's
	// sigs.k8s.io/controller-runtime/pkg/metrics.Registry to serve them on
	// /metrics with the controller's own. If it holds reviewauth's metrics
	// already (a second manager in the same process), those are used.
	// Nil registers nothing.
	Registerer prometheus.Registerer

	// SkipSelfCheck skips the start-up check of the manager's own
	// credentials. By default (false), the first time the filter is
	// applied (when the metrics server starts) it runs authn.SelfCheck and
	// authz.SelfCheck with the manager's rest.Config, bounded by
	// [SelfCheckTimeout]: when the API server says the manager may not
	// create TokenReviews or SubjectAccessReviews, the filter fails, and
	// so does the metrics server's start, with a message naming the
	// identity and the ClusterRole it needs (system:auth-delegator, or the
	// tokenreviews and subjectaccessreviews create rules kubebuilder
	// scaffolds); without them every scrape would be answered 503. When
	// the API server cannot be asked, the check logs a warning to the
	// metrics server's logger and the server starts.
	SkipSelfCheck bool
}

// MetricsFilterProvider returns a controller-runtime metrics
// FilterProvider (sigs.k8s.io/controller-runtime/pkg/metrics/server,
// Options.FilterProvider) that protects the metrics server with reviewauth,
// with the RBAC contract of controller-runtime's
// filters.WithAuthenticationAndAuthorization: TokenReview, then a
// SubjectAccessReview of the request's path as a nonResourceURL and its
// lowercase method as the verb. F is controller-runtime's
// metricsserver.Filter; this package does not import controller-runtime.
// Switching is one line:
//
//	metricsServerOptions.FilterProvider = serving.MetricsFilterProvider[metricsserver.Filter](serving.MetricsFilterOptions{
//		Authentication: authn.Options{Audiences: []string{"my-operator-metrics"}},
//		Registerer:     metrics.Registry,
//	})
//
// The provider builds the authenticator and the authorizer from the
// manager's rest.Config (authn.NewForConfig and authz.NewForConfig:
// clients of their own, which never log a request or response body; the
// http.Client controller-runtime passes is not used; a QPS of -1, which
// controller-runtime sets, disables client-side rate limiting, as for the
// manager's own clients), registers the metrics, and returns
// httpauth.MetricsFilter of them. It reports their errors (no audience, a
// malformed option) to controller-runtime, which fails the manager's
// creation with them; the filter itself reports a refused self-check (see
// MetricsFilterOptions.SkipSelfCheck). Answers differ from
// controller-runtime's: 401 for a rejected token, 503 with Retry-After when
// the API server cannot be asked (controller-runtime answers 500 to both),
// 403 for a denial. opts is copied; the provider may be called more than
// once (each call builds its own authenticator and authorizer) and is safe
// for concurrent use.
func MetricsFilterProvider[F ~func(logr.Logger, http.Handler) (http.Handler, error)](opts MetricsFilterOptions) func(*rest.Config, *http.Client) (F, error) {
	return func(cfg *rest.Config, _ *http.Client) (F, error) {
		if cfg == nil {
			return nil, errors.New("serving: MetricsFilterProvider: nil rest.Config")
		}
		if opts.HTTP.Authenticator != nil || opts.HTTP.Authorizer != nil {
			return nil, errors.New("serving: MetricsFilterOptions.HTTP.Authenticator and Authorizer must be nil: set Authentication and Authorization, or use httpauth.MetricsFilter with your own")
		}
		o := opts
		if o.Registerer != nil {
			m, err := registerMetrics(o.Registerer)
			if err != nil {
				return nil, err
			}
			o.Authentication.Metrics = cmp.Or(o.Authentication.Metrics, m)
			o.Authorization.Metrics = cmp.Or(o.Authorization.Metrics, m)
			o.HTTP.Metrics = cmp.Or(o.HTTP.Metrics, m)
		}
		an, err := authn.NewForConfig(cfg, o.Authentication)
		if err != nil {
			return nil, fmt.Errorf("serving: metrics filter: %w", err)
		}
		az, err := authz.NewForConfig(cfg, o.Authorization)
		if err != nil {
			return nil, fmt.Errorf("serving: metrics filter: %w", err)
		}
		o.HTTP.Authenticator, o.HTTP.Authorizer = an, az
		filter, err := httpauth.MetricsFilter(o.HTTP)
		if err != nil {
			return nil, fmt.Errorf("serving: metrics filter: %w", err)
		}
		if o.SkipSelfCheck {
			return F(filter), nil
		}
		cfg = rest.CopyConfig(cfg)
		var (
			once     sync.Once
			checkErr error
		)
		return F(func(log logr.Logger, h http.Handler) (http.Handler, error) {
			once.Do(func() { checkErr = metricsSelfCheck(log, cfg) })
			if checkErr != nil {
				return nil, checkErr
			}
			return filter(log, h)
		}), nil
	}
}

// registerMetrics registers a new metrics.Metrics on reg, or returns the
// one reg holds already.
func registerMetrics(reg prometheus.Registerer) (*metrics.Metrics, error) {
	m := metrics.New()
	err := reg.Register(m)
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
		return m, nil
	case errors.As(err, &are):
		if existing, ok := are.ExistingCollector.(*metrics.Metrics); ok {
			return existing, nil
		}
	}
	return nil, fmt.Errorf("serving: registering reviewauth's metrics: %w", err)
}

// metricsSelfCheck runs authn.SelfCheck and authz.SelfCheck with cfg: a
// refusal is returned, an API server that cannot be asked is logged.
func metricsSelfCheck(log logr.Logger, cfg *rest.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), SelfCheckTimeout)
	defer cancel()
	var errs []error
	for _, check := range []func(context.Context, *rest.Config) error{authn.SelfCheck, authz.SelfCheck} {
		switch err := check(ctx, cfg); {
		case errors.Is(err, reviewauth.ErrRefused):
			errs = append(errs, err)
		case err != nil:
			log.Error(err, "Starting the metrics server anyway: scrapes will be answered 503 until the API server answers")
		}
	}
	return errors.Join(errs...)
}
