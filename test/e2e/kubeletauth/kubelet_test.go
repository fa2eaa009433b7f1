package kubeletauth_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/featuregate"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletserver "k8s.io/kubernetes/pkg/kubelet/server"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/httpauth"
)

const nodeName = "node-1"

var alice = &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}}

// paths is the corpus, as sent on the wire: every path the kubelet's
// attributes getter names, their subpaths, neighbours and case variants,
// query strings and trailing slashes, paths its mux would redirect, and
// encodings httpauth refuses.
var paths = []string{
	"/", "/x",
	"/metrics", "/metrics/", "/metrics/cadvisor", "/metrics/resource", "/metrics/probes", "/metricsx", "/Metrics", "/METRICS/cadvisor",
	"/stats", "/stats/", "/stats/summary", "/stats/container", "/statsx", "/Stats/summary",
	"/logs", "/logs/", "/logs/syslog", "/logs/a/b", "/logsx", "/Logs/",
	"/checkpoint", "/checkpoint/", "/checkpoint/ns/pod/c", "/checkpointx",
	"/statusz", "/statusz/", "/statusz/x", "/statuszx", "/Statusz",
	"/flagz", "/flagz/", "/flagz/x", "/flagzx",
	"/pods", "/pods/", "/pods/x", "/podsx", "/Pods",
	"/allocatedPods", "/allocatedPods/", "/allocatedPods/ns/name", "/allocatedpods", "/allocatedPodsx",
	"/runningpods", "/runningpods/", "/runningpods/x", "/runningPods", "/runningPods/", "/runningpodsx",
	"/healthz", "/healthz/", "/healthz/ping", "/healthz/syncloop", "/healthzx", "/HEALTHZ",
	"/configz", "/configz/", "/configzx", "/Configz",
	"/spec", "/spec/", "/specx",
	"/exec/ns/pod/c", "/exec/uid/ns/pod/c", "/attach/ns/pod/c", "/portForward/ns/pod", "/portforward/ns/pod",
	"/run/ns/pod/c", "/containerLogs/ns/pod/c", "/debug/pprof/", "/debug/pprof/heap", "/debug/flags/v", "/cri/exec/abc",
	"/readyz", "/livez", "/versions",
	// Query strings do not take part in the mapping.
	"/metrics?x=1", "/pods?limit=1", "/logs/?query=kubelet", "/healthz?verbose", "/exec/ns/pod/c?command=ls&stdout=1",
	// Paths the kubelet's mux redirects to their clean form.
	"//logs", "//logs/x", "//metrics//cadvisor", "/metrics/../logs/x", "/metrics/./../logs/", "/./pods", "/pods/../healthz",
	"/healthz/./", "/logs/x/..", "/../../metrics", "/stats/summary/../../configz",
	// Escapes: decoded when unambiguous, refused (400) otherwise.
	"/%6detrics", "/%70ods", "/logs/a%20b",
	"/metrics/%2e%2e/logs/x", "/metrics/%2E%2E/logs/x", "/metrics%2f..%2flogs", "/metrics/%252e%252e/logs", "/metrics/..;/logs",
	"/metrics/%C0%AE%C0%AE/logs/x", "/metrics%5c..%5clogs", "/healthz%2f..%2fexec/ns/pod/c", "/pods/%2e%2e/exec/ns/pod/c",
}

// methods: the five the kubelet maps to a verb, and others it does not.
var methods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE", "PROPFIND", "get", "Get", "post"}

func kubeletMaps(method string) bool {
	switch method {
	case "GET", "POST", "PUT", "PATCH", "DELETE":
		return true
	}
	return false
}

// attr is the part of an attribute set an authorizer decides on.
type attr struct {
	User                              string
	Verb                              string
	Namespace, APIGroup, APIVersion   string
	Resource, Subresource, Name, Path string
	ResourceRequest                   bool
}

func (a attr) String() string {
	return fmt.Sprintf("%s %s/%s %s (%s)", a.Verb, a.Resource, a.Subresource, a.Name, a.Path)
}

