package httpauth_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/httpauth"
)

// ExampleNew protects a node metrics endpoint the way the kubelet does. In a
// real program the token authenticator is an *authn.Authenticator and the
// authorizer an *authz.Authorizer; here they are stand-ins that know one
// token and one RBAC binding (nodes/metrics on node-1).
func ExampleNew() {
	tokens := authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		if token == "prometheus-token" {
			return &authenticator.Response{User: &user.DefaultInfo{Name: "system:serviceaccount:monitoring:prometheus"}}, true, nil
		}
		return nil, false, &reviewauth.RejectedError{Reason: "invalid bearer token"}
	})
	rbac := authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetUser().GetName() == "system:serviceaccount:monitoring:prometheus" &&
			a.GetResource() == "nodes" && a.GetSubresource() == "metrics" && a.GetName() == "node-1" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "no binding", nil
	})

	protect, err := httpauth.New(httpauth.Options{
		Authenticator:    tokens,
		Authorizer:       rbac,
		Attributes:       httpauth.Kubelet("node-1"),
		AlwaysAllowPaths: []string{"/healthz"},
	})
	if err != nil {
		panic(err)
	}
	h := protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := request.UserFrom(r.Context())
		fmt.Fprintf(w, "%s for %s", r.URL.Path, u.GetName())
	}))

	for _, req := range []struct{ method, path, token string }{
		{"GET", "/metrics", "prometheus-token"},
		{"GET", "/metrics/cadvisor", "prometheus-token"},
		{"GET", "/logs/syslog", "prometheus-token"},
		{"GET", "/metrics/../logs/syslog", "prometheus-token"},
		{"GET", "/metrics/%2e%2e/logs/syslog", "prometheus-token"},
		{"GET", "/metrics", "stolen-token"},
		{"GET", "/metrics", ""},
		{"GET", "//healthz", ""},
		{"GET", "/healthz", "prometheus-token"},
		{"GET", "/healthz", "stolen-token"},
		{"POST", "/healthz", ""},
	} {
		r := httptest.NewRequest(req.method, req.path, nil)
		if req.token != "" {
			r.Header.Set("Authorization", "Bearer "+req.token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusOK {
			fmt.Println(w.Code, req.method, req.path, "->", w.Body.String())
			continue
		}
		fmt.Println(w.Code, req.method, req.path)
	}
	// Output:
	// 200 GET /metrics -> /metrics for system:serviceaccount:monitoring:prometheus
	// 200 GET /metrics/cadvisor -> /metrics/cadvisor for system:serviceaccount:monitoring:prometheus
	// 403 GET /logs/syslog
	// 403 GET /metrics/../logs/syslog
	// 400 GET /metrics/%2e%2e/logs/syslog
	// 401 GET /metrics
	// 401 GET /metrics
	// 200 GET //healthz -> /healthz for system:anonymous
	// 200 GET /healthz -> /healthz for system:serviceaccount:monitoring:prometheus
	// 401 GET /healthz
	// 401 POST /healthz
}

// ExampleKubelet shows the attributes the kubelet mapper asks the authorizer
// about.
func ExampleKubelet() {
	m := httpauth.Kubelet("node-1")
	u := &user.DefaultInfo{Name: "alice"}
	for _, req := range []struct{ method, path string }{
		{"GET", "/metrics/cadvisor"},
		{"GET", "/stats/summary"},
		{"GET", "/logs/kubelet.log"},
		{"POST", "/checkpoint/default/web/app"},
		{"POST", "/exec/default/web/app"},
	} {
		attrs, err := m.Attributes(httptest.NewRequest(req.method, req.path, nil), u)
		if err != nil {
			panic(err)
		}
		a := attrs[0]
		fmt.Printf("%s %s -> %s %s/%s %s (%s)\n", req.method, req.path, a.GetVerb(), a.GetResource(), a.GetSubresource(), a.GetName(), a.GetAPIVersion())
	}
	// Output:
	// GET /metrics/cadvisor -> get nodes/metrics node-1 (v1)
	// GET /stats/summary -> get nodes/stats node-1 (v1)
	// GET /logs/kubelet.log -> get nodes/log node-1 (v1)
	// POST /checkpoint/default/web/app -> create nodes/checkpoint node-1 (v1)
	// POST /exec/default/web/app -> create nodes/proxy node-1 (v1)
}

// ExampleCleanPath shows which paths are resolved and which are refused.
func ExampleCleanPath() {
	for _, p := range []string{"/metrics", "//logs/", "/metrics/../logs/x", "/metrics/%2e%2e/logs/x", "/metrics%2flogs"} {
		clean, err := httpauth.CleanPath(p)
		if err != nil {
			fmt.Printf("%s -> error: %v\n", p, err)
			continue
		}
		fmt.Printf("%s -> %s\n", p, clean)
	}
	// Output:
	// /metrics -> /metrics
	// //logs/ -> /logs/
	// /metrics/../logs/x -> /logs/x
	// /metrics/%2e%2e/logs/x -> error: httpauth: bad request path: ambiguous percent-encoding "%2e"
	// /metrics%2flogs -> error: httpauth: bad request path: ambiguous percent-encoding "%2f"
}
