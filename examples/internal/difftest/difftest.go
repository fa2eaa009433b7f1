// Package difftest is the differential test of the example proxies: for
// a corpus of requests (hand-written and fuzzed: hop-by-hop header names,
// header spellings and duplicates, encoded paths, multi-value queries),
// what the upstream actually received, read back into authorization
// attributes and an identity as an upstream may read it, must equal what
// was authorized for that request: the attribute sets the authorizer
// allowed and the user they were allowed for. A request that was not
// allowed must not reach the upstream at all.
//
// A proxy's test supplies three things: a [Recorder] between its
// authorizer and the proxy (an authtest.Policy, or any
// authorizer.Authorizer), an [Upstream] in front of what the proxy
// forwards to, and a function that reads a received request back into a
// [Decision] as its upstream would (the proxy's own mapping rules over the
// received path, query and headers, and its identity headers:
// [FrontProxyUser] for X-Remote-*, [ImpersonatedUser] for Impersonate-*).
// [Check] then sends each [Request] and compares. Headers are read back
// through [Lenient], as an upstream that reads '_' as '-' (CGI, WSGI,
// nginx with underscores_in_headers) and ignores case would read them, so
// that a header authorized in one spelling and forwarded in another is a
// difference.
//
// It is used by examples/rbacproxy and examples/metricsproxy, and by
// examples/draproxy, which forwards without httputil.ReverseProxy, tells
// the API server the identity with ImpersonatedUser's headers, sends
// request bodies ([Request].Body) and passes on whatever the API server
// answers ([Proxy].PassesAnswers).
package difftest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/authtest"
)

// Attributes is one attribute set an authorizer decides on, without the
// user, as a comparable value.
type Attributes struct {
	Verb                              string
	Namespace, APIGroup, APIVersion   string
	Resource, Subresource, Name, Path string
	ResourceRequest                   bool
	// FieldSelector and LabelSelector are the requirements a
	// SubjectAccessReview carries, as "key Op v1,v2" joined by "; ".
	FieldSelector, LabelSelector string
}

// User is the identity an upstream is told, as apiserver's user.Info.
type User struct {
	Name, UID string
	Groups    []string
	Extra     map[string][]string
}

// UserOf returns u as a User (nil for nil); empty groups and extras are nil.
func UserOf(u user.Info) *User {
	if u == nil {
		return nil
	}
	out := &User{Name: u.GetName(), UID: u.GetUID(), Groups: slices.Clone(u.GetGroups())}
	if len(out.Groups) == 0 {
		out.Groups = nil
	}
	for k, v := range u.GetExtra() {
		if out.Extra == nil {
			out.Extra = map[string][]string{}
		}
		out.Extra[k] = slices.Clone(v)
	}
	return out
}

// Decision is what was authorized for one request, or what a received
// request says was: the user, and the attribute sets, sorted, without
// repeats.
type Decision struct {
	User       *User
	Attributes []Attributes
}

