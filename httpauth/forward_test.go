package httpauth_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/reviewauth/reviewauth/httpauth"
)

// byNamespace maps a request to one resource attribute set per value of
// its X-Namespace header (kube-rbac-proxy's rewrites byHttpHeader), read
// under the canonical key, and nothing else; no value is an error.
var byNamespace = httpauth.AttributesMapperFunc(func(r *http.Request, u user.Info) ([]authorizer.Attributes, error) {
	values := r.Header["X-Namespace"]
	if len(values) == 0 {
		return nil, fmt.Errorf("no X-Namespace")
	}
	var out []authorizer.Attributes
	for _, v := range values {
		out = append(out, &authorizer.AttributesRecord{User: u, Verb: "get", Resource: "pods", Namespace: v, ResourceRequest: true})
	}
	return out, nil
})

// teamsOnly allows namespaces team-a and team-b, and records what it was
// asked.
type teamsOnly struct {
	mu    sync.Mutex
	asked []string
}

func (a *teamsOnly) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	a.mu.Lock()
	a.asked = append(a.asked, attrs.GetNamespace())
	a.mu.Unlock()
	if ns := attrs.GetNamespace(); ns == "team-a" || ns == "team-b" {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func (a *teamsOnly) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.asked
	a.asked = nil
	slices.Sort(out)
	return out
}

// recordingUpstream keeps the headers of every request it receives.
type recordingUpstream struct {
	mu  sync.Mutex
	got []http.Header
}

func (u *recordingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.got = append(u.got, r.Header.Clone())
	u.mu.Unlock()
	_, _ = io.WriteString(w, "upstream")
}

func (u *recordingUpstream) take() []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := u.got
	u.got = nil
	return out
}

// forwardingProxy is an HTTP/1.1 (or, with h2, HTTP/2 over TLS) server
// running the middleware over an httputil.ReverseProxy to a recording
// upstream. rewrite is the proxy's Rewrite after SetURL; director, when
// set, is used instead of Rewrite.
type forwardingProxy struct {
	front *httptest.Server
	up    *recordingUpstream
	authz *teamsOnly
}

func newForwardingProxy(t *testing.T, opts httpauth.Options, h2 bool, rewrite func(*httputil.ProxyRequest), director func(*http.Request)) *forwardingProxy {
	t.Helper()
	p := &forwardingProxy{up: &recordingUpstream{}, authz: &teamsOnly{}}
	upstream := httptest.NewServer(p.up)
	t.Cleanup(upstream.Close)
	target, _ := url.Parse(upstream.URL)
	proxy := &httputil.ReverseProxy{}
	if director != nil {
		proxy.Director = func(r *http.Request) {
			r.URL.Scheme, r.URL.Host = target.Scheme, target.Host
			director(r)
		}
	} else {
		proxy.Rewrite = func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			if rewrite != nil {
				rewrite(pr)
			}
		}
	}
	if opts.Authorizer == nil {
		opts.Authorizer = p.authz
	}
	if opts.Attributes == nil {
		opts.Attributes = byNamespace
	}
	p.front = httptest.NewUnstartedServer(newMiddleware(t, opts)(proxy))
	if h2 {
		p.front.EnableHTTP2 = true
		p.front.StartTLS()
	} else {
		p.front.Start()
	}
	t.Cleanup(p.front.Close)
	return p
}

// rawHTTP1 sends one request, head written exactly as given (header lines
// in order, names as spelled), on a new connection, and returns the
// status code.
func rawHTTP1(t *testing.T, addr, method, target string, lines ...string) int {
	t.Helper()
	code, _ := rawHTTP1Body(t, addr, method, target, lines...)
	return code
}

// rawHTTP1Body is rawHTTP1 that returns the body too.
func rawHTTP1Body(t *testing.T, addr, method, target string, lines ...string) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: proxy\r\n", method, target)
	for _, l := range lines {
		b.WriteString(l + "\r\n")
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(body)
}

