package httpauth

import (
	"errors"
	"net/http"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// MetricsFilter returns the middleware of [New] in the shape of
// controller-runtime's metrics filter, sigs.k8s.io/controller-runtime's
// metricsserver.Filter (func(logr.Logger, http.Handler) (http.Handler,
// error)), to which the result is assignable: the function it returns
// wraps each handler of a controller-runtime metrics server (/metrics and
// every ExtraHandler) with the middleware, and makes the middleware log
// through the logger the server hands it (klog.NewContext on each request).
// It does not import controller-runtime; serving.MetricsFilterProvider
// builds the authenticator and authorizer from the manager's rest.Config
// and is what metricsserver.Options.FilterProvider takes.
//
// A nil opts.Attributes means [NonResource]: the cleaned request path and
// the lowercase method as the verb, what controller-runtime's
// filters.WithAuthenticationAndAuthorization (v0.25.2) authorizes, so that
// the RBAC users already have for it keeps working unchanged:
//
//	rules:
//	- nonResourceURLs: ["/metrics"]
//	  verbs: ["get"]
//
// Every other field is [New]'s, with New's defaults. Compared with
// controller-runtime's filter, requests are answered as the package
// documentation says: a rejected token is 401 (controller-runtime: 500 for
// a token the API server rejects, 401 without a token); an API server that
// cannot be asked is 503 with Retry-After (controller-runtime: 500), never
// 401 or 403; a denial is 403 with a Status body. The token authenticator
// is yours: an *authn.Authenticator requires the audience your scrapers'
// tokens are issued for, which controller-runtime does not check (see
// serving.MetricsFilterOptions for configuring Prometheus).
//
// MetricsFilter reports New's errors; it never panics. The function it
// returns fails only for a nil handler. Both, and the handlers, are safe
// for concurrent use.
func MetricsFilter(opts Options) (func(logr.Logger, http.Handler) (http.Handler, error), error) {
	if opts.Attributes == nil {
		opts.Attributes = NonResource()
	}
	protect, err := New(opts)
	if err != nil {
		return nil, err
	}
	return func(log logr.Logger, h http.Handler) (http.Handler, error) {
		if h == nil {
			return nil, errors.New("httpauth: MetricsFilter: nil handler")
		}
		protected := protect(h)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			protected.ServeHTTP(w, r.WithContext(klog.NewContext(r.Context(), log)))
		}), nil
	}, nil
}