func toAttr(a authorizer.Attributes) attr {
	return attr{User: a.GetUser().GetName(), Verb: a.GetVerb(), Namespace: a.GetNamespace(), APIGroup: a.GetAPIGroup(),
		APIVersion: a.GetAPIVersion(), Resource: a.GetResource(), Subresource: a.GetSubresource(), Name: a.GetName(),
		Path: a.GetPath(), ResourceRequest: a.IsResourceRequest()}
}

func toAttrs(list []authorizer.Attributes) []attr {
	out := make([]attr, 0, len(list))
	for _, a := range list {
		out = append(out, toAttr(a))
	}
	return out
}

// recorder denies everything and records what it was asked, in order, so
// that every alternative (the kubelet's OR, httpauth's AnyOf) is asked.
type recorder struct {
	mu    sync.Mutex
	asked []attr
}

func (r *recorder) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, toAttr(a))
	return authorizer.DecisionNoOpinion, "recorded", nil
}

func (r *recorder) take() []attr {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.asked
	r.asked = nil
	return out
}

var asAlice = authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
	return &authenticator.Response{User: alice}, true, nil
})

// ours serves method target through httpauth with m and returns the status
// code and the attribute sets the authorizer was asked about.
func ours(t *testing.T, m httpauth.AttributesMapper, method, target string) (int, []attr) {
	t.Helper()
	rec := &recorder{}
	mw, err := httpauth.New(httpauth.Options{Authenticator: asAlice, Authorizer: rec, Attributes: m})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	req := httptest.NewRequest(method, "http://node"+target, nil)
	req.Header.Set("Authorization", "Bearer alice")
	mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, req)
	return w.Code, rec.take()
}

// theirs is what the kubelet's attributes getter returns for method on
// path, the path its mux lets through.
func theirs(getter kubeletserver.NodeRequestAttributesGetter, method, path, rawQuery string) []attr {
	r := httptest.NewRequest("GET", "http://node/", nil)
	r.Method = method
	r.URL.Path, r.URL.RawPath, r.URL.RawQuery = path, "", rawQuery
	return toAttrs(getter.GetRequestAttributes(context.Background(), alice, r))
}

// cleanOf returns httpauth's clean path for target and its query, or ok
// false when httpauth refuses it.
func cleanOf(t *testing.T, target string) (clean, query string, ok bool) {
	t.Helper()
	u, err := url.ParseRequestURI(target)
	if err != nil {
		t.Fatalf("corpus path %q: %v", target, err)
	}
	clean, err = httpauth.CleanPath(u.EscapedPath())
	return clean, u.RawQuery, err == nil
}