var scraperIdentity = map[string][]string{
	"X-Remote-User":  {scraper.Name},
	"X-Remote-Uid":   {scraper.UID},
	"X-Remote-Group": scraper.Groups,
	"X-Remote-Extra-Authentication.kubernetes.io%2fcredential-Id": {"JTI=1"},
}

// protectedConnections are Connection headers a client sends (by accident
// or not) that name the identity, decision and credential headers, in
// spellings httputil.ReverseProxy's hop-by-hop pass deletes, with a
// harmless token among them.
var protectedConnections = []string{
	"Connection: X-Remote-User, X-Remote-Group",
	"Connection: x-remote-uid,X-REMOTE-GROUP , X-Remote-Extra-Authentication.kubernetes.io%2fcredential-Id",
	"Connection: X-Namespace",
	"Connection: keep-alive, x-namespace, Authorization, X-Custom",
	"Connection: X_Remote_User, X_Namespace",
}

// TestForwarderKeepsWhatWasAuthorized (HTTP/1.1): whatever the client's
// Connection header names, the upstream behind an httputil.ReverseProxy
// receives the identity of the authenticated caller and the decision
// header's values exactly as they were authorized; a harmless header the
// client named there is still dropped as hop-by-hop; the request is
// served, not refused. Before Forwarder, ReverseProxy deleted them all:
// the request was allowed and the upstream got no identity, or no
// namespace.
func TestForwarderKeepsWhatWasAuthorized(t *testing.T) {
	t.Parallel()
	fw, err := httpauth.NewForwarder(httpauth.ForwarderOptions{Identity: httpauth.FrontProxyHeaders(),
		DecisionHeaders: []httpauth.DecisionHeader{{Name: "X-Namespace", Multiple: true}}})
	if err != nil {
		t.Fatal(err)
	}
	p := newForwardingProxy(t, httpauth.Options{Forwarder: fw}, false, func(pr *httputil.ProxyRequest) {
		pr.SetXForwarded()
		fw.Header(pr.Out.Header, pr.In)
	}, nil)
	for _, conn := range append(protectedConnections, "Connection: X-Forwarded-For, X-Forwarded-Proto, X-Remote-User") {
		code := rawHTTP1(t, p.front.Listener.Addr().String(), "GET", "/pods",
			"Authorization: Bearer "+scraperToken, "X-Namespace: team-a", "X-Namespace: team-b", "X-Custom: dropped", conn)
		got := p.up.take()
		if code != 200 || len(got) != 1 {
			t.Fatalf("%s: code %d, upstream received %d requests; want 200 and 1", conn, code, len(got))
		}
		if diff := cmp.Diff(scraperIdentity, identityHeaders(got[0])); diff != "" {
			t.Errorf("%s: identity at the upstream (-want +got):\n%s", conn, diff)
		}
		if asked, ns := p.authz.take(), got[0]["X-Namespace"]; !slices.Equal(asked, []string{"team-a", "team-b"}) || !slices.Equal(ns, asked) {
			t.Errorf("%s: authorized %q, upstream received X-Namespace %q; want the same", conn, asked, ns)
		}
		if v, ok := got[0]["X-Custom"]; ok && strings.Contains(conn, "X-Custom") {
			t.Errorf("%s: X-Custom = %q reached the upstream; want it dropped as hop-by-hop", conn, v)
		}
		// What the proxy sets in Rewrite, after the hop-by-hop pass, is
		// not the client's to remove.
		if got[0].Get("X-Forwarded-For") == "" || got[0].Get("X-Forwarded-Proto") != "http" {
			t.Errorf("%s: X-Forwarded-For %q, X-Forwarded-Proto %q at the upstream; want the proxy's", conn,
				got[0].Get("X-Forwarded-For"), got[0].Get("X-Forwarded-Proto"))
		}
	}
}

