package httpauth_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/client-go/transport"

	"github.com/reviewauth/reviewauth/httpauth"
)

// apiServerBody is the body k8s.io/apiserver's response writers send for
// err, as its filters answer a JSON client.
func apiServerBody(t *testing.T, err error) string {
	t.Helper()
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	codecs := serializer.NewCodecFactory(scheme)
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Accept", "application/json")
	responsewriters.RespondWithError(w, r, err, codecs)
	return w.Body.String()
}

// TestStatusBodiesMatchAPIServer: httpauth writes its Status bodies
// without k8s.io/apiserver's response writers (whose package would bring
// some 200 packages into every binary), and they must not differ from what
// the API server sends: 403 for a table of attributes (resource and
// non-resource, namespaced or not, subresources, names, no user, reasons
// with characters that need escaping), 401, 400 and 503.
func TestStatusBodiesMatchAPIServer(t *testing.T) {
	t.Parallel()
	alice := &user.DefaultInfo{Name: "alice"}
	tests := []struct {
		name   string
		attrs  authorizer.AttributesRecord
		reason string
	}{
		{"non-resource", authorizer.AttributesRecord{User: alice, Verb: "get", Path: "/metrics"}, "no RBAC policy matched"},
		{"non-resource, no reason", authorizer.AttributesRecord{User: alice, Verb: "post", Path: "/debug/pprof/"}, ""},
		{"resource in a namespace", authorizer.AttributesRecord{User: alice, Verb: "get", APIGroup: "snapshot.storage.k8s.io", APIVersion: "v1",
			Resource: "volumesnapshots", Namespace: "apps", Name: "snap-1", ResourceRequest: true}, "denied"},
		{"cluster-scoped subresource", authorizer.AttributesRecord{User: alice, Verb: "get", APIVersion: "v1", Resource: "nodes",
			Subresource: "metrics", Name: "node-1", ResourceRequest: true}, ""},
		{"collection", authorizer.AttributesRecord{User: alice, Verb: "list", Resource: "pods", Namespace: "kube-system", ResourceRequest: true}, ""},
		{"no user", authorizer.AttributesRecord{Verb: "get", Path: "/"}, ""},
		{"characters to escape", authorizer.AttributesRecord{User: &user.DefaultInfo{Name: `eve "<script>" & co`}, Verb: "get",
			Path: "/a<b>&c\"d/\u00e9t\u00e9"}, `reason with <html> & "quotes"` + "\u2028"},
		{"resource with odd names", authorizer.AttributesRecord{User: alice, Verb: "delete", APIGroup: "a&b", Resource: "r<s>",
			Namespace: "n\"s", Name: "x>y", ResourceRequest: true}, "<b>no</b>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			deny := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
				return authorizer.DecisionDeny, tt.reason, nil
			})
			u := tt.attrs.User
			if u == nil {
				u = &user.DefaultInfo{}
			}
			mw, err := httpauth.New(httpauth.Options{
				Authenticator: authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
					return &authenticator.Response{User: u}, true, nil
				}),
				Authorizer: deny,
				Attributes: httpauth.AttributesMapperFunc(func(*http.Request, user.Info) ([]authorizer.Attributes, error) {
					return []authorizer.Attributes{tt.attrs}, nil
				}),
			})
			if err != nil {
				t.Fatal(err)
			}
			w := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/x", nil)
			r.Header.Set("Authorization", "Bearer some-token-0123456789")
			mw(http.NotFoundHandler()).ServeHTTP(w, r)
			want := apiServerBody(t, responsewriters.ForbiddenStatusError(tt.attrs, tt.reason))
			if w.Code != 403 || w.Body.String() != want {
				t.Errorf("403 body =\n%q; want (apiserver)\n%q", w.Body.String(), want)
			}
		})
	}

	// 401 and 503, as apiserver's filters write them.
	mw := newMiddleware(t, httpauth.Options{})
	w, _ := serve(mw, get("/metrics", ""))
	if want := apiServerBody(t, apierrors.NewUnauthorized("Unauthorized")); w.Code != 401 || w.Body.String() != want {
		t.Errorf("401 body =\n%q; want (apiserver)\n%q", w.Body.String(), want)
	}
	w, _ = serve(mw, get("/metrics/%2e%2e/logs", scraperToken))
	if w.Code != 400 {
		t.Fatalf("bad path = %d; want 400", w.Code)
	}
	var st metav1.Status
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if want := apiServerBody(t, apierrors.NewBadRequest(st.Message)); w.Body.String() != want {
		t.Errorf("400 body =\n%q; want (apiserver)\n%q", w.Body.String(), want)
	}
	w, _ = serve(mw, get("/metrics", downToken))
	if w.Code != 503 {
		t.Fatalf("outage = %d; want 503", w.Code)
	}
	st = metav1.Status{}
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	unavailable := apierrors.NewServiceUnavailable(st.Message)
	unavailable.ErrStatus.Details = st.Details
	if want := apiServerBody(t, unavailable); w.Body.String() != want {
		t.Errorf("503 body =\n%q; want (apiserver)\n%q", w.Body.String(), want)
	}
}