// TestKubeletAttributesConformance runs every path of the corpus with every
// method through httpauth's kubelet mappers and through the kubelet's own
// attributes getter (k8s.io/kubernetes v1.37.2), with the
// KubeletFineGrainedAuthz gate on (the kubelet's only mode since 1.36:
// KubeletFineGrained) and off (emulating 1.35: Kubelet). The attribute sets
// asked, in order, must be equal, except where httpauth differs on purpose
// (see httpauth.ResourceVerb and httpauth.CleanPath):
//
//   - HEAD: the kubelet asks with the empty verb, httpauth with "get";
//   - a method the kubelet has no verb for (OPTIONS, TRACE, lowercase
//     "get", ...): the kubelet asks with the empty verb, httpauth answers
//     405 without asking;
//   - a path httpauth refuses (ambiguous or invalid encodings): 400
//     without asking; for other paths the kubelet sees them as its mux has
//     cleaned them (TestKubeletServerConformance checks the mux).
func TestKubeletAttributesConformance(t *testing.T) {
	getter := kubeletserver.NewNodeAuthorizerAttributesGetter(types.NodeName(nodeName))
	for _, mode := range []struct {
		name   string
		gateOn bool
		mapper httpauth.AttributesMapper
	}{
		{name: "KubeletFineGrained, gate on (1.37 default)", gateOn: true, mapper: httpauth.KubeletFineGrained(nodeName)},
		{name: "Kubelet, gate off (emulating 1.35)", gateOn: false, mapper: httpauth.Kubelet(nodeName)},
	} {
		t.Run(mode.name, func(t *testing.T) {
			setFineGrained(t, mode.gateOn)
			var compared, refused int
			for _, target := range paths {
				clean, query, ok := cleanOf(t, target)
				for _, method := range methods {
					code, got := ours(t, mode.mapper, method, target)
					if !ok {
						refused++
						if code != http.StatusBadRequest || len(got) != 0 {
							t.Errorf("%s %s: httpauth = %d after asking %v; want 400 without asking", method, target, code, got)
						}
						continue
					}
					compared++
					want := theirs(getter, method, clean, query)
					switch {
					case kubeletMaps(method):
						if code != http.StatusForbidden || !slices.Equal(got, want) {
							t.Errorf("%s %s: httpauth = %d after asking %v; kubelet asks %v", method, target, code, got, want)
						}
					case method == "HEAD":
						for i := range want {
							if want[i].Verb != "" {
								t.Errorf("HEAD %s: the kubelet asks with verb %q; the documented difference assumes \"\"", target, want[i].Verb)
							}
							want[i].Verb = "get"
						}
						if code != http.StatusForbidden || !slices.Equal(got, want) {
							t.Errorf("HEAD %s: httpauth = %d after asking %v; want the kubelet's %v with verb get", target, code, got, want)
						}
					default:
						for _, a := range want {
							if a.Verb != "" {
								t.Errorf("%s %s: the kubelet asks with verb %q; the documented difference assumes \"\"", method, target, a.Verb)
							}
						}
						if code != http.StatusMethodNotAllowed || len(got) != 0 {
							t.Errorf("%s %s: httpauth = %d after asking %v; want 405 without asking", method, target, code, got)
						}
					}
				}
			}
			t.Logf("compared %d (method, path) pairs with the kubelet's getter; %d refused with 400", compared, refused)
		})
	}
}

// setFineGrained sets the kubelet's KubeletFineGrainedAuthz gate for the
// test. It is GA and locked on in 1.37, so turning it off emulates 1.35.
func setFineGrained(t *testing.T, on bool) {
	t.Helper()
	if !on {
		featuregatetesting.SetFeatureGateEmulationVersionDuringTest(t, utilfeature.DefaultFeatureGate, version.MustParse("1.35"))
	}
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.KubeletFineGrainedAuthz, on)
	if got := utilfeature.DefaultFeatureGate.Enabled(featuregate.Feature(features.KubeletFineGrainedAuthz)); got != on {
		t.Fatalf("KubeletFineGrainedAuthz = %v; want %v", got, on)
	}
}

// kubeletAuth is the kubelet's AuthInterface with the kubelet's own
// attributes getter, a fixed user and a recording authorizer.
type kubeletAuth struct {
	kubeletserver.NodeRequestAttributesGetter
	*recorder
	dynamiccertificates.CAContentProvider // unused without TLS
}

func (kubeletAuth) AuthenticateRequest(*http.Request) (*authenticator.Response, bool, error) {
	return &authenticator.Response{User: alice}, true, nil
}

// fakeHost is a kubelet HostInterface whose methods are never called: every
// request is denied before a handler runs.
type fakeHost struct{ kubeletserver.HostInterface }

