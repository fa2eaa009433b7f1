package main

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/reviewauth/reviewauth/authtest"
)

const (
	testAudience = "draproxy.example.com"
	driverSA     = "system:serviceaccount:dra:driver"
	driverUID    = "0b0e4c1e-0000-4000-8000-000000000007"
	// testDriver is the driver name dra/driver may publish (testDrivers).
	testDriver = "gpu.example.com"
	// otherSA is a second driver identity, bound to otherDriver.
	otherSA     = "system:serviceaccount:dra:other"
	otherDriver = "other.example.com"
)

// testDriverFlags are the --driver values of the tests: dra/driver
// publishes testDriver, dra/other otherDriver.
var testDriverFlags = []string{testDriver + "=dra/driver", otherDriver + "=dra/other"}

// testDrivers is testDriverFlags parsed.
func testDrivers() *drivers { return must(parseDrivers(testDriverFlags)) }

// otherOn is the identity of a token of the dra/other ServiceAccount bound
// to a pod on node.
func otherOn(node string) *user.DefaultInfo {
	u := driverOn(node)
	u.Name, u.UID = otherSA, "0b0e4c1e-0000-4000-8000-000000000008"
	return u
}

// driverOn is the identity the API server gives a token of the dra/driver
// ServiceAccount bound to pod driver-NODE on node (bound to no node when
// node is empty).
func driverOn(node string) *user.DefaultInfo {
	u := &user.DefaultInfo{
		Name:   driverSA,
		UID:    driverUID,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:dra", "system:authenticated"},
		Extra: map[string][]string{
			"authentication.kubernetes.io/credential-id": {"JTI=4f6d1c2e-" + node},
			"example.com/other":                          {"not forwarded"},
		},
	}
	if node != "" {
		u.Extra["authentication.kubernetes.io/node-name"] = []string{node}
		u.Extra["authentication.kubernetes.io/node-uid"] = []string{"uid-" + node}
		u.Extra["authentication.kubernetes.io/pod-name"] = []string{"driver-" + node}
		u.Extra["authentication.kubernetes.io/pod-uid"] = []string{"pod-uid-" + node}
	}
	return u
}