// Normalize sorts the attribute sets and drops repeats.
func (d *Decision) Normalize() {
	slices.SortFunc(d.Attributes, func(a, b Attributes) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	d.Attributes = slices.Compact(d.Attributes)
}

// AttributesOf returns a as Attributes, as a SubjectAccessReview carries
// them: a resource request without its path.
func AttributesOf(a authorizer.Attributes) Attributes {
	if !a.IsResourceRequest() {
		return Attributes{Verb: a.GetVerb(), Path: a.GetPath()}
	}
	out := Attributes{Verb: a.GetVerb(), Namespace: a.GetNamespace(), APIGroup: a.GetAPIGroup(), APIVersion: a.GetAPIVersion(),
		Resource: a.GetResource(), Subresource: a.GetSubresource(), Name: a.GetName(), ResourceRequest: true}
	var parts []string
	if reqs, err := a.GetFieldSelector(); err == nil {
		for _, r := range reqs {
			parts = append(parts, requirement(r.Field, selectorOp(r.Operator), []string{r.Value}))
		}
	}
	out.FieldSelector = joinSorted(parts)
	parts = nil
	if reqs, err := a.GetLabelSelector(); err == nil {
		for _, r := range reqs {
			parts = append(parts, requirement(r.Key(), selectorOp(r.Operator()), r.ValuesUnsorted()))
		}
	}
	out.LabelSelector = joinSorted(parts)
	return out
}

// selectorOp is the operator of a SubjectAccessReview's selector
// requirement for a selector's operator.
func selectorOp(op selection.Operator) string {
	switch op {
	case selection.Equals, selection.DoubleEquals, selection.In:
		return string(metav1.LabelSelectorOpIn)
	case selection.NotEquals, selection.NotIn:
		return string(metav1.LabelSelectorOpNotIn)
	}
	return string(op)
}

// requirement is one selector requirement as text: "key Op v1,v2".
func requirement(key, op string, values []string) string {
	values = slices.Clone(values)
	slices.Sort(values)
	return key + " " + op + " " + strings.Join(values, ",")
}

func joinSorted(parts []string) string {
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// FromSAR returns the user and attributes of a SubjectAccessReview spec.
func FromSAR(spec authorizationv1.SubjectAccessReviewSpec) (*User, Attributes) {
	u := &User{Name: spec.User, UID: spec.UID, Groups: slices.Clone(spec.Groups)}
	if len(u.Groups) == 0 {
		u.Groups = nil
	}
	for k, v := range spec.Extra {
		if u.Extra == nil {
			u.Extra = map[string][]string{}
		}
		u.Extra[k] = slices.Clone(v)
	}
	var a Attributes
	if ra := spec.ResourceAttributes; ra != nil {
		a = Attributes{Verb: ra.Verb, Namespace: ra.Namespace, APIGroup: ra.Group, APIVersion: ra.Version, Resource: ra.Resource,
			Subresource: ra.Subresource, Name: ra.Name, ResourceRequest: true}
		var parts []string
		if fs := ra.FieldSelector; fs != nil {
			for _, r := range fs.Requirements {
				parts = append(parts, requirement(r.Key, string(r.Operator), r.Values))
			}
		}
		a.FieldSelector = joinSorted(parts)
		parts = nil
		if ls := ra.LabelSelector; ls != nil {
			for _, r := range ls.Requirements {
				parts = append(parts, requirement(r.Key, string(r.Operator), r.Values))
			}
		}
		a.LabelSelector = joinSorted(parts)
	}
	if nra := spec.NonResourceAttributes; nra != nil {
		a = Attributes{Verb: nra.Verb, Path: nra.Path}
	}
	return u, a
}

// Recorder records what was allowed, between an authorizer and the proxy.
// It is safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	user    []*User
	allowed []Attributes
}

// Policy wraps an authtest policy: every SubjectAccessReview it allows is
// recorded.
func (r *Recorder) Policy(p authtest.Policy) authtest.Policy {
	return func(spec authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
		allowed, denied, reason, evalErr := p(spec)
		if allowed && !denied && evalErr == "" {
			u, a := FromSAR(spec)
			r.record(u, a)
		}
		return allowed, denied, reason, evalErr
	}
}

// Authorizer wraps an authorizer: every attribute set it allows without an
// error is recorded.
func (r *Recorder) Authorizer(az authorizer.Authorizer) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		d, reason, err := az.Authorize(ctx, a)
		if d == authorizer.DecisionAllow && err == nil {
			r.record(UserOf(a.GetUser()), AttributesOf(a))
		}
		return d, reason, err
	})
}

func (r *Recorder) record(u *User, a Attributes) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.user = append(r.user, u)
	r.allowed = append(r.allowed, a)
}

// Take returns what was allowed since the last Take, and forgets it. It is
// an error if it was allowed for more than one user.
func (r *Recorder) Take() (Decision, error) {
	r.mu.Lock()
	users, allowed := r.user, r.allowed
	r.user, r.allowed = nil, nil
	r.mu.Unlock()
	d := Decision{Attributes: allowed}
	d.Normalize()
	for _, u := range users {
		if d.User == nil {
			d.User = u
		} else if !equalUsers(d.User, u) {
			return d, fmt.Errorf("allowed for two users: %+v and %+v", *d.User, *u)
		}
	}
	return d, nil
}

// Upstream records every request it receives, then serves it with Next
// (200 and an empty body when Next is nil). It is safe for concurrent use.
type Upstream struct {
	Next http.Handler
	mu   sync.Mutex
	got  []*http.Request
}

