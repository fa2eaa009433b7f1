package difftest_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/transport"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/examples/internal/difftest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// client-go keeps idle keep-alive connections to the API server in
		// its shared transport cache.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// TestCheckFindsDifferences: Check reports a proxy that forwards a header
// the decision read in a spelling it did not read, one that drops the
// identity, and one that forwards a refused request; it passes one that
// forwards what it authorized. With PassesAnswers, it passes a proxy that
// forwards what it authorized and withholds the answer (404), and still
// reports one that forwards a refused request, or answers a success
// without forwarding.
func TestCheckFindsDifferences(t *testing.T) {
	t.Parallel()
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"team-a", user.AllAuthenticated}}
	for _, tt := range []struct {
		name    string
		forward func(out, in http.Header)
		refused bool // forwards even what it refuses
		answer  int  // what it answers after forwarding; 0: the upstream's 200
		skip    bool // answers 200 without forwarding
		passes  bool // PassesAnswers
		wantErr string
	}{
		{name: "forwards what was authorized", forward: func(out, in http.Header) {}},
		{name: "forwards a second spelling", forward: func(out, in http.Header) { out["X_namespace"] = in["X_namespace"] }, wantErr: "received"},
		{name: "drops the identity", forward: func(out, in http.Header) { delete(out, "X-Remote-User") }, wantErr: "received   no user"},
		{name: "two user values", forward: func(out, in http.Header) { out["X_remote_user"] = []string{"admin"} }, wantErr: "X-Remote-User has 2 values"},
		{name: "forwards refused requests", forward: func(out, in http.Header) {}, refused: true, wantErr: "answered 403, and the upstream received it"},
		{name: "withholds an answer", forward: func(out, in http.Header) {}, answer: http.StatusNotFound, wantErr: "answered 404, and the upstream received it"},
		{name: "withholds an answer, PassesAnswers", forward: func(out, in http.Header) {}, answer: http.StatusNotFound, passes: true},
		{name: "forwards refused requests, PassesAnswers", forward: func(out, in http.Header) {}, refused: true, passes: true, wantErr: "authorized no user"},
		{name: "forwards a second spelling, PassesAnswers", forward: func(out, in http.Header) { out["X_namespace"] = in["X_namespace"] }, passes: true, wantErr: "received"},
		{name: "answers without forwarding, PassesAnswers", forward: func(out, in http.Header) {}, skip: true, passes: true, wantErr: "answered 200; the upstream received it 0 times"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &difftest.Recorder{}
			az := rec.Authorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				if a.GetNamespace() == "team-a" {
					return authorizer.DecisionAllow, "", nil
				}
				return authorizer.DecisionNoOpinion, "", nil
			}))
			up := &difftest.Upstream{}
			// A toy proxy: authorizes X-Namespace (canonical key only) for
			// alice, forwards the front-proxy identity and the header.
			proxy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				a := &authorizer.AttributesRecord{User: alice, Verb: "get", Resource: "pods", Namespace: r.Header.Get("X-Namespace"), ResourceRequest: true}
				d, _, _ := az.Authorize(r.Context(), a)
				if d != authorizer.DecisionAllow {
					w.WriteHeader(http.StatusForbidden)
					if !tt.refused {
						return
					}
				}
				if tt.skip {
					return
				}
				out := httptest.NewRequest(r.Method, r.URL.String(), nil)
				out.Header = http.Header{"X-Namespace": r.Header["X-Namespace"]}
				transport.SetAuthProxyHeaders(out, alice.Name, alice.UID, alice.Groups, alice.Extra)
				tt.forward(out.Header, r.Header)
				up.ServeHTTP(httptest.NewRecorder(), out)
				if tt.answer != 0 && d == authorizer.DecisionAllow {
					w.WriteHeader(tt.answer)
				}
			})
			p := difftest.Proxy{
				Send: func(r difftest.Request) (int, error) {
					req := httptest.NewRequest(r.Method, r.Target, nil)
					for _, f := range r.Header {
						req.Header[f[0]] = append(req.Header[f[0]], f[1])
					}
					w := httptest.NewRecorder()
					proxy.ServeHTTP(w, req)
					return w.Code, nil
				},
				Authorized: rec, Upstream: up,
				Read: func(r *http.Request) (difftest.Decision, error) {
					u, err := difftest.FrontProxyUser(r.Header)
					d := difftest.Decision{User: u}
					for _, ns := range difftest.Lenient(r.Header)["X-Namespace"] {
						d.Attributes = append(d.Attributes, difftest.Attributes{Verb: "get", Resource: "pods", Namespace: ns, ResourceRequest: true})
					}
					return d, err
				},
				PassesAnswers: tt.passes,
			}
			err := difftest.Check(p, []difftest.Request{
				{Method: "GET", Target: "/", Header: [][2]string{{"X-Namespace", "team-a"}, {"X_namespace", "kube-system"}}},
				{Method: "GET", Target: "/", Header: [][2]string{{"X-Namespace", "kube-system"}}},
			})
			if tt.wantErr == "" && err != nil {
				t.Errorf("Check() = %v; want nil", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Check() = %v; want an error with %q", err, tt.wantErr)
			}
		})
	}
}