// TestPropagateIdentitySurvivesConnection: PropagateIdentity (identity set
// on the request before the proxy runs) with a plain
// httputil.ReverseProxy, Rewrite and Director alike, without a Forwarder:
// "Connection: X-Remote-User" no longer deletes the identity (before: 200
// with no identity at the upstream). A Director that sets its own
// Authorization (its credentials for the upstream) before ReverseProxy's
// hop-by-hop pass keeps it too.
func TestPropagateIdentitySurvivesConnection(t *testing.T) {
	t.Parallel()
	opts := httpauth.Options{PropagateIdentity: true, Attributes: httpauth.Kubelet("node-1"), Authorizer: metricsOnly}
	for _, tt := range []struct {
		name     string
		director func(*http.Request)
	}{
		{"Rewrite", nil},
		{"Director", func(r *http.Request) { r.Header.Set("Authorization", "Bearer proxy-own-credential") }},
	} {
		p := newForwardingProxy(t, opts, false, nil, tt.director)
		for _, conn := range protectedConnections[:2] {
			code := rawHTTP1(t, p.front.Listener.Addr().String(), "GET", "/metrics", "Authorization: Bearer "+scraperToken,
				conn+", Authorization")
			got := p.up.take()
			if code != 200 || len(got) != 1 {
				t.Fatalf("%s, %s: code %d, upstream received %d requests; want 200 and 1", tt.name, conn, code, len(got))
			}
			want := scraperIdentity
			if tt.director != nil {
				want = map[string][]string{"Authorization": {"Bearer proxy-own-credential"}}
				for k, v := range scraperIdentity {
					want[k] = v
				}
			}
			if diff := cmp.Diff(want, identityHeaders(got[0])); diff != "" {
				t.Errorf("%s, %s: at the upstream (-want +got):\n%s", tt.name, conn, diff)
			}
		}
	}
}