// ServeHTTP records r (its method, URL, protocol, host and a copy of its
// header; not its body) and serves it.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := &http.Request{Method: r.Method, URL: cloneURL(r.URL), Proto: r.Proto, ProtoMajor: r.ProtoMajor, ProtoMinor: r.ProtoMinor,
		Host: r.Host, Header: r.Header.Clone(), RequestURI: r.RequestURI}
	u.mu.Lock()
	u.got = append(u.got, c)
	u.mu.Unlock()
	if u.Next != nil {
		u.Next.ServeHTTP(w, r)
	}
}

func cloneURL(u *url.URL) *url.URL {
	c := *u
	return &c
}

// Take returns the requests received since the last Take, and forgets
// them.
func (u *Upstream) Take() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := u.got
	u.got = nil
	return out
}

// Lenient returns h as an upstream reads it that ignores case and reads
// '_' as '-': every spelling of a name under one canonical key, with the
// values of all of them (in the order of the sorted spellings).
func Lenient(h http.Header) http.Header {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make(http.Header, len(h))
	for _, k := range keys {
		ck := http.CanonicalHeaderKey(strings.ReplaceAll(k, "_", "-"))
		out[ck] = append(out[ck], h[k]...)
	}
	return out
}

// Spellings returns ways a client can write the header name canonical that
// an upstream may still read as it: case variants, '_' for '-', mixes.
func Spellings(canonical string) []string {
	lower, upper := strings.ToLower(canonical), strings.ToUpper(canonical)
	out := []string{canonical, lower, upper, strings.ReplaceAll(canonical, "-", "_"), strings.ReplaceAll(lower, "-", "_"),
		strings.Replace(canonical, "-", "_", 1)}
	if i := strings.LastIndex(canonical, "-"); i > 0 {
		out = append(out, canonical[:i]+"_"+canonical[i+1:])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// FrontProxyUser reads the identity an upstream is told in the front-proxy
// headers X-Remote-User, X-Remote-Uid, X-Remote-Group and X-Remote-Extra-*,
// read leniently (Lenient), with k8s.io/apiserver's requestheader
// authenticator (which takes the first value of a single-valued header and
// lowercases extra keys). It returns nil when there is no user header in
// any spelling, and an error when a single-valued one has more values than
// one (an upstream may read another one than the API server does).
func FrontProxyUser(h http.Header) (*User, error) {
	return headerUser(h, "X-Remote-User", "X-Remote-Uid", "X-Remote-Group", "X-Remote-Extra-", false)
}

// ImpersonatedUser reads the identity an API server is told in the
// impersonation headers Impersonate-User, Impersonate-Uid,
// Impersonate-Group and Impersonate-Extra-*, read leniently (Lenient),
// as the API server's impersonation filter makes the user it acts as:
// extra keys %-decoded, and system:authenticated added to a user that is
// not system:anonymous and lacks it. It returns nil when there is no
// Impersonate-User in any spelling, and an error when a single-valued
// header has more values than one.
func ImpersonatedUser(h http.Header) (*User, error) {
	return headerUser(h, "Impersonate-User", "Impersonate-Uid", "Impersonate-Group", "Impersonate-Extra-", true)
}

func headerUser(h http.Header, name, uid, groups, extraPrefix string, impersonation bool) (*User, error) {
	l := Lenient(h)
	for _, single := range []string{name, uid} {
		if n := len(l[single]); n > 1 {
			return nil, fmt.Errorf("%s has %d values (%q, spellings and lines)", single, n, l[single])
		}
	}
	if l.Get(name) == "" {
		return nil, nil
	}
	auth, err := headerrequest.New([]string{name}, []string{uid}, []string{groups}, []string{extraPrefix})
	if err != nil {
		return nil, err
	}
	resp, ok, err := auth.AuthenticateRequest(&http.Request{Header: l})
	if err != nil || !ok {
		return nil, fmt.Errorf("reading %s: %v, %v", name, ok, err)
	}
	u := UserOf(resp.User)
	if impersonation && u.Name != user.Anonymous && !slices.Contains(u.Groups, user.AllAuthenticated) {
		u.Groups = append(u.Groups, user.AllAuthenticated)
	}
	return u, nil
}

// StartAPIServer starts an authtest API server for t and writes a
// kubeconfig for it in a temporary directory.
func StartAPIServer(t testing.TB) (api *authtest.Server, kubeconfig string) {
	t.Helper()
	api = authtest.Start(t)
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	return api, kubeconfig
}

// Request is one request of a corpus, as the client writes it: header
// names spelled as given, a name given twice sent as two lines.
type Request struct {
	Method string
	// Target is the request target, sent as written (not cleaned).
	Target string
	Header [][2]string
	// Body is the request body; empty sends none.
	Body string
}

// String is the request for a test's message, its credentials replaced
// by their length.
func (r Request) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Method, r.Target)
	for _, f := range r.Header {
		fmt.Fprintf(&b, " [%s: %s]", f[0], redact(f[0], f[1]))
	}
	if r.Body != "" {
		fmt.Fprintf(&b, " %q", r.Body)
	}
	return b.String()
}