// TestRecorderMatchesAttributesOf: what a Recorder records from the
// SubjectAccessReviews authz sends (FromSAR) equals AttributesOf the
// attributes authorized, selectors included, and the user is the one the
// review was for.
func TestRecorderMatchesAttributesOf(t *testing.T) {
	t.Parallel()
	api := authtest.Start(t)
	rec := &difftest.Recorder{}
	api.SetPolicy(rec.Policy(authtest.Rules(authtest.Rule{Users: []string{"alice"}, Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"},
		Subresources: []string{"*", ""}, NonResourceURLs: []string{"*"}})))
	az, err := authz.NewForConfig(api.Config(), authz.Options{AllowedTTL: -1, DeniedTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	alice := &user.DefaultInfo{Name: "alice", UID: "u", Groups: []string{"g", user.AllAuthenticated}, Extra: map[string][]string{"k": {"v"}}}
	field, _ := fields.ParseSelector("spec.nodeName=node-1,metadata.name!=x")
	req, _ := labels.NewRequirement("app", selection.In, []string{"b", "a"})
	for _, a := range []*authorizer.AttributesRecord{
		{User: alice, Verb: "get", Path: "/metrics"},
		{User: alice, Verb: "list", APIGroup: "resource.k8s.io", APIVersion: "v1", Resource: "resourceslices", ResourceRequest: true,
			FieldSelectorRequirements: field.Requirements(), LabelSelectorRequirements: labels.Requirements{*req}},
		{User: alice, Verb: "get", Namespace: "ns", Resource: "pods", Subresource: "log", Name: "p", ResourceRequest: true},
	} {
		if d, _, err := az.Authorize(context.Background(), a); d != authorizer.DecisionAllow || err != nil {
			t.Fatalf("Authorize(%+v) = %v, %v", a, d, err)
		}
		got, err := rec.Take()
		if err != nil {
			t.Fatal(err)
		}
		want := difftest.Decision{User: difftest.UserOf(alice), Attributes: []difftest.Attributes{difftest.AttributesOf(a)}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("recorded (-AttributesOf +FromSAR):\n%s", diff)
		}
	}
}

// TestIdentityReaders: FrontProxyUser reads what client-go's
// SetAuthProxyHeaders writes, in any spelling; ImpersonatedUser reads
// client-go's impersonation headers and adds system:authenticated as the
// API server does; both refuse a single-valued header with two values.
func TestIdentityReaders(t *testing.T) {
	t.Parallel()
	u := &user.DefaultInfo{Name: "alice", UID: "u-1", Groups: []string{"g"}, Extra: map[string][]string{"authentication.kubernetes.io/pod-name": {"p"}}}
	r := httptest.NewRequest("GET", "/", nil)
	transport.SetAuthProxyHeaders(r, u.Name, u.UID, u.Groups, u.Extra)
	if got, err := difftest.FrontProxyUser(r.Header); err != nil || !cmp.Equal(got, difftest.UserOf(u)) {
		t.Errorf("FrontProxyUser = %+v, %v; want %+v", got, err, u)
	}
	r.Header["X_remote_user"] = []string{"admin"}
	if got, err := difftest.FrontProxyUser(r.Header); err == nil {
		t.Errorf("FrontProxyUser(two spellings of X-Remote-User) = %+v; want an error", got)
	}
	if got, err := difftest.FrontProxyUser(http.Header{}); got != nil || err != nil {
		t.Errorf("FrontProxyUser(none) = %+v, %v; want nil, nil", got, err)
	}

	var seen http.Header
	rt := transport.NewImpersonatingRoundTripper(transport.ImpersonationConfig{UserName: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra},
		roundTripper(func(r *http.Request) (*http.Response, error) { seen = r.Header; return nil, context.Canceled }))
	_, _ = rt.RoundTrip(httptest.NewRequest("GET", "/", nil))
	want := difftest.UserOf(u)
	want.Groups = append(want.Groups, user.AllAuthenticated)
	if got, err := difftest.ImpersonatedUser(seen); err != nil || !cmp.Equal(got, want) {
		t.Errorf("ImpersonatedUser = %+v, %v; want %+v", got, err, want)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestCorpus: the corpus has the cases it promises, and Lenient and
// Spellings read and write every spelling.
func TestCorpus(t *testing.T) {
	t.Parallel()
	c := difftest.Corpus(difftest.CorpusOptions{Targets: []string{"/a"}, Authorization: []string{"Bearer t"}, DecisionHeader: "X-Namespace",
		DecisionValues: []string{"a", "b"}, IdentityHeaders: []string{"X-Remote-User"}})
	var twoSpellings, connection, spoofed bool
	for _, r := range c {
		s := r.String()
		twoSpellings = twoSpellings || (strings.Contains(s, "[X-Namespace: ") && strings.Contains(s, "[X_Namespace: "))
		connection = connection || (r.HasConnection() && strings.Contains(s, "X-Remote-User, Authorization, X-Namespace"))
		spoofed = spoofed || strings.Contains(s, "[x_remote_user: system:admin]")
		if strings.Contains(s, "Bearer t") {
			t.Errorf("%s: the credential is in the request's String", s)
		}
	}
	if !twoSpellings || !connection || !spoofed {
		t.Errorf("corpus: two spellings %v, Connection naming protected headers %v, spoofed identity %v; want all", twoSpellings, connection, spoofed)
	}
	h := http.Header{"X_namespace": {"b"}, "X-Namespace": {"a"}, "x-namespace": {"c"}}
	if got := difftest.Lenient(h)["X-Namespace"]; !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Lenient = %q; want [a b c]", got)
	}
	if got := difftest.Spellings("X-Remote-User"); !slices.Contains(got, "x_remote_user") || !slices.Contains(got, "X-Remote_User") {
		t.Errorf("Spellings = %q", got)
	}
}

// TestSend: Send sends the request's body, its header lines as written,
// and, to an HTTP/2 server (h2c here), no Connection header, which Go's
// HTTP/2 client refuses to send.
func TestSend(t *testing.T) {
	t.Parallel()
	type got struct {
		proto int
		body  string
		h     http.Header
	}
	seen := make(chan got, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- got{r.ProtoMajor, string(b), r.Header.Clone()}
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	defer h2c.CloseIdleConnections()
	h1 := &http.Transport{}
	defer h1.CloseIdleConnections()
	r := difftest.Request{Method: "PATCH", Target: "/x", Header: [][2]string{{"Content-Type", "a"}, {"Content_Type", "b"}, {"Connection", "X-A"}, {"X-A", "1"}}, Body: `{"a":1}`}
	for _, tt := range []struct {
		client     *http.Client
		proto      int
		connection bool
	}{{&http.Client{Transport: h1}, 1, true}, {&http.Client{Transport: h2c}, 2, false}} {
		code, err := difftest.Send(tt.client, srv.URL, r)
		if err != nil || code != http.StatusOK {
			t.Fatalf("Send over HTTP/%d = %d, %v", tt.proto, code, err)
		}
		g := <-seen
		if g.proto != tt.proto || g.body != r.Body || g.h.Get("Content-Type") != "a" || g.h.Get("Content_Type") != "b" || (g.h.Get("Connection") != "") != tt.connection {
			t.Errorf("Send over HTTP/%d: the server got HTTP/%d, body %q, header %v", tt.proto, g.proto, g.body, g.h)
		}
	}
}

// FuzzFuzzRequest: a request FuzzRequest accepts can be sent by net/http's
// client (it builds and writes without error).
func FuzzFuzzRequest(f *testing.F) {
	f.Add("GET", "/metrics?a=b", "X-A: b\nConnection: X-A")
	f.Fuzz(func(t *testing.T, method, target, headers string) {
		r, ok := difftest.FuzzRequest(method, target, headers, "Bearer t")
		if !ok {
			return
		}
		req, err := http.NewRequest(r.Method, "http://proxy/", nil)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		req.URL.Opaque = "//proxy" + r.Target
		for _, h := range r.Header {
			req.Header[h[0]] = append(req.Header[h[0]], h[1])
		}
		if err := req.Write(new(strings.Builder)); err != nil {
			t.Fatalf("%s: %v", r, err)
		}
	})
}
