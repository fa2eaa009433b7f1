package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/serving"
)

// Example runs a controller-runtime v0.25.2 manager whose metrics server
// is protected by reviewauth: kubebuilder's scaffold with its one
// FilterProvider line changed. A fake API server stands in for the
// cluster; the Prometheus service account is bound, as for
// controller-runtime's own filter, to get on the nonResourceURL /metrics,
// and presents a projected token for the metrics' audience.
func Example() {
	api := authtest.NewServer()
	defer api.Close()
	api.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{"system:serviceaccount:monitoring:prometheus"},
		Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}}))

	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	_ = l.Close()
	mgr, err := ctrl.NewManager(api.Config(), ctrl.Options{
		Metrics: metricsserver.Options{
			BindAddress:   addr,
			SecureServing: true,
			// Was: FilterProvider: filters.WithAuthenticationAndAuthorization,
			FilterProvider: serving.MetricsFilterProvider[metricsserver.Filter](serving.MetricsFilterOptions{
				Authentication: authn.Options{Audiences: []string{"my-operator-metrics"}},
				Registerer:     metrics.Registry, // reviewauth's metrics on /metrics
			}),
		},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { stop(); <-done }()
	var up strings.Builder
	announce(ctx, mgr.GetLogger(), addr, &up) // waits for the metrics server

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the self-signed certificate controller-runtime makes
	prometheus := &user.DefaultInfo{Name: "system:serviceaccount:monitoring:prometheus"}
	exp := time.Now().Add(time.Hour)
	for _, tc := range []struct{ name, token string }{
		{"Prometheus, token for my-operator-metrics", api.MintToken(prometheus, []string{"my-operator-metrics"}, exp)},
		{"Prometheus, its API server token", api.MintToken(prometheus, nil, exp)},
		{"a pod without RBAC", api.MintToken(&user.DefaultInfo{Name: "system:serviceaccount:default:app"}, []string{"my-operator-metrics"}, exp)},
		{"no token", ""},
	} {
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		fmt.Printf("%s: %d", tc.name, resp.StatusCode)
		if resp.StatusCode == http.StatusOK {
			fmt.Printf(", serves reviewauth_reviews_total: %v", strings.Contains(string(body), "reviewauth_reviews_total{"))
		}
		fmt.Println()
	}
	// Output:
	// Prometheus, token for my-operator-metrics: 200, serves reviewauth_reviews_total: true
	// Prometheus, its API server token: 401
	// a pod without RBAC: 403
	// no token: 401
}