// redact replaces the value of a credential header (Authorization in any
// spelling) with its length: tokens never go into a test's output.
func redact(name, value string) string {
	if strings.EqualFold(strings.ReplaceAll(name, "_", "-"), "authorization") || strings.EqualFold(strings.ReplaceAll(name, "_", "-"), "proxy-authorization") {
		return fmt.Sprintf("[credential, %d bytes]", len(value))
	}
	return value
}

// received describes a request the upstream received, for a test's
// message, its credentials redacted.
func received(r *http.Request) string {
	h := make(http.Header, len(r.Header))
	for k, v := range r.Header {
		for _, x := range v {
			h[k] = append(h[k], redact(k, x))
		}
	}
	return fmt.Sprintf("%s %s %v", r.Method, r.URL, h)
}

// HasConnection reports whether the request carries a Connection header,
// which HTTP/2 forbids (Go's client refuses to send one naming headers).
func (r Request) HasConnection() bool {
	return slices.ContainsFunc(r.Header, func(f [2]string) bool { return strings.EqualFold(f[0], "Connection") })
}

// Send sends r to base (scheme and host) with client and returns the
// status code. Over HTTP/2 (a client whose transport forces it, over TLS
// or without, h2c) a Connection header is not sent: see HasConnection.
func Send(client *http.Client, base string, r Request) (int, error) {
	var body io.Reader
	if r.Body != "" {
		body = strings.NewReader(r.Body)
	}
	req, err := http.NewRequest(r.Method, base+"/", body)
	if err != nil {
		return 0, err
	}
	req.URL.Opaque = "//" + req.URL.Host + r.Target
	for _, f := range r.Header {
		req.Header[f[0]] = append(req.Header[f[0]], f[1])
	}
	if t, ok := client.Transport.(*http.Transport); ok && (t.ForceAttemptHTTP2 || (t.Protocols != nil && !t.Protocols.HTTP1())) {
		for k := range req.Header {
			if strings.EqualFold(k, "Connection") {
				delete(req.Header, k)
			}
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// sendTimeout bounds one request of the corpus: a proxy that never
// answers is a failure, not a hung test.
const sendTimeout = 20 * time.Second

// Clients returns an HTTP/1.1 and an HTTP/2 client for a TLS server with
// any certificate, and a function that closes their idle connections.
func Clients() (http1, http2 *http.Client, closeIdle func()) {
	insecure := &tls.Config{InsecureSkipVerify: true}
	http1 = &http.Client{Transport: &http.Transport{TLSClientConfig: insecure.Clone()}, Timeout: sendTimeout}
	http2 = &http.Client{Transport: &http.Transport{TLSClientConfig: insecure.Clone(), ForceAttemptHTTP2: true}, Timeout: sendTimeout}
	return http1, http2, func() { http1.CloseIdleConnections(); http2.CloseIdleConnections() }
}

// Proxy is what Check needs of the proxy under test.
type Proxy struct {
	// Send sends one request and returns its status code.
	Send func(Request) (int, error)
	// Authorized records what the proxy's authorizer allowed.
	Authorized *Recorder
	// Upstream records what the proxy forwarded.
	Upstream *Upstream
	// Read reads a received request back into what it says was
	// authorized, as the proxy's upstream reads it.
	Read func(*http.Request) (Decision, error)
	// Identity is what the proxy tells its upstream of the user it
	// authorized (all of it, a part, or nil for nothing); nil means all.
	Identity func(*User) *User
	// PassesAnswers is true for a proxy that passes on the upstream's
	// answer whatever its status, and may withhold one it checks after
	// forwarding (examples/draproxy: a get whose object is not the
	// driver's is forwarded, and answered 404 by the proxy): then a
	// request that reached the upstream is compared with what was
	// authorized for it whatever the proxy answered, and a success (2xx)
	// must have reached it once. False: a request answered anything but
	// 200 must not have reached the upstream, and one answered 200 must
	// have reached it once.
	PassesAnswers bool
}

// Check sends each request of corpus through p and returns an error
// describing the first difference: a request that was not allowed (any
// status but 200; see [Proxy].PassesAnswers) reached the upstream; an
// allowed one reached it other than once; or what it says (p.Read)
// differs from what was allowed for it. Requests are sent one at a time.
func Check(p Proxy, corpus []Request) error {
	_, _ = p.Authorized.Take()
	p.Upstream.Take()
	for _, r := range corpus {
		if err := CheckOne(p, r); err != nil {
			return err
		}
	}
	return nil
}

// CheckOne is Check for one request.
func CheckOne(p Proxy, r Request) error {
	code, err := p.Send(r)
	if err != nil {
		return fmt.Errorf("%s: %w", r, err)
	}
	authorized, authzErr := p.Authorized.Take()
	got := p.Upstream.Take()
	switch {
	case p.PassesAnswers && len(got) == 0 && (code < 200 || code > 299):
		return nil // refused by the proxy
	case p.PassesAnswers && len(got) != 1:
		return fmt.Errorf("%s: answered %d; the upstream received it %d times", r, code, len(got))
	case p.PassesAnswers:
	case code != http.StatusOK && len(got) != 0:
		return fmt.Errorf("%s: answered %d, and the upstream received it %d times", r, code, len(got))
	case code != http.StatusOK:
		return nil
	case len(got) != 1:
		return fmt.Errorf("%s: answered 200; the upstream received it %d times", r, len(got))
	}
	if authzErr != nil {
		return fmt.Errorf("%s: %w", r, authzErr)
	}
	read, err := p.Read(got[0])
	if err != nil {
		return fmt.Errorf("%s: reading what the upstream received (%s): %w", r, received(got[0]), err)
	}
	read.Normalize()
	if p.Identity != nil {
		authorized.User = p.Identity(authorized.User)
	}
	if !equalDecisions(authorized, read) {
		return fmt.Errorf("%s:\n  authorized %s\n  received   %s\n  (upstream got %s)", r, show(authorized), show(read), received(got[0]))
	}
	return nil
}

func show(d Decision) string {
	u := "no user"
	if d.User != nil {
		u = fmt.Sprintf("%+v", *d.User)
	}
	return fmt.Sprintf("%s %+v", u, d.Attributes)
}

func equalDecisions(a, b Decision) bool {
	if (a.User == nil) != (b.User == nil) || (a.User != nil && !equalUsers(a.User, b.User)) {
		return false
	}
	return slices.Equal(a.Attributes, b.Attributes)
}

func equalUsers(a, b *User) bool {
	if a.Name != b.Name || a.UID != b.UID || !slices.Equal(a.Groups, b.Groups) || len(a.Extra) != len(b.Extra) {
		return false
	}
	for k, v := range a.Extra {
		if w, ok := b.Extra[k]; !ok || !slices.Equal(v, w) {
			return false
		}
	}
	return true
}

// CorpusOptions describes the hand-written corpus of a proxy.
type CorpusOptions struct {
	// Methods; nil means GET.
	Methods []string
	// Targets are request targets (path and query) as written, encoded
	// and unclean ones included.
	Targets []string
	// Authorization are the credentials sent, one request each ("" sends
	// none).
	Authorization []string
	// DecisionHeader is a header the decision reads, "" for none, with
	// DecisionValues to send in it (allowed and denied ones).
	DecisionHeader string
	DecisionValues []string
	// IdentityHeaders are headers the upstream trusts: clients send them
	// in every spelling, and name them in their Connection header.
	IdentityHeaders []string
}

// Corpus returns the requests of o: for every method, target and
// credential, the request alone; with the identity headers spoofed in
// every spelling; with Connection headers naming the identity headers, the
// decision header, Authorization and a harmless header, in several
// spellings; and, with a decision header, each value in it once, on two
// lines, in a variant spelling only, and in two spellings at once (alone
// and with a Connection header naming it).
func Corpus(o CorpusOptions) []Request {
	methods := o.Methods
	if len(methods) == 0 {
		methods = []string{"GET"}
	}
	var spoofs [][2]string
	for _, name := range o.IdentityHeaders {
		for _, s := range Spellings(name) {
			spoofs = append(spoofs, [2]string{s, "system:admin"}, [2]string{s, "system:masters"})
		}
	}
	protected := append(slices.Clone(o.IdentityHeaders), "Authorization")
	if o.DecisionHeader != "" {
		protected = append(protected, o.DecisionHeader)
	}
	var connections []string
	for _, names := range [][]string{protected, {"X-Custom"}} {
		connections = append(connections, strings.Join(names, ", "), strings.ToLower(strings.Join(names, ",")),
			strings.ReplaceAll(strings.Join(names, " , "), "-", "_"), "keep-alive, "+strings.ToUpper(strings.Join(names, ", ")))
	}
	variants := [][][2]string{nil, spoofs}
	for _, c := range connections {
		variants = append(variants, [][2]string{{"Connection", c}, {"X-Custom", "hop-by-hop"}})
	}
	if d := o.DecisionHeader; d != "" {
		variant := strings.ReplaceAll(d, "-", "_")
		for i, v := range o.DecisionValues {
			other := o.DecisionValues[(i+1)%len(o.DecisionValues)]
			variants = append(variants,
				[][2]string{{d, v}},
				[][2]string{{d, v}, {strings.ToLower(d), other}},
				[][2]string{{variant, v}},
				[][2]string{{d, v}, {variant, other}},
				[][2]string{{d, v}, {"Connection", d}},
				[][2]string{{variant, v}, {"Connection", variant + ", " + strings.Join(o.IdentityHeaders, ", ")}},
			)
		}
	}
	var out []Request
	for _, m := range methods {
		for _, target := range o.Targets {
			for _, auth := range o.Authorization {
				for _, v := range variants {
					r := Request{Method: m, Target: target}
					if auth != "" {
						r.Header = append(r.Header, [2]string{"Authorization", auth})
					}
					r.Header = append(r.Header, v...)
					out = append(out, r)
				}
			}
		}
	}
	return out
}

// FuzzRequest makes a request from fuzz inputs: a method, a target (a
// path and query, as written) and header lines ("Name: value" separated
// by newlines), with credential as its Authorization unless one is
// given. It returns false for inputs no client can send (a target that is
// not an origin-form request target, a header name that is not a token, a
// value with a control character).
func FuzzRequest(method, target, headers, credential string) (Request, bool) {
	if !token(method) || len(target) > 2048 || !strings.HasPrefix(target, "/") {
		return Request{}, false
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c >= 0x7f || c == '#' {
			return Request{}, false
		}
	}
	if _, err := url.ParseRequestURI(target); err != nil {
		return Request{}, false
	}
	r := Request{Method: method, Target: target}
	hasAuth := false
	for line := range strings.SplitSeq(headers, "\n") {
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		value = strings.TrimSpace(value)
		if !ok || !token(name) || strings.EqualFold(name, "Host") || strings.EqualFold(name, "Content-Length") ||
			strings.EqualFold(name, "Transfer-Encoding") || strings.EqualFold(name, "Expect") || strings.EqualFold(name, "Upgrade") {
			continue
		}
		for i := 0; i < len(value); i++ {
			if c := value[i]; (c < ' ' && c != '\t') || c == 0x7f {
				return Request{}, false
			}
		}
		hasAuth = hasAuth || strings.EqualFold(name, "Authorization")
		r.Header = append(r.Header, [2]string{name, value})
	}
	if !hasAuth && credential != "" {
		r.Header = append(r.Header, [2]string{"Authorization", credential})
	}
	return r, len(r.Header) <= 64
}

// token reports whether s is an HTTP token (RFC 9110, 5.6.2).
func token(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