// driverRBAC is what a DRA driver's chart grants its ServiceAccount, plus
// deviceclasses for the --allow tests; dra/other has the same slice RBAC.
func driverRBAC() authtest.Policy {
	return authtest.Rules(
		authtest.Rule{Users: []string{driverSA, otherSA}, APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}},
		authtest.Rule{Users: []string{driverSA}, APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get", "list", "watch"}},
		authtest.Rule{Users: []string{driverSA}, APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Subresources: []string{"status"}, Verbs: []string{"update", "patch"}},
		authtest.Rule{Users: []string{driverSA}, APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list"}},
		authtest.Rule{Users: []string{driverSA}, APIGroups: []string{"resource.k8s.io"}, Resources: []string{"deviceclasses"}, Verbs: []string{"get", "list"}},
		authtest.Rule{Users: []string{driverSA}, APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
	)
}

// seen is a request the fake API server received.
type seen struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

// fakeAPI is a fake kube-apiserver for draproxy: authtest answers the
// reviews (reached through this server, as through one API server), and
// the server itself stores ResourceSlices, ResourceClaims, pods and nodes
// as JSON, lists them with field selectors and streams watch events. Every
// request must carry proxyToken: draproxy's own credential.
type fakeAPI struct {
	srv        *httptest.Server
	auth       *authtest.Server
	proxyToken string

	// fail, when not zero, is the status every resource request is
	// answered with; -1 drops the connection.
	fail atomic.Int32
	// fault, when set, may answer a resource request itself (returning
	// true) before the fake does: the fault tests' injections.
	fault atomic.Pointer[func(w http.ResponseWriter, r *http.Request, body []byte) bool]
	// uids numbers the UIDs of the objects the fake creates.
	uids atomic.Int64
	// noRecord stops recording requests (benchmarks).
	noRecord atomic.Bool
	// forwarded, when set, serves the requests that impersonate someone,
	// in any spelling, but draproxy's own reads (User-Agent "... (own
	// check)"): those draproxy forwards for a driver, in place of the
	// fake's own serve, which it calls in turn: the differential test's
	// difftest.Upstream.
	forwarded atomic.Pointer[http.Handler]
	// self is who draproxy's own credential is (the SelfSubjectReview's
	// answer): by default draproxy's ServiceAccount with a token bound to
	// its pod on node-a. Its node-name extra is the node it may
	// impersonate (associated-node).
	self atomic.Pointer[user.DefaultInfo]
	// denied are the verbs draproxy's RBAC lacks
	// (impersonate:associated-node, impersonate-on:associated-node:VERB),
	// for its SelfSubjectAccessReviews; the fake's impersonation itself
	// grants every verb.
	denied sync.Map
	// graphFrozen stops the Node authorizer's graph from following the
	// objects stored: the graph's lag behind a change, as the API server's
	// has, for a moment.
	graphFrozen atomic.Bool
	// noNodeAuthz skips the fake's model of constrained impersonation,
	// the Node authorizer and NodeRestriction: the benchmarks measure
	// draproxy against an upstream that does the same work for a proxied
	// request as for a direct one.
	noNodeAuthz atomic.Bool

	mu       sync.Mutex
	objects  map[string]map[string]any // API path -> object
	requests []seen
	watchers map[chan map[string]any]fields.Selector
	// The Node authorizer's graph: slice name -> node; pod namespace/name
	// -> its node and the claims it references.
	sliceGraph map[string]string
	podGraph   map[string]podVertex
}

// podVertex is a pod in the Node authorizer's graph.
type podVertex struct {
	node   string
	claims []string
}

// proxyUser is draproxy's ServiceAccount in the tests.
const proxyUser = "system:serviceaccount:dra-system:draproxy"

// proxyOn is draproxy's own identity with a token bound to its pod on
// node (bound to no pod when node is empty).
func proxyOn(node string) *user.DefaultInfo {
	u := &user.DefaultInfo{Name: proxyUser, UID: "uid-draproxy", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:dra-system", "system:authenticated"}, Extra: map[string][]string{}}
	if node != "" {
		u.Extra["authentication.kubernetes.io/node-name"] = []string{node}
		u.Extra["authentication.kubernetes.io/pod-name"] = []string{"draproxy-" + node}
	}
	return u
}

func startFakeAPI(t testing.TB) *fakeAPI {
	t.Helper()
	f := &fakeAPI{
		auth:       authtest.Start(t),
		proxyToken: "draproxy-own-token",
		objects:    map[string]map[string]any{},
		watchers:   map[chan map[string]any]fields.Selector{},
		sliceGraph: map[string]string{},
		podGraph:   map[string]podVertex{},
	}
	f.self.Store(proxyOn("node-a"))
	f.auth.SetPolicy(driverRBAC())
	authURL, err := url.Parse(f.auth.URL())
	if err != nil {
		t.Fatal(err)
	}
	authTransport, err := rest.TransportFor(f.auth.Config())
	if err != nil {
		t.Fatal(err)
	}
	reviews := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(authURL)
			pr.Out.Header.Del("Authorization") // authtest's admin token is added by its transport
		},
		Transport: authTransport,
	}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+f.proxyToken {
			writeJSON(w, http.StatusUnauthorized, status(http.StatusUnauthorized, "Unauthorized"))
			return
		}
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/selfsubjectreviews":
			f.selfSubjectReview(w)
			return
		case "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
			f.selfSubjectAccessReview(w, r)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/apis/authentication.k8s.io/") || strings.HasPrefix(r.URL.Path, "/apis/authorization.k8s.io/") {
			reviews.ServeHTTP(w, r)
			return
		}
		if impersonates(r.Header) && !f.noNodeAuthz.Load() {
			// Constrained impersonation, associated-node: the node of
			// draproxy's own token, its name alone.
			node := extraValue(f.self.Load(), "authentication.kubernetes.io/node-name")
			if v := r.Header.Values("Impersonate-User"); node == "" || len(v) != 1 || v[0] != nodeUserPrefix+node || !onlyImpersonateUser(r.Header) {
				writeJSON(w, http.StatusForbidden, status(http.StatusForbidden, fmt.Sprintf("users %q is forbidden: User %q cannot impersonate resource \"users\" in API group \"\" at the cluster scope", r.Header.Get("Impersonate-User"), f.self.Load().Name)))
				return
			}
			if fw := f.forwarded.Load(); fw != nil && !strings.HasSuffix(r.Header.Get("User-Agent"), "(own check)") {
				(*fw).ServeHTTP(w, r)
				return
			}
		}
		f.serve(w, r)
	}))
	f.srv.EnableHTTP2 = true
	f.srv.StartTLS()
	t.Cleanup(f.close)
	return f
}