// TestDecisionHeaders: a decision header is read in every spelling an
// upstream may read as it: sent in two spellings, or a single-valued one
// twice, it is refused with 400 naming it, before anything is authorized
// or forwarded; a multi-valued one sent on several lines has every value
// authorized and forwarded; one sent only in a variant spelling is
// authorized and forwarded under its canonical name, never in the variant.
func TestDecisionHeaders(t *testing.T) {
	t.Parallel()
	fw, err := httpauth.NewForwarder(httpauth.ForwarderOptions{DecisionHeaders: []httpauth.DecisionHeader{
		{Name: "x-namespace", Multiple: true}, {Name: "X-Tenant"}}})
	if err != nil {
		t.Fatal(err)
	}
	byBoth := httpauth.AttributesMapperFunc(func(r *http.Request, u user.Info) ([]authorizer.Attributes, error) {
		attrs, err := byNamespace(r, u)
		if t := r.Header["X-Tenant"]; len(t) > 0 {
			attrs = append(attrs, &authorizer.AttributesRecord{User: u, Verb: "get", Resource: "tenants", Namespace: t[0], ResourceRequest: true})
		}
		return attrs, err
	})
	p := newForwardingProxy(t, httpauth.Options{Forwarder: fw, Attributes: byBoth}, false, func(pr *httputil.ProxyRequest) { fw.Header(pr.Out.Header, pr.In) }, nil)
	tests := []struct {
		name      string
		lines     []string
		wantCode  int
		wantAsked []string
		wantBody  string
		wantUp    http.Header // decision headers at the upstream, every spelling
	}{
		{name: "one line", lines: []string{"X-Namespace: team-a"}, wantCode: 200, wantAsked: []string{"team-a"},
			wantUp: http.Header{"X-Namespace": {"team-a"}}},
		{name: "two lines, both authorized and forwarded", lines: []string{"X-Namespace: team-a", "x-namespace: team-b"}, wantCode: 200,
			wantAsked: []string{"team-a", "team-b"}, wantUp: http.Header{"X-Namespace": {"team-a", "team-b"}}},
		{name: "two lines, one denied", lines: []string{"X-Namespace: team-a", "X-NAMESPACE: kube-system"}, wantCode: 403,
			wantAsked: []string{"kube-system", "team-a"}},
		{name: "variant spelling only: read and forwarded canonically", lines: []string{"X_Namespace: team-b"}, wantCode: 200,
			wantAsked: []string{"team-b"}, wantUp: http.Header{"X-Namespace": {"team-b"}}},
		{name: "two spellings", lines: []string{"X-Namespace: team-a", "X_Namespace: kube-system"}, wantCode: 400,
			wantBody: `X-Namespace sent in 2 spellings`},
		{name: "two variant spellings", lines: []string{"x_namespace: team-a", "X_NAMESPACE: team-a"}, wantCode: 200,
			wantAsked: []string{"team-a", "team-a"}, wantUp: http.Header{"X-Namespace": {"team-a", "team-a"}}},
		{name: "single-valued, once", lines: []string{"X-Namespace: team-a", "X-Tenant: team-b"}, wantCode: 200,
			wantAsked: []string{"team-a", "team-b"}, wantUp: http.Header{"X-Namespace": {"team-a"}, "X-Tenant": {"team-b"}}},
		{name: "single-valued, twice", lines: []string{"X-Namespace: team-a", "X-Tenant: team-a", "x-tenant: kube-system"}, wantCode: 400,
			wantBody: `X-Tenant sent 2 times`},
		{name: "single-valued, two spellings", lines: []string{"X-Namespace: team-a", "X-Tenant: team-a", "X_Tenant: kube-system"}, wantCode: 400,
			wantBody: `X-Tenant sent in 2 spellings`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines := append([]string{"Authorization: Bearer " + scraperToken}, tt.lines...)
			code, body := rawHTTP1Body(t, p.front.Listener.Addr().String(), "GET", "/pods", lines...)
			asked, got := p.authz.take(), p.up.take()
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Fatalf("code = %d, body %s; want %d with %q", code, body, tt.wantCode, tt.wantBody)
			}
			if !slices.Equal(asked, tt.wantAsked) {
				t.Errorf("authorized namespaces %q; want %q", asked, tt.wantAsked)
			}
			if tt.wantCode != 200 {
				if len(got) != 0 {
					t.Errorf("the upstream received %d requests; want none", len(got))
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("the upstream received %d requests; want 1", len(got))
			}
			up := http.Header{}
			for k, v := range got[0] {
				if n := strings.ReplaceAll(strings.ToLower(k), "_", "-"); n == "x-namespace" || n == "x-tenant" {
					up[k] = v
				}
			}
			if diff := cmp.Diff(tt.wantUp, up); diff != "" {
				t.Errorf("decision headers at the upstream (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("the 400 names the header", func(t *testing.T) {
		r := get("/pods", scraperToken)
		r.Header["X-Namespace"] = []string{"team-a"}
		r.Header["X_namespace"] = []string{"kube-system"}
		w, s := serve(newMiddleware(t, httpauth.Options{Forwarder: fw, Attributes: byBoth, Authorizer: &teamsOnly{}}), r)
		if w.Code != 400 || s.called {
			t.Fatalf("code %d, handler called %v; want 400, not called", w.Code, s.called)
		}
		if msg := decodeStatus(t, w).Message; !strings.Contains(msg, `X-Namespace sent in 2 spellings (["X-Namespace" "X_namespace"])`) {
			t.Errorf("400 message %q; want it to name both spellings", msg)
		}
	})
}

// TestForwarderHTTP2: HTTP/2 forbids the Connection header. net/http's
// server answers a request that carries one with 400 before any handler
// runs (sent here frame by frame, since Go's client refuses to send it),
// so nothing reaches the upstream; a request without one carries the
// identity and the authorized decision header, in its canonical spelling,
// to the upstream, as over HTTP/1.1.
func TestForwarderHTTP2(t *testing.T) {
	t.Parallel()
	fw, err := httpauth.NewForwarder(httpauth.ForwarderOptions{Identity: httpauth.FrontProxyHeaders(),
		DecisionHeaders: []httpauth.DecisionHeader{{Name: "X-Namespace", Multiple: true}}})
	if err != nil {
		t.Fatal(err)
	}
	p := newForwardingProxy(t, httpauth.Options{Forwarder: fw}, true, func(pr *httputil.ProxyRequest) { fw.Header(pr.Out.Header, pr.In) }, nil)
	addr := p.front.Listener.Addr().String()

	for _, conn := range []string{"x-remote-user", "x-namespace", "keep-alive"} {
		status := rawHTTP2(t, addr, [][2]string{{"authorization", "Bearer " + scraperToken}, {"x-namespace", "team-a"}, {"connection", conn}})
		if status != "400" {
			t.Errorf("HTTP/2 with connection: %s: :status %s; want 400", conn, status)
		}
	}
	if got := p.up.take(); len(got) != 0 {
		t.Errorf("HTTP/2 requests with a Connection header reached the upstream %d times; want 0", len(got))
	}

	for _, spelling := range []string{"x-namespace", "x_namespace"} {
		if status := rawHTTP2(t, addr, [][2]string{{"authorization", "Bearer " + scraperToken}, {spelling, "team-b"}}); status != "200" {
			t.Fatalf("HTTP/2, %s: :status %s; want 200", spelling, status)
		}
		got := p.up.take()
		if len(got) != 1 {
			t.Fatalf("HTTP/2, %s: the upstream received %d requests; want 1", spelling, len(got))
		}
		if diff := cmp.Diff(scraperIdentity, identityHeaders(got[0])); diff != "" {
			t.Errorf("HTTP/2, %s: identity at the upstream (-want +got):\n%s", spelling, diff)
		}
		if ns, variant := got[0]["X-Namespace"], got[0]["X_namespace"]; !slices.Equal(ns, []string{"team-b"}) || variant != nil {
			t.Errorf("HTTP/2, %s: upstream X-Namespace %q, X_namespace %q; want [team-b] and none", spelling, ns, variant)
		}
	}
	req, _ := http.NewRequest("GET", p.front.URL+"/pods", nil)
	req.Header["Connection"] = []string{"X-Remote-User"}
	if resp, err := p.front.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("Go's HTTP/2 client sent a Connection header naming X-Remote-User (%s); the test assumes it refuses", resp.Proto)
	}
}

// rawHTTP2 sends GET /pods with fields (lower-case names, as HTTP/2
// requires) over a new HTTP/2 connection, frame by frame, and returns the
// response's :status.
func rawHTTP2(t *testing.T, addr string, fields [][2]string) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range append([][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "proxy"}, {":path", "/pods"}}, fields...) {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, hf := range fields {
				if hf.Name == ":status" {
					return hf.Value
				}
			}
		case *http2.RSTStreamFrame:
			return "RST_STREAM " + f.ErrCode.String()
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String()
		}
	}
}