// TestKubeletServerConformance sends every path of the corpus, exactly as
// written, to the kubelet's HTTP server (NewServer: go-restful behind
// net/http's mux, the auth filter in front of every handler) and to
// httpauth, and compares what each authorizes:
//
//   - a clean path: the kubelet asks what its getter says, and so does
//     httpauth (GET; the other methods are TestKubeletAttributesConformance);
//   - a path its mux cleans: the kubelet redirects to the clean path
//     without asking anything, and httpauth authorizes exactly that clean
//     path, so the two agree on what is served;
//   - a path httpauth refuses with 400: logged with what the kubelet does.
func TestKubeletServerConformance(t *testing.T) {
	setFineGrained(t, true)
	getter := kubeletserver.NewNodeAuthorizerAttributesGetter(types.NodeName(nodeName))
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Every handler installed, as on a kubelet with its debugging handlers on
	// (the default), so that as many paths as possible reach the filter.
	cfg := &kubeletconfig.KubeletConfiguration{EnableDebuggingHandlers: true, EnableSystemLogHandler: true, EnableSystemLogQuery: true,
		EnableProfilingHandler: true, EnableDebugFlagsHandler: true}
	kubelet := kubeletserver.NewServer(ctx, fakeHost{}, nil, nil, nil, kubeletAuth{NodeRequestAttributesGetter: getter, recorder: rec}, cfg)
	srv := httptest.NewServer(&kubelet)
	defer srv.Close()
	mapper := httpauth.KubeletFineGrained(nodeName)

	var authorized, redirected, unrouted, refused int
	defer func() {
		t.Logf("the kubelet server authorized %d corpus paths (compared), redirected %d, answered %d with 404 before its filter; httpauth refused %d with 400",
			authorized, redirected, unrouted, refused)
	}()
	for _, target := range paths {
		code, location := rawGet(t, srv.Listener.Addr().String(), target)
		asked := rec.take()
		clean, query, ok := cleanOf(t, target)
		ourCode, ourAsked := ours(t, mapper, "GET", target)
		switch {
		case !ok:
			refused++
			t.Logf("GET %s: httpauth 400; the kubelet answers %d %s after asking %v", target, code, location, asked)
		case code >= 300 && code < 400:
			redirected++
			// The mux redirects to the clean path, or to the clean path
			// with a slash when only the subtree ("/logs/") is registered.
			loc, err := url.Parse(location)
			if err != nil {
				t.Fatalf("GET %s: Location %q: %v", target, location, err)
			}
			if (loc.Path != clean && loc.Path != clean+"/") || loc.RawQuery != query || len(asked) != 0 {
				t.Errorf("GET %s: the kubelet redirects to %q after asking %v; want %q (or with a trailing slash) without asking", target, location, asked, clean)
			}
			if ourCode != http.StatusForbidden || !slices.Equal(ourAsked, theirs(getter, "GET", clean, query)) {
				t.Errorf("GET %s: httpauth = %d after asking %v; want the kubelet's attributes for %s", target, ourCode, ourAsked, clean)
			}
			if got, want := subresources(ourAsked), subresources(theirs(getter, "GET", loc.Path, query)); !slices.Equal(got, want) {
				t.Errorf("GET %s: httpauth authorizes %v; after the redirect to %s the kubelet authorizes %v", target, got, loc.Path, want)
			}
		default:
			if len(asked) == 0 {
				// Answered by the mux itself (404) before any filter:
				// nothing is served there.
				unrouted++
				t.Logf("GET %s: the kubelet answers %d without authorization", target, code)
			} else if authorized++; !slices.Equal(asked, theirs(getter, "GET", clean, query)) {
				t.Errorf("GET %s: the kubelet server asks %v; its getter says %v", target, asked, theirs(getter, "GET", clean, query))
			}
			if len(asked) > 0 && code != http.StatusForbidden {
				t.Errorf("GET %s: the kubelet answers %d after denying; want 403", target, code)
			}
			if ourCode != http.StatusForbidden || (len(asked) > 0 && !slices.Equal(ourAsked, asked)) {
				t.Errorf("GET %s: httpauth = %d after asking %v; the kubelet asks %v", target, ourCode, ourAsked, asked)
			}
		}
	}
}

func subresources(list []attr) []string {
	var out []string
	for _, a := range list {
		out = append(out, a.Subresource)
	}
	return out
}

// rawGet sends "GET target" on a new connection, without any client-side
// cleaning, and returns the status code and Location.
func rawGet(t *testing.T, addr, target string) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n", target); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

func init() {
	// The corpus must not carry spaces or other bytes the request line
	// cannot: each path goes on the wire as written.
	for _, p := range paths {
		if strings.ContainsAny(p, " \t\r\n") {
			panic("kubeletauth: corpus path with whitespace: " + p)
		}
	}
}