// onlyImpersonateUser reports whether Impersonate-User is the only
// impersonation header of h, in any spelling.
func onlyImpersonateUser(h http.Header) bool {
	for k := range h {
		k = strings.ToLower(strings.ReplaceAll(k, "_", "-"))
		if strings.HasPrefix(k, "impersonate-") && k != "impersonate-user" {
			return false
		}
	}
	return true
}

// selfSubjectReview answers draproxy's SelfSubjectReview with f.self.
func (f *fakeAPI) selfSubjectReview(w http.ResponseWriter) {
	u := f.self.Load()
	writeJSON(w, http.StatusCreated, map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
		"status": map[string]any{"userInfo": map[string]any{"username": u.Name, "uid": u.UID, "groups": u.Groups, "extra": u.Extra}}})
}

// selfSubjectAccessReview answers draproxy's SelfSubjectAccessReviews:
// allowed unless the verb is in f.denied.
func (f *fakeAPI) selfSubjectAccessReview(w http.ResponseWriter, r *http.Request) {
	var ssar struct {
		Spec struct {
			ResourceAttributes struct {
				Verb string `json:"verb"`
			} `json:"resourceAttributes"`
		} `json:"spec"`
	}
	_ = json.NewDecoder(r.Body).Decode(&ssar)
	_, denied := f.denied.Load(ssar.Spec.ResourceAttributes.Verb)
	writeJSON(w, http.StatusCreated, map[string]any{"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "status": map[string]any{"allowed": !denied}})
}

// impersonates reports whether h has an Impersonate-* header, in any
// case, '_' read as '-'.
func impersonates(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(strings.ToLower(strings.ReplaceAll(k, "_", "-")), "impersonate-") {
			return true
		}
	}
	return false
}

func (f *fakeAPI) close() {
	f.mu.Lock()
	for ch := range f.watchers {
		close(ch)
		delete(f.watchers, ch)
	}
	f.mu.Unlock()
	f.srv.Close()
}

// config is the API server with draproxy's own credential.
func (f *fakeAPI) config() *rest.Config {
	return &rest.Config{
		Host:            f.srv.URL,
		BearerToken:     f.proxyToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: certPEM(f.srv)},
	}
}

// writeKubeconfig writes config() as a kubeconfig file and returns its path.
func (f *fakeAPI) writeKubeconfig(t testing.TB) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["fake"] = &clientcmdapi.Cluster{Server: f.srv.URL, CertificateAuthorityData: certPEM(f.srv)}
	cfg.AuthInfos["draproxy"] = &clientcmdapi.AuthInfo{Token: f.proxyToken}
	cfg.Contexts["fake"] = &clientcmdapi.Context{Cluster: "fake", AuthInfo: "draproxy"}
	cfg.CurrentContext = "fake"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// token mints a token for u with draproxy's audience.
func (f *fakeAPI) token(u user.Info) string {
	return f.auth.MintToken(u, []string{testAudience}, time.Now().Add(time.Hour))
}

// seen returns the requests received so far (reviews excluded) and forgets
// them.
func (f *fakeAPI) seen() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.requests
	f.requests = nil
	return s
}

// count returns how many of the requests received so far (not forgotten)
// match method and path.
func (f *fakeAPI) count(method, path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.requests {
		if s.Method == method && s.Path == path {
			n++
		}
	}
	return n
}

func slicePath(name string) string {
	return "/apis/resource.k8s.io/v1/resourceslices/" + name
}

// addSlice stores a ResourceSlice of node (none when empty) for
// testDriver, with the UID uid-NAME.
func (f *fakeAPI) addSlice(name, node string) {
	f.addSliceOf(name, node, testDriver, "uid-"+name)
}

// addSliceOf stores a ResourceSlice of node (none when empty) for driver,
// with uid.
func (f *fakeAPI) addSliceOf(name, node, driver, uid string) {
	spec := map[string]any{"driver": driver, "pool": map[string]any{"name": "pool", "generation": 1, "resourceSliceCount": 1}}
	if node != "" {
		spec["nodeName"] = node
	}
	f.put(slicePath(name), map[string]any{
		"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
		"metadata": map[string]any{"name": name, "uid": uid, "resourceVersion": "1"},
		"spec":     spec,
	})
}

// get returns a copy of the object stored at path, nil if none.
func (f *fakeAPI) get(path string) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	obj, ok := f.objects[path]
	if !ok {
		return nil
	}
	b, _ := json.Marshal(obj)
	var c map[string]any
	_ = json.Unmarshal(b, &c)
	return c
}

