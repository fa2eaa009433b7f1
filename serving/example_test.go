package serving_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/httpauth"
	"github.com/reviewauth/reviewauth/serving"
)

// Example builds a protected HTTPS service from its command line, against
// a fake API server: the flags, the authenticator and authorizer they
// describe, the middleware, and a hardened server. A caller bound to
// "get /metrics" gets it; a caller without a token, or with a token for
// another audience, does not.
func Example() {
	api := authtest.NewServer()
	defer api.Close()
	api.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{"prometheus"}, Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}}))
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	_ = api.WriteKubeconfig(kubeconfig)

	// The service: flags, then a few lines.
	var flags serving.Flags
	var tlsFlags serving.TLSFlags
	fs := pflag.NewFlagSet("my-service", pflag.ContinueOnError)
	flags.AddFlags(fs)
	flags.AddHTTPFlags(fs)
	tlsFlags.AddFlags(fs)
	_ = fs.Parse([]string{"--kubeconfig", kubeconfig, "--audience", "my-service"})

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	built, err := flags.Build(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	certs, err := tlsFlags.Certificates("my-service", flags.HTTP.ClientCAFile)
	if err != nil {
		fmt.Println(err)
		return
	}
	protect, err := built.Middleware(httpauth.NonResource(), certs)
	if err != nil {
		fmt.Println(err)
		return
	}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := request.UserFrom(r.Context())
		fmt.Fprintf(w, "metrics for %s", u.GetName())
	})
	srv, err := serving.NewHTTPServer(protect(metrics), serving.ServerOptions{Certificates: certs})
	if err != nil {
		fmt.Println(err)
		return
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()

	// Callers.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	exp := time.Now().Add(time.Hour)
	for _, token := range []string{
		api.MintToken(&user.DefaultInfo{Name: "prometheus"}, []string{"my-service"}, exp),
		"",
		api.MintToken(&user.DefaultInfo{Name: "prometheus"}, []string{"other-service"}, exp),
		api.MintToken(&user.DefaultInfo{Name: "mallory"}, []string{"my-service"}, exp),
	} {
		req, _ := http.NewRequest("GET", "https://"+ln.Addr().String()+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			fmt.Println(resp.StatusCode, string(body))
		} else {
			fmt.Println(resp.StatusCode)
		}
	}
	client.CloseIdleConnections()
	stop()
	fmt.Println("stopped:", <-served)
	// Output:
	// 200 metrics for prometheus
	// 401
	// 401
	// 403
	// stopped: <nil>
}

// metricsserverFilter stands for controller-runtime's metricsserver.Filter
// (sigs.k8s.io/controller-runtime/pkg/metrics/server), which this module
// does not import; examples/controllerruntime runs the real one.
type metricsserverFilter func(logr.Logger, http.Handler) (http.Handler, error)

// ExampleMetricsFilterProvider protects an operator's /metrics as
// controller-runtime's filters.WithAuthenticationAndAuthorization does
// (RBAC: get on the nonResourceURL /metrics), with the audience reviewauth
// requires. In an operator's main.go, the one line is
//
//	metricsServerOptions.FilterProvider = serving.MetricsFilterProvider[metricsserver.Filter](serving.MetricsFilterOptions{
//		Authentication: authn.Options{Audiences: []string{"my-operator-metrics"}},
//		Registerer:     metrics.Registry, // controller-runtime's
//	})
//
// and controller-runtime calls the provider with the manager's rest.Config,
// then the filter for /metrics and each extra handler. Here a fake API
// server stands in for the cluster.
func ExampleMetricsFilterProvider() {
	api := authtest.NewServer()
	defer api.Close()
	api.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{"system:serviceaccount:monitoring:prometheus"},
		Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}}))

	provider := serving.MetricsFilterProvider[metricsserverFilter](serving.MetricsFilterOptions{
		Authentication: authn.Options{Audiences: []string{"my-operator-metrics"}},
	})
	filter, err := provider(api.Config(), nil) // what controller-runtime does
	if err != nil {
		fmt.Println(err)
		return
	}
	h, err := filter(logr.Discard(), promhttp.Handler())
	if err != nil {
		fmt.Println(err)
		return
	}

	prometheus := &user.DefaultInfo{Name: "system:serviceaccount:monitoring:prometheus"}
	exp := time.Now().Add(time.Hour)
	for _, tc := range []struct{ name, token string }{
		{"projected token for my-operator-metrics", api.MintToken(prometheus, []string{"my-operator-metrics"}, exp)},
		{"Prometheus' own token (API server audience)", api.MintToken(prometheus, nil, exp)},
		{"another service account", api.MintToken(&user.DefaultInfo{Name: "system:serviceaccount:default:app"}, []string{"my-operator-metrics"}, exp)},
	} {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		r.Header.Set("Authorization", "Bearer "+tc.token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%s: %d\n", tc.name, w.Code)
	}
	// Output:
	// projected token for my-operator-metrics: 200
	// Prometheus' own token (API server audience): 401
	// another service account: 403
}
