package httpauth_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/httpauth"
)

// ExampleForwarder is a reverse proxy in front of an upstream that trusts
// the front-proxy identity headers and serves the namespace named by the
// X-Namespace header, which therefore decides what is authorized. Clients
// cannot take away the identity or the namespace with their Connection
// header, nor send the namespace in a second spelling.
func ExampleForwarder() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "user=%q groups=%q namespace=%q", r.Header.Get("X-Remote-User"), r.Header.Values("X-Remote-Group"), r.Header.Values("X-Namespace"))
	}))
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)

	fw, err := httpauth.NewForwarder(httpauth.ForwarderOptions{
		Identity:        httpauth.FrontProxyHeaders(),
		DecisionHeaders: []httpauth.DecisionHeader{{Name: "X-Namespace"}},
	})
	if err != nil {
		panic(err)
	}
	protect, err := httpauth.New(httpauth.Options{
		Authenticator: authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
			if token == "alice-token" {
				return &authenticator.Response{User: &user.DefaultInfo{Name: "alice", Groups: []string{"team-a"}}}, true, nil
			}
			return nil, false, &reviewauth.RejectedError{Reason: "invalid bearer token"}
		}),
		Authorizer: authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			if a.GetNamespace() == "team-a" {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionNoOpinion, "", nil
		}),
		Attributes: httpauth.AttributesMapperFunc(func(r *http.Request, u user.Info) ([]authorizer.Attributes, error) {
			return []authorizer.Attributes{&authorizer.AttributesRecord{User: u, Verb: "get", Resource: "metrics",
				Namespace: r.Header.Get("X-Namespace"), ResourceRequest: true}}, nil
		}),
		Forwarder: fw,
	})
	if err != nil {
		panic(err)
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		fw.Header(pr.Out.Header, pr.In) // last
	}}
	front := httptest.NewServer(protect(proxy))
	defer front.Close()
	client := front.Client()
	defer client.CloseIdleConnections()

	for _, header := range []http.Header{
		{"X-Namespace": {"team-a"}},
		{"X-Namespace": {"team-a"}, "Connection": {"X-Remote-User, X-Remote-Group, X-Namespace"}},
		{"X_namespace": {"team-a"}},
		{"X-Namespace": {"team-a"}, "X_namespace": {"kube-system"}},
		{"X-Namespace": {"kube-system"}},
	} {
		req, _ := http.NewRequest("GET", front.URL+"/metrics", nil)
		req.Header = header
		req.Header.Set("Authorization", "Bearer alice-token")
		resp, err := client.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			body = []byte(resp.Status)
		}
		delete(header, "Authorization")
		fmt.Printf("%v\n  -> %s\n", header, strings.TrimSpace(string(body)))
	}
	// Output:
	// map[X-Namespace:[team-a]]
	//   -> user="alice" groups=["team-a" "system:authenticated"] namespace=["team-a"]
	// map[Connection:[X-Remote-User, X-Remote-Group, X-Namespace] X-Namespace:[team-a]]
	//   -> user="alice" groups=["team-a" "system:authenticated"] namespace=["team-a"]
	// map[X_namespace:[team-a]]
	//   -> user="alice" groups=["team-a" "system:authenticated"] namespace=["team-a"]
	// map[X-Namespace:[team-a] X_namespace:[kube-system]]
	//   -> 400 Bad Request
	// map[X-Namespace:[kube-system]]
	//   -> 403 Forbidden
}