// remove deletes the object stored at path, as another actor would.
func (f *fakeAPI) remove(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if obj, ok := f.objects[path]; ok {
		delete(f.objects, path)
		f.graphLocked(obj, true)
		f.notifyLocked("DELETED", obj)
	}
}

// sliceNode returns the spec.nodeName and UID of the slice name as
// stored ("" and "" when there is none).
func (f *fakeAPI) sliceNode(name string) (node, uid string) {
	obj := f.get(slicePath(name))
	if obj == nil {
		return "", ""
	}
	spec, _ := obj["spec"].(map[string]any)
	md, _ := obj["metadata"].(map[string]any)
	node, _ = spec["nodeName"].(string)
	uid, _ = md["uid"].(string)
	return node, uid
}

// installAdmission stores, for each identity in ids (NAMESPACE/NAME ->
// DRIVER[,DRIVER...]), a copy of the admission policy draproxy ships
// (deploy/driver/admission-policy.yaml) with its values, as its driver
// part renders it (named after the identity), and its binding.
func (f *fakeAPI) installAdmission(t testing.TB, ids map[string]string) {
	t.Helper()
	for id, drivers := range ids {
		ns, sa, _ := strings.Cut(id, "/")
		pol, bind := renderedAdmission(t, ns, sa, drivers, "")
		for _, o := range []struct {
			path string
			obj  any
		}{
			{policiesPath + "/" + pol.Name, pol},
			{bindingsPath + "/" + bind.Name, bind},
		} {
			b, _ := json.Marshal(o.obj)
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			m["metadata"].(map[string]any)["uid"] = fmt.Sprintf("uid-%d", f.uids.Add(1))
			f.put(o.path, m)
		}
	}
}

const (
	policiesPath = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
	bindingsPath = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
)

// renderedAdmission is the policy and binding of
// deploy/driver/admission-policy.yaml as kustomize renders them for the
// ServiceAccount ns/sa publishing drivers and exempting exempt: its
// values written into the value variables, named after the identity.
func renderedAdmission(t testing.TB, ns, sa, drivers, exempt string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	pol, bind, err := shippedAdmission()
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range []string{ns, sa, drivers, exempt} {
		_, rest, _ := cutLiteral(pol.Spec.Variables[i].Expression)
		pol.Spec.Variables[i].Expression = `"` + v + `"` + rest
	}
	name := pol.Name + "-" + ns + "-" + sa
	pol.Name, bind.Name, bind.Spec.PolicyName = name, name, name
	pol.APIVersion, pol.Kind = "admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"
	bind.APIVersion, bind.Kind = "admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"
	return pol, bind
}

// testIdentities are the identities of the tests, as installAdmission
// takes them.
var testIdentities = map[string]string{"dra/driver": testDriver, "dra/other": otherDriver}

func claimPath(ns, name string) string {
	return "/apis/resource.k8s.io/v1/namespaces/" + ns + "/resourceclaims/" + name
}

// addClaim stores the ResourceClaim ns/name reserved for the pods named
// (name/uid pairs).
func (f *fakeAPI) addClaim(ns, name string, reservedFor ...[2]string) {
	var res []any
	for _, p := range reservedFor {
		res = append(res, map[string]any{"resource": "pods", "name": p[0], "uid": p[1]})
	}
	f.put(claimPath(ns, name), map[string]any{
		"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": "uid-" + name},
		"status":   map[string]any{"reservedFor": res},
	})
}

func podPath(ns, name string) string { return "/api/v1/namespaces/" + ns + "/pods/" + name }

// addPod stores the pod ns/name with uid on node (unscheduled when
// empty), referencing the ResourceClaims claims (spec.resourceClaims,
// which the Node authorizer's graph follows).
func (f *fakeAPI) addPod(ns, name, uid, node string, claims ...string) {
	var refs []any
	for _, c := range claims {
		refs = append(refs, map[string]any{"name": c, "resourceClaimName": c})
	}
	f.put(podPath(ns, name), map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": uid},
		"spec":     map[string]any{"nodeName": node, "resourceClaims": refs},
	})
}