// TestPropagatedHeadersMatchClientGo: with PropagateIdentity, the identity
// headers are exactly those client-go's transport.SetAuthProxyHeaders sets
// (which the API server's requestheader authenticator reads), for users
// with extras whose keys need escaping, as the API server has them:
// through its authenticated-group adder (alice gains system:authenticated).
func TestPropagatedHeadersMatchClientGo(t *testing.T) {
	t.Parallel()
	users := []*user.DefaultInfo{
		{Name: "alice"},
		{Name: "system:serviceaccount:ns:sa", UID: "uid-1", Groups: []string{"system:serviceaccounts", "system:authenticated"},
			Extra: map[string][]string{
				"authentication.kubernetes.io/pod-name":      {"p"},
				"authentication.kubernetes.io/credential-id": {"JTI=1", "JTI=2"},
				"UPPER case key":                      {"v"},
				"per%cent/slash\u00e9\x00\x7f;:,\"()": {"odd"},
				"":                                    {"empty key"},
			}},
	}
	for _, u := range users {
		want := httptest.NewRequest("GET", "/", nil)
		asAPIServer := apiServerUser(t, u)
		transport.SetAuthProxyHeaders(want, asAPIServer.GetName(), asAPIServer.GetUID(), asAPIServer.GetGroups(), asAPIServer.GetExtra())
		mw, err := httpauth.New(httpauth.Options{
			Authenticator: authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
				return &authenticator.Response{User: u}, true, nil
			}),
			Authorizer: authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
				return authorizer.DecisionAllow, "", nil
			}),
			Attributes:        httpauth.NonResource(),
			PropagateIdentity: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		var got http.Header
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer some-token-0123456789")
		mw(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = r.Header.Clone() })).ServeHTTP(httptest.NewRecorder(), r)
		for _, h := range []http.Header{got, want.Header} {
			for k := range h {
				if !strings.HasPrefix(k, "X-Remote-") {
					delete(h, k)
				}
			}
		}
		if !reflect.DeepEqual(got, want.Header) {
			t.Errorf("%s: headers = %v; want (client-go) %v", u.Name, got, want.Header)
		}
	}
}

// FuzzIdentityHeaders compares the identity headers with client-go's for
// any name, group and extra key and value.
func FuzzIdentityHeaders(f *testing.F) {
	f.Add("alice", "g", "authentication.kubernetes.io/pod-name", "p")
	f.Add("", "", "%41", "")
	f.Add("x", "y", "\xff\x00 \t", "v\r\n")
	f.Fuzz(func(t *testing.T, name, group, key, value string) {
		u := &user.DefaultInfo{Name: name, Groups: []string{group}, Extra: map[string][]string{key: {value}}}
		want := httptest.NewRequest("GET", "/", nil)
		transport.SetAuthProxyHeaders(want, u.Name, u.UID, u.Groups, u.Extra)
		got := http.Header{}
		httpauth.SetIdentityHeaders(got, u)
		delete(want.Header, "Host")
		if !reflect.DeepEqual(got, want.Header) {
			t.Fatalf("headers = %q; want (client-go) %q", got, want.Header)
		}
	})
}