// TestForwarderHeader: Forwarder.Header over the header of a forwarder of
// one's own (a copy of every incoming header, no ReverseProxy): decision
// headers carry the authorized values, in the canonical spelling only; the
// identity is set for an authenticated user, and only then; client-sent
// identity headers never pass; nothing else is touched (the hop-by-hop
// pass is the caller's, before).
func TestForwarderHeader(t *testing.T) {
	t.Parallel()
	fw, err := httpauth.NewForwarder(httpauth.ForwarderOptions{Identity: httpauth.FrontProxyHeaders(),
		DecisionHeaders: []httpauth.DecisionHeader{{Name: "X-Namespace", Multiple: true}}})
	if err != nil {
		t.Fatal(err)
	}
	in := httptest.NewRequest("GET", "/pods", nil)
	in.Header = http.Header{
		"Connection":    {"X-Custom, X-Remote-User, x_namespace", "Upgrade"},
		"Upgrade":       {"websocket"},
		"X-Custom":      {"hop"},
		"X-Kept":        {"kept"},
		"X-Namespace":   {"team-a"},
		"X-Remote-User": {"spoofed"},
	}
	tests := []struct {
		name string
		u    user.Info
		want http.Header
	}{
		{name: "authenticated", u: scraper, want: http.Header{
			"Connection": {"X-Custom, X-Remote-User, x_namespace", "Upgrade"}, "Upgrade": {"websocket"}, "X-Kept": {"kept"}, "X-Custom": {"hop"},
			"X-Namespace": {"team-a"}, "X-Remote-User": {scraper.Name}, "X-Remote-Uid": {scraper.UID}, "X-Remote-Group": scraper.Groups,
			"X-Remote-Extra-Authentication.kubernetes.io%2fcredential-Id": {"JTI=1"},
		}},
		{name: "anonymous", u: &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}, want: http.Header{
			"Connection": {"X-Custom, X-Remote-User, x_namespace", "Upgrade"}, "Upgrade": {"websocket"}, "X-Kept": {"kept"}, "X-Custom": {"hop"}, "X-Namespace": {"team-a"},
		}},
		{name: "no user", want: http.Header{
			"Connection": {"X-Custom, X-Remote-User, x_namespace", "Upgrade"}, "Upgrade": {"websocket"}, "X-Kept": {"kept"}, "X-Custom": {"hop"}, "X-Namespace": {"team-a"},
		}},
	}
	for _, tt := range tests {
		r := in
		if tt.u != nil {
			r = in.WithContext(request.WithUser(in.Context(), tt.u))
		}
		out := in.Header.Clone()
		out["X_namespace"] = []string{"kube-system"} // a variant the forwarder must not pass on
		fw.Header(out, r)
		if diff := cmp.Diff(tt.want, out); diff != "" {
			t.Errorf("%s: Header() (-want +got):\n%s", tt.name, diff)
		}
	}
	t.Run("nil Forwarder", func(t *testing.T) {
		out := http.Header{"Authorization": {"Bearer own"}, "X-Kept": {"kept"}}
		var nilFw *httpauth.Forwarder
		nilFw.Header(out, &http.Request{Header: http.Header{"Connection": {"authorization, X-Kept"}}})
		if want := (http.Header{"Authorization": {"Bearer own"}, "X-Kept": {"kept"}}); !cmp.Equal(want, out) {
			t.Errorf("nil Forwarder: Header() = %v; want %v", out, want)
		}
	})
}

func TestNewForwarderErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		opts httpauth.ForwarderOptions
	}{
		{"empty identity name", httpauth.ForwarderOptions{Identity: identityNames{""}}},
		{"identity star inside", httpauth.ForwarderOptions{Identity: identityNames{"X-*-User"}}},
		{"identity hop-by-hop", httpauth.ForwarderOptions{Identity: identityNames{"Keep_Alive"}}},
		{"empty decision header", httpauth.ForwarderOptions{DecisionHeaders: []httpauth.DecisionHeader{{}}}},
		{"decision header not a name", httpauth.ForwarderOptions{DecisionHeaders: []httpauth.DecisionHeader{{Name: "X Namespace"}}}},
		{"decision header hop-by-hop", httpauth.ForwarderOptions{DecisionHeaders: []httpauth.DecisionHeader{{Name: "Upgrade"}}}},
		{"decision header Authorization", httpauth.ForwarderOptions{DecisionHeaders: []httpauth.DecisionHeader{{Name: "authorization"}}}},
		{"decision header stripped identity", httpauth.ForwarderOptions{DecisionHeaders: []httpauth.DecisionHeader{{Name: "Impersonate-User"}}}},
		{"decision header is the identity", httpauth.ForwarderOptions{Identity: identityNames{"X-User"}, DecisionHeaders: []httpauth.DecisionHeader{{Name: "x_user"}}}},
		{"decision header twice", httpauth.ForwarderOptions{DecisionHeaders: []httpauth.DecisionHeader{{Name: "X-Namespace"}, {Name: "x_namespace"}}}},
	} {
		if f, err := httpauth.NewForwarder(tt.opts); err == nil || f != nil {
			t.Errorf("%s: NewForwarder() = %v, %v; want an error", tt.name, f, err)
		}
	}
	if _, err := httpauth.NewForwarder(httpauth.ForwarderOptions{}); err != nil {
		t.Errorf("NewForwarder(zero) = %v; want no error", err)
	}
}

// identityNames is an IdentityHeaders with the given names, setting the
// user name in the first.
type identityNames []string

func (n identityNames) Names() []string                { return n }
func (n identityNames) Set(h http.Header, u user.Info) { h.Set(n[0], u.GetName()) }