// addNode stores the Node name.
func (f *fakeAPI) addNode(name string) {
	f.put("/api/v1/nodes/"+name, map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": name, "uid": "uid-" + name}})
}

func (f *fakeAPI) put(path string, obj map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.objects[path] = obj
	f.graphLocked(obj, false)
	f.notifyLocked("ADDED", obj)
}

// graphLocked updates the Node authorizer's graph for obj, stored or
// (deleted) gone, unless the graph is frozen.
func (f *fakeAPI) graphLocked(obj map[string]any, deleted bool) {
	if f.graphFrozen.Load() {
		return
	}
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	spec, _ := obj["spec"].(map[string]any)
	node, _ := spec["nodeName"].(string)
	switch kind, _ := obj["kind"].(string); {
	case kind == "ResourceSlice" && deleted:
		delete(f.sliceGraph, name)
	case kind == "ResourceSlice" && node != "":
		f.sliceGraph[name] = node
	case kind == "ResourceSlice":
		delete(f.sliceGraph, name)
	case kind == "Pod" && (deleted || node == ""):
		delete(f.podGraph, ns+"/"+name)
	case kind == "Pod":
		v := podVertex{node: node}
		refs, _ := spec["resourceClaims"].([]any)
		for _, ref := range refs {
			m, _ := ref.(map[string]any)
			if c, _ := m["resourceClaimName"].(string); c != "" {
				v.claims = append(v.claims, c)
			}
		}
		f.podGraph[ns+"/"+name] = v
	}
}

// nodeAuthorize is the Node authorizer and the NodeRestriction admission
// plugin for a request of node (as the fake models them: slices, claims,
// pods, nodes; anything else passes): a refusal to write, or "" to serve
// the request.
func (f *fakeAPI) nodeAuthorize(r *http.Request, body []byte, node string) string {
	const slices = "/apis/resource.k8s.io/v1/resourceslices"
	p := r.URL.Path
	noEdge := func() string {
		return fmt.Sprintf("User %q cannot %s %s: no relationship found between node %q and this object", nodeUserPrefix+node, r.Method, p, node)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case p == slices && r.Method == http.MethodPost:
		var obj struct {
			Spec struct {
				NodeName *string `json:"nodeName"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(body, &obj); err != nil || obj.Spec.NodeName == nil || *obj.Spec.NodeName != node {
			return "can only create ResourceSlice with the same NodeName as the requesting node"
		}
	case p == slices:
		sel, err := fields.ParseSelector(r.URL.Query().Get("fieldSelector"))
		if err != nil {
			return err.Error()
		}
		for _, req := range sel.Requirements() {
			if req.Field == "spec.nodeName" && req.Operator == "=" && req.Value == node {
				return ""
			}
		}
		return "can only list/watch/deletecollection resourceslices with nodeName field selector"
	case strings.HasPrefix(p, slices+"/"):
		if f.sliceGraph[strings.TrimPrefix(p, slices+"/")] != node {
			return noEdge()
		}
	case strings.HasPrefix(p, "/apis/resource.k8s.io/v1/namespaces/") && strings.Contains(p, "/resourceclaims/"):
		rest := strings.TrimPrefix(p, "/apis/resource.k8s.io/v1/namespaces/")
		ns, name, _ := strings.Cut(rest, "/resourceclaims/")
		if r.Method != http.MethodGet || strings.Contains(name, "/") {
			return "can only get individual resources of this type"
		}
		for key, v := range f.podGraph {
			if strings.HasPrefix(key, ns+"/") && v.node == node && slicesContains(v.claims, name) {
				return ""
			}
		}
		return noEdge()
	case strings.HasPrefix(p, "/api/v1/namespaces/") && strings.Contains(p, "/pods/"):
		rest := strings.TrimPrefix(p, "/api/v1/namespaces/")
		ns, name, _ := strings.Cut(rest, "/pods/")
		if r.Method != http.MethodGet || f.podGraph[ns+"/"+name].node != node {
			return noEdge()
		}
	case strings.HasPrefix(p, "/api/v1/nodes"):
		if r.Method != http.MethodGet || p != "/api/v1/nodes/"+node {
			return fmt.Sprintf("node %q cannot read %q, only its own Node object", node, p)
		}
	}
	return ""
}

func slicesContains(s []string, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}

func (f *fakeAPI) notifyLocked(typ string, obj map[string]any) {
	if kind, _ := obj["kind"].(string); kind != "ResourceSlice" {
		return
	}
	for ch, sel := range f.watchers {
		if sel.Matches(sliceFields(obj)) {
			select {
			case ch <- map[string]any{"type": typ, "object": obj}:
			default: // a slow watcher misses events; tests read promptly
			}
		}
	}
}

func sliceFields(obj map[string]any) fields.Set {
	spec, _ := obj["spec"].(map[string]any)
	node, _ := spec["nodeName"].(string)
	driver, _ := spec["driver"].(string)
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	return fields.Set{"spec.nodeName": node, "spec.driver": driver, "metadata.name": name}
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if !f.noRecord.Load() {
		f.mu.Lock()
		f.requests = append(f.requests, seen{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
		f.mu.Unlock()
	}
	if fault := f.fault.Load(); fault != nil && (*fault)(w, r, body) {
		return
	}
	switch code := f.fail.Load(); {
	case code == -1:
		panic(http.ErrAbortHandler) // drops the connection
	case code != 0:
		w.Header().Set("Retry-After", "3")
		writeJSON(w, int(code), status(int(code), "injected failure"))
		return
	}
	if u, ok := strings.CutPrefix(r.Header.Get("Impersonate-User"), nodeUserPrefix); ok && !f.noNodeAuthz.Load() {
		if why := f.nodeAuthorize(r, body, u); why != "" {
			writeJSON(w, http.StatusForbidden, status(http.StatusForbidden, why))
			return
		}
	}

	p := r.URL.Path
	const slices = "/apis/resource.k8s.io/v1/resourceslices"
	switch {
	case p == slices && r.Method == http.MethodGet:
		sel, err := fields.ParseSelector(r.URL.Query().Get("fieldSelector"))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, status(http.StatusBadRequest, err.Error()))
			return
		}
		if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
			f.watch(w, r, sel)
			return
		}
		f.mu.Lock()
		items := []any{}
		for k, obj := range f.objects {
			if strings.HasPrefix(k, slices+"/") && sel.Matches(sliceFields(obj)) {
				items = append(items, listItem(obj))
			}
		}
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList", "metadata": map[string]any{"resourceVersion": "1"}, "items": items})
	case p == slices && r.Method == http.MethodPost:
		var obj map[string]any
		if err := json.Unmarshal(body, &obj); err != nil {
			writeJSON(w, http.StatusBadRequest, status(http.StatusBadRequest, err.Error()))
			return
		}
		md, _ := obj["metadata"].(map[string]any)
		if md == nil {
			md = map[string]any{}
			obj["metadata"] = md
		}
		name, _ := md["name"].(string)
		if name == "" {
			gen, _ := md["generateName"].(string)
			name = fmt.Sprintf("%s%d", gen, time.Now().UnixNano())
			md["name"] = name
		}
		md["uid"] = fmt.Sprintf("uid-created-%d", f.uids.Add(1))
		f.put(slices+"/"+name, obj)
		writeJSON(w, http.StatusCreated, obj)
	case p == slices && r.Method == http.MethodDelete: // deletecollection, by field selector
		sel, err := fields.ParseSelector(r.URL.Query().Get("fieldSelector"))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, status(http.StatusBadRequest, err.Error()))
			return
		}
		f.mu.Lock()
		items := []any{}
		for k, obj := range f.objects {
			if strings.HasPrefix(k, slices+"/") && sel.Matches(sliceFields(obj)) {
				delete(f.objects, k)
				f.graphLocked(obj, true)
				f.notifyLocked("DELETED", obj)
				items = append(items, obj)
			}
		}
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList", "items": items})
	case (p == policiesPath || p == bindingsPath) && r.Method == http.MethodGet:
		kind := "ValidatingAdmissionPolicyList"
		if p == bindingsPath {
			kind = "ValidatingAdmissionPolicyBindingList"
		}
		f.mu.Lock()
		items := []any{}
		for k, obj := range f.objects {
			if strings.HasPrefix(k, p+"/") {
				items = append(items, listItem(obj))
			}
		}
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": map[string]any{}, "items": items})
	default:
		f.serveObject(w, r, strings.TrimSuffix(p, "/status"), body)
	}
}

// listItem is obj as the API server writes it in a list: without kind
// and apiVersion.
func listItem(obj map[string]any) map[string]any {
	item := make(map[string]any, len(obj))
	for k, v := range obj {
		if k != "kind" && k != "apiVersion" {
			item[k] = v
		}
	}
	return item
}

// serveObject serves a request for the object at key as the API server
// does, enforcing UID preconditions: metadata.uid in an update, a merge,
// strategic merge or apply patch; a leading test of /metadata/uid in a
// JSON patch; preconditions.uid in DeleteOptions. A PUT or a patch but an
// apply of a missing object is 404; an apply of one creates it. Patches
// are merged (apply and strategic merge as merge patches; JSON patches
// change nothing but the test). A patch's type is read as the API
// server's patch handler reads it (patchType).
func (f *fakeAPI) serveObject(w http.ResponseWriter, r *http.Request, key string, body []byte) {
	conflict := func(want, have string) {
		writeJSON(w, http.StatusConflict, status(http.StatusConflict, fmt.Sprintf("Precondition failed: UID in precondition: %s, UID in object meta: %s", want, have)))
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if r.Method == http.MethodPatch {
		var ok bool
		if ct, ok = patchType(r.Header); !ok {
			writeJSON(w, http.StatusUnsupportedMediaType, status(http.StatusUnsupportedMediaType, fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s, %s", mediaJSONPatch, mediaMergePatch, mediaStrategicPatch, mediaApplyYAML)))
			return
		}
	}
	var doc map[string]any
	var uidPre string
	switch {
	case r.Method == http.MethodPatch && ct == mediaJSONPatch:
		var ops []map[string]any
		if err := json.Unmarshal(body, &ops); err != nil {
			writeJSON(w, http.StatusBadRequest, status(http.StatusBadRequest, err.Error()))
			return
		}
		if len(ops) > 0 && ops[0]["op"] == "test" && ops[0]["path"] == "/metadata/uid" {
			uidPre, _ = ops[0]["value"].(string)
		}
	case r.Method == http.MethodPut || r.Method == http.MethodPatch || (r.Method == http.MethodDelete && len(body) > 0):
		if err := json.Unmarshal(body, &doc); err != nil {
			writeJSON(w, http.StatusBadRequest, status(http.StatusBadRequest, err.Error()))
			return
		}
		if r.Method == http.MethodDelete {
			pre, _ := doc["preconditions"].(map[string]any)
			uidPre, _ = pre["uid"].(string)
		} else {
			md, _ := doc["metadata"].(map[string]any)
			uidPre, _ = md["uid"].(string)
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	obj, ok := f.objects[key]
	have := ""
	if ok {
		md, _ := obj["metadata"].(map[string]any)
		have, _ = md["uid"].(string)
	}
	switch {
	case r.Method == http.MethodGet:
		if !ok {
			writeJSON(w, http.StatusNotFound, status(http.StatusNotFound, "not found"))
			return
		}
		writeJSON(w, http.StatusOK, obj)
		return
	case !ok && r.Method == http.MethodPatch && ct == mediaApplyYAML && uidPre == "":
		md, _ := doc["metadata"].(map[string]any)
		if md == nil {
			md = map[string]any{}
			doc["metadata"] = md
		}
		md["uid"] = fmt.Sprintf("uid-created-%d", f.uids.Add(1))
		f.objects[key] = doc
		f.graphLocked(doc, false)
		f.notifyLocked("ADDED", doc)
		writeJSON(w, http.StatusCreated, doc)
		return
	case !ok && uidPre != "" && r.Method == http.MethodPatch && ct == mediaApplyYAML:
		conflict(uidPre, "")
		return
	case !ok:
		writeJSON(w, http.StatusNotFound, status(http.StatusNotFound, "not found"))
		return
	case uidPre != "" && uidPre != have:
		conflict(uidPre, have)
		return
	}
	if node, ok := strings.CutPrefix(r.Header.Get("Impersonate-User"), nodeUserPrefix); ok && r.Method == http.MethodDelete {
		// NodeRestriction, after the preconditions (as the storage
		// checks them before admission's validation of a delete).
		if spec, _ := obj["spec"].(map[string]any); spec["nodeName"] != node {
			writeJSON(w, http.StatusForbidden, status(http.StatusForbidden, "can only delete ResourceSlice with the same NodeName as the requesting node"))
			return
		}
	}
	switch r.Method {
	case http.MethodDelete:
		delete(f.objects, key)
		f.graphLocked(obj, true)
		f.notifyLocked("DELETED", obj)
	case http.MethodPut:
		md, _ := doc["metadata"].(map[string]any)
		if md == nil {
			md = map[string]any{}
			doc["metadata"] = md
		}
		md["uid"] = have
		f.objects[key], obj = doc, doc
		f.graphLocked(doc, false)
		f.notifyLocked("MODIFIED", doc)
	case http.MethodPatch:
		if doc != nil {
			mergeInto(obj, doc)
			f.notifyLocked("MODIFIED", obj)
		}
	}
	writeJSON(w, http.StatusOK, obj)
}

// patchType is the type of a patch with header h as the API server's
// patch handler reads it (k8s.io/apiserver v0.37.2,
// pkg/endpoints/handlers/patch.go): the first Content-Type, cut at its
// first ';' (unless that is its first byte), compared exactly, case
// included, with the patch types it serves; false for any other.
func patchType(h http.Header) (string, bool) {
	ct := h.Get("Content-Type")
	if i := strings.Index(ct, ";"); i > 0 {
		ct = ct[:i]
	}
	switch ct {
	case mediaJSONPatch, mediaMergePatch, mediaStrategicPatch, mediaApplyYAML, mediaApplyCBOR:
		return ct, true
	}
	return ct, false
}

// mergeInto merges patch into obj as a JSON merge patch does.
func mergeInto(obj, patch map[string]any) {
	for k, v := range patch {
		pm, isMap := v.(map[string]any)
		om, objMap := obj[k].(map[string]any)
		switch {
		case v == nil:
			delete(obj, k)
		case isMap && objMap:
			mergeInto(om, pm)
		default:
			obj[k] = v
		}
	}
}

// watch streams the events of slices matching sel until the request ends.
func (f *fakeAPI) watch(w http.ResponseWriter, r *http.Request, sel fields.Selector) {
	ch := make(chan map[string]any, 64)
	f.mu.Lock()
	f.watchers[ch] = sel
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		if _, ok := f.watchers[ch]; ok {
			delete(f.watchers, ch)
		}
		f.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-ch:
			if !ok {
				return
			}
			b, _ := json.Marshal(ev)
			if _, err := w.Write(append(b, '\n')); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}

func status(code int, msg string) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code, "message": msg}
}

// writeJSON writes v with its Content-Length, as an API server writes an
// object (a watch stream has none).
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func certPEM(s *httptest.Server) []byte {
	return pemEncode(s.Certificate().Raw)
}

// writeToken writes token where a projected volume would put it.
func writeToken(t testing.TB, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func pemEncode(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// fault is one way the link to the API server, or the API server itself,
// fails a request: answers that are not the object asked for, answers
// that never come or never end.
type fault struct {
	name string
	// serve answers r; arrived is closed once it has the request.
	serve func(w http.ResponseWriter, r *http.Request, arrived func())
	// hangs: the answer (or its end) never comes; draproxy's deadline
	// must end the request.
	hangs bool
	// partial: the answer's status and part of its body were sent.
	partial bool
}

// faults is the catalog of fault tests. foreign is another object of
// node-a the API server might be confused into answering with.
func faults(foreign map[string]any) []fault {
	answer := func(v any) func(w http.ResponseWriter, r *http.Request, arrived func()) {
		return func(w http.ResponseWriter, _ *http.Request, arrived func()) {
			arrived()
			writeJSON(w, http.StatusOK, v)
		}
	}
	return []fault{
		{name: "empty object", serve: answer(map[string]any{})},
		{name: "empty body", serve: func(w http.ResponseWriter, _ *http.Request, arrived func()) {
			arrived()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
		}},
		{name: "Status with 200", serve: answer(status(http.StatusOK, "all is well"))},
		{name: "Status of failure with 200", serve: answer(status(http.StatusNotFound, "not found"))},
		{name: "foreign object", serve: answer(foreign)},
		{name: "not JSON", serve: func(w http.ResponseWriter, _ *http.Request, arrived func()) {
			arrived()
			w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("k8s\x00\x0a\x0b"))
		}},
		{name: "connection dropped", serve: func(_ http.ResponseWriter, _ *http.Request, arrived func()) {
			arrived()
			panic(http.ErrAbortHandler)
		}},
		{name: "truncated", partial: true, serve: func(w http.ResponseWriter, _ *http.Request, arrived func()) {
			arrived()
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSli`))
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}},
		{name: "hang", hangs: true, serve: func(_ http.ResponseWriter, r *http.Request, arrived func()) {
			arrived()
			<-r.Context().Done()
		}},
		{name: "slow body", hangs: true, partial: true, serve: func(w http.ResponseWriter, r *http.Request, arrived func()) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"apiVersion":"resource.k8s.io/v1",`))
			_ = http.NewResponseController(w).Flush()
			arrived()
			<-r.Context().Done()
		}},
	}
}

// inject makes the fake answer the requests match selects with fl, and
// returns a channel that receives once per such request, when it has
// arrived (and, for a fault that hangs, is waiting).
func (f *fakeAPI) inject(fl fault, match func(r *http.Request) bool) <-chan struct{} {
	arrivals := make(chan struct{}, 16)
	hook := func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if !match(r) {
			return false
		}
		fl.serve(w, r, func() { arrivals <- struct{}{} })
		return true
	}
	f.fault.Store(&hook)
	return arrivals
}

// openFDs counts this process's open file descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("counting file descriptors: %v", err)
	}
	return len(entries)
}