// TestKubeletIdentityConformance: the identity httpauth authorizes for a
// client certificate or a bearer token is the one the kubelet's own
// authentication stack gives the same credential (the kubelet's BuildAuthn,
// cmd/kubelet/app/auth.go, v1.37.2: k8s.io/apiserver's
// DelegatingAuthenticatorConfig with the client CA and the TokenReview
// webhook, anonymous off): name, UID, groups in order (system:authenticated
// added by its AuthenticatedGroupAdder, to certificate users too) and
// extras. It is what metricsproxy authorizes and, with --forward-identity,
// forwards.
func TestKubeletIdentityConformance(t *testing.T) {
	now := time.Now()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "client CA"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	// The TokenReviews of both go to an authtest API server, which answers
	// with the users as registered (a real one would add
	// system:authenticated to them itself).
	api := authtest.Start(t)
	for token, u := range map[string]*user.DefaultInfo{
		"token-no-groups":       {Name: "system:serviceaccount:ns:a", UID: "u-a", Extra: map[string][]string{"authentication.kubernetes.io/pod-name": {"p"}}},
		"token-team":            {Name: "b", Groups: []string{"team"}},
		"token-authenticated":   {Name: "c", Groups: []string{user.AllAuthenticated, "team"}},
		"token-unauthenticated": {Name: "d", Groups: []string{user.AllUnauthenticated}},
		"token-anonymous-name":  {Name: user.Anonymous},
	} {
		api.AddToken(token, u, nil, time.Time{})
	}
	cs, err := kubernetes.NewForConfig(api.Config())
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", caFile)
	if err != nil {
		t.Fatal(err)
	}
	kubelet, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                          &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                           2 * time.Minute,
		ClientCertificateCAContentProvider: clientCA,
		// genericoptions.DefaultAuthWebhookRetryBackoff(), written out: that
		// package brings etcd's client into the module.
		WebhookRetryBackoff:     &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5},
		TokenAccessReviewClient: cs.AuthenticationV1(),
	}.New()
	if err != nil {
		t.Fatal(err)
	}

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	certs, err := httpauth.NewClientCertAuthenticator(httpauth.ClientCertOptions{ClientCA: pool})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := authn.NewForConfig(api.Config(), authn.Options{AllowAPIServerAudience: true})
	if err != nil {
		t.Fatal(err)
	}
	var asked user.Info
	mw, err := httpauth.New(httpauth.Options{Authenticator: tokens, ClientCertificates: certs, Attributes: httpauth.KubeletFineGrained(nodeName),
		Authorizer: authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			asked = a.GetUser()
			return authorizer.DecisionAllow, "", nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	var requests []*http.Request
	for _, c := range []struct {
		cn     string
		groups []string
	}{
		{"system:kube-apiserver", nil}, {"prometheus", []string{"monitoring"}}, {"c", []string{user.AllAuthenticated}},
		{"d", []string{user.AllUnauthenticated}}, {user.Anonymous, nil}, {"system:node:" + nodeName, []string{user.NodesGroup}},
	} {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(len(requests) + 2)), Subject: pkix.Name{CommonName: c.cn, Organization: c.groups},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(der)
		r := httptest.NewRequest("GET", "https://node/metrics", nil)
		r.TLS = &tls.ConnectionState{HandshakeComplete: true, PeerCertificates: []*x509.Certificate{leaf}}
		requests = append(requests, r)
	}
	for _, token := range []string{"token-no-groups", "token-team", "token-authenticated", "token-unauthenticated", "token-anonymous-name"} {
		r := httptest.NewRequest("GET", "https://node/metrics", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		requests = append(requests, r)
	}
	for _, r := range requests {
		resp, ok, err := kubelet.AuthenticateRequest(r.Clone(r.Context()))
		if !ok || err != nil {
			t.Fatalf("the kubelet's authenticator: %v, %v", ok, err)
		}
		want := identity(resp.User)
		asked = nil
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK || asked == nil {
			t.Fatalf("httpauth: code %d, authorizer asked %v", w.Code, asked)
		}
		if got := identity(asked); !reflect.DeepEqual(got, want) {
			t.Errorf("httpauth authorizes %+v; the kubelet %+v", got, want)
		}
	}
}

// identity is the part of a user.Info an authorizer decides on.
func identity(u user.Info) user.DefaultInfo {
	return user.DefaultInfo{Name: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: u.GetExtra()}
}
