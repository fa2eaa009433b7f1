package httpauth_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/httpauth"
)

// rbacFake allows each user the node subresources listed for it, fails on
// the subresources in broken, and records what it was asked, in order.
type rbacFake struct {
	allowed map[string][]string
	broken  []string
	mu      sync.Mutex
	asked   []string
}

func (f *rbacFake) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	f.mu.Lock()
	f.asked = append(f.asked, a.GetSubresource())
	f.mu.Unlock()
	if a.GetResource() != "nodes" || a.GetName() != "node-1" {
		return authorizer.DecisionDeny, "not a node request", nil
	}
	if slices.Contains(f.broken, a.GetSubresource()) {
		return authorizer.DecisionDeny, "", &reviewauth.ReviewError{Review: "SubjectAccessReview", Code: 503}
	}
	if slices.Contains(f.allowed[a.GetUser().GetName()], a.GetSubresource()) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no RBAC rule for nodes/" + a.GetSubresource(), nil
}

func TestKubeletFineGrained(t *testing.T) {
	t.Parallel()
	tests := []struct {
		user, path string
		broken     []string
		wantCode   int
		wantAsked  []string
	}{
		{"pods-reader", "/pods", nil, 200, []string{"pods"}},
		{"pods-reader", "/runningpods/", nil, 200, []string{"pods"}},
		{"pods-reader", "/runningpods", nil, 200, []string{"pods"}},
		{"pods-reader", "/allocatedPods", nil, 200, []string{"pods"}},
		{"pods-reader", "/allocatedPods/ns/name", nil, 200, []string{"pods"}},
		// The kubelet's route is lowercase; a camel-case path is just
		// another nodes/proxy path there.
		{"pods-reader", "/runningPods/", nil, 403, []string{"proxy"}},
		{"pods-reader", "/Pods", nil, 403, []string{"proxy"}},
		{"pods-reader", "/healthz", nil, 403, []string{"healthz", "proxy"}},
		{"pods-reader", "/exec/ns/p/c", nil, 403, []string{"proxy"}},
		{"proxy-user", "/pods", nil, 200, []string{"pods", "proxy"}},
		{"proxy-user", "/healthz", nil, 200, []string{"healthz", "proxy"}},
		{"proxy-user", "/configz", nil, 200, []string{"configz", "proxy"}},
		// /spec is nodes/proxy in the kubelet: there is no nodes/spec.
		{"proxy-user", "/spec/", nil, 200, []string{"proxy"}},
		{"proxy-user", "/statusz", nil, 403, []string{"statusz"}},
		{"proxy-user", "/flagz", nil, 403, []string{"configz"}},
		{"configz-reader", "/flagz", nil, 200, []string{"configz"}},
		{"configz-reader", "/configz", nil, 200, []string{"configz"}},
		{"statusz-reader", "/statusz", nil, 200, []string{"statusz"}},
		{"proxy-user", "/metrics", nil, 403, []string{"metrics"}},
		{"spec-reader", "/spec", nil, 403, []string{"proxy"}},
		{"metrics-reader", "/metrics/cadvisor", nil, 200, []string{"metrics"}},
		{"healthz-reader", "/healthz", nil, 200, []string{"healthz"}},
		{"healthz-reader", "/pods", nil, 403, []string{"pods", "proxy"}},
		// could not check the fine-grained one: 503 at once, even though
		// nodes/proxy would allow.
		{"proxy-user", "/pods", []string{"pods"}, 503, []string{"pods"}},
		{"pods-reader", "/pods/../healthz", nil, 403, []string{"healthz", "proxy"}},
	}
	for _, tt := range tests {
		t.Run(tt.user+tt.path, func(t *testing.T) {
			t.Parallel()
			az := &rbacFake{broken: tt.broken, allowed: map[string][]string{
				"pods-reader": {"pods"}, "proxy-user": {"proxy"}, "spec-reader": {"spec"},
				"metrics-reader": {"metrics"}, "healthz-reader": {"healthz"}, "configz-reader": {"configz"}, "statusz-reader": {"statusz"},
			}}
			an := authenticator.TokenFunc(func(_ context.Context, name string) (*authenticator.Response, bool, error) {
				return &authenticator.Response{User: &user.DefaultInfo{Name: name}}, true, nil
			})
			mw, err := httpauth.New(httpauth.Options{Authenticator: an, Authorizer: az, Attributes: httpauth.KubeletFineGrained("node-1")})
			if err != nil {
				t.Fatal(err)
			}
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r := httptest.NewRequest("GET", "http://node"+tt.path, nil)
			r.Header.Set("Authorization", "Bearer "+tt.user)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != tt.wantCode {
				t.Errorf("GET %s as %s = %d; want %d (body %s)", tt.path, tt.user, rec.Code, tt.wantCode, rec.Body)
			}
			if !slices.Equal(az.asked, tt.wantAsked) {
				t.Errorf("asked about %v; want %v, in that order", az.asked, tt.wantAsked)
			}
		})
	}
}

func TestAnyOfGivenDirectlyIsItsFirstAlternative(t *testing.T) {
	t.Parallel()
	narrow := &authorizer.AttributesRecord{Resource: "nodes", Subresource: "pods"}
	wide := &authorizer.AttributesRecord{Resource: "nodes", Subresource: "proxy"}
	if got := httpauth.AnyOf(narrow, wide).GetSubresource(); got != "pods" {
		t.Fatalf("AnyOf(pods, proxy).GetSubresource() = %q; want pods", got)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("AnyOf() with no alternatives did not panic")
		}
	}()
	httpauth.AnyOf()
}

func FuzzKubeletFineGrained(f *testing.F) {
	for _, p := range []string{"/pods", "/runningpods/", "/allocatedPods", "/healthz", "/configz", "/flagz", "/statusz", "/spec/x", "/metrics", "/logs/a", "/exec/a/b/c", "/"} {
		f.Add("GET", p)
	}
	m := httpauth.KubeletFineGrained("node-1")
	f.Fuzz(func(t *testing.T, method, path string) {
		r, ok := fuzzRequest(t, method, path)
		if !ok {
			return
		}
		attrs, err := m.Attributes(r, alice)
		if err != nil {
			if !errors.Is(err, httpauth.ErrMethodNotAllowed) {
				t.Fatalf("Attributes(%q %q) = %v", method, r.URL.Path, err)
			}
			return
		}
		if len(attrs) != 1 {
			t.Fatalf("Attributes(%q %q) = %d sets; want 1", method, r.URL.Path, len(attrs))
		}
		a := attrs[0]
		if a.GetName() != "node-1" || a.GetResource() != "nodes" || a.GetUser() != alice {
			t.Fatalf("Attributes(%q %q) = %+v; want nodes/node-1 for alice", method, r.URL.Path, a)
		}
		// Only the fallback-capable subresources may be alternatives, and
		// their last alternative is always nodes/proxy.
		switch a.GetSubresource() {
		case "pods", "healthz", "configz", "statusz", "metrics", "stats", "log", "checkpoint", "proxy":
		default:
			t.Fatalf("Attributes(%q %q) subresource %q", method, r.URL.Path, a.GetSubresource())
		}
	})
}
