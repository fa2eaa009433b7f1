package httpauth_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/reviewauth/reviewauth/httpauth"
)

// spellings returns the ways a client can write the header name canonical
// that an upstream may still read as it: case variants, '_' for '-' (CGI,
// WSGI, nginx with underscores_in_headers), and mixes of both.
func spellings(canonical string) []string {
	lower, upper := strings.ToLower(canonical), strings.ToUpper(canonical)
	out := []string{canonical, lower, upper,
		strings.ReplaceAll(canonical, "-", "_"),
		strings.ReplaceAll(lower, "-", "_"),
		strings.ReplaceAll(upper, "-", "_"),
		strings.Replace(canonical, "-", "_", 1),
		strings.Replace(lower, "-", "_", 1),
	}
	if i := strings.LastIndex(canonical, "-"); i > 0 {
		out = append(out, canonical[:i]+"_"+canonical[i+1:])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// forbiddenFromClients are the header names no client may set for the
// handler or an upstream (see identityHeaders). Authorization is left out
// on the wire: the server canonicalizes every spelling of it, and it is
// the credential itself.
var forbiddenFromClients = []string{
	"X-Remote-User", "X-Remote-Uid", "X-Remote-Group", "X-Remote-Extra-Scopes", "X-Remote-Extra-Authentication.kubernetes.io%2fcredential-Id",
	"Impersonate-User", "Impersonate-Uid", "Impersonate-Group", "Impersonate-Extra-Scopes", "Impersonate-Anything-Else",
	"Proxy-Authorization",
}

// TestIdentityHeadersNeverReachUpstream sends every spelling of every
// identity and impersonation header, twice each, over real HTTP through
// the middleware and an httputil.ReverseProxy, and checks what the upstream
// receives: none of them, on allowed and always-allow paths, with and
// without PropagateIdentity; and nothing at all on refused requests.
func TestIdentityHeadersNeverReachUpstream(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		received []http.Header
	)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		received = append(received, r.Header.Clone())
		mu.Unlock()
	}))
	defer upstream.Close()
	target, err := url.Parse(upstream.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }}

	var spoofs []string
	for _, name := range forbiddenFromClients {
		spoofs = append(spoofs, spellings(name)...)
	}
	kept := []string{"X-Remote-Not-An-Identity", "Impersonatex-User", "X-Remoteuser", "X-Forwarded-User"}

	tests := []struct {
		name, path, token string
		propagate         bool
		wantCode          int
		wantIdentity      map[string][]string // identity headers the upstream must see
	}{
		{name: "allowed", path: "/metrics", token: scraperToken, wantCode: 200, wantIdentity: map[string][]string{}},
		{name: "allowed, propagating", path: "/metrics", token: scraperToken, propagate: true, wantCode: 200, wantIdentity: map[string][]string{
			"X-Remote-User":  {scraper.Name},
			"X-Remote-Uid":   {scraper.UID},
			"X-Remote-Group": scraper.Groups,
			"X-Remote-Extra-Authentication.kubernetes.io%2fcredential-Id": {"JTI=1"},
		}},
		{name: "always-allow without credential", path: "/healthz", wantCode: 200, wantIdentity: map[string][]string{}},
		{name: "always-allow without credential, propagating", path: "/healthz", propagate: true, wantCode: 200, wantIdentity: map[string][]string{}},
		{name: "always-allow with credential", path: "/healthz", token: scraperToken, wantCode: 200, wantIdentity: map[string][]string{}},
		{name: "denied", path: "/logs/x", token: scraperToken, wantCode: 403},
		{name: "unauthenticated", path: "/metrics", wantCode: 401},
		{name: "rejected", path: "/metrics", token: badToken, wantCode: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mw := newMiddleware(t, httpauth.Options{AlwaysAllowPaths: []string{"/healthz"}, PropagateIdentity: tt.propagate})
			front := httptest.NewServer(mw(proxy))
			defer front.Close()
			client := front.Client()
			defer client.CloseIdleConnections()

			req, err := http.NewRequest("GET", front.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			for _, k := range spoofs {
				// Set directly: the client sends the key as written.
				req.Header[k] = []string{"spoofed-1", "spoofed-2"}
			}
			for _, k := range kept {
				req.Header[k] = []string{"kept"}
			}
			mu.Lock()
			before := len(received)
			mu.Unlock()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("GET %s: code = %d; want %d", tt.path, resp.StatusCode, tt.wantCode)
			}
			mu.Lock()
			got := received[before:]
			mu.Unlock()
			if tt.wantCode != 200 {
				if len(got) != 0 {
					t.Fatalf("GET %s: the upstream received %d requests on a %d; want none", tt.path, len(got), tt.wantCode)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("GET %s: the upstream received %d requests; want 1", tt.path, len(got))
			}
			if diff := cmp.Diff(tt.wantIdentity, identityHeaders(got[0])); diff != "" {
				t.Errorf("GET %s: identity headers at the upstream (-want +got):\n%s", tt.path, diff)
			}
			for _, k := range kept {
				if got[0].Get(k) != "kept" {
					t.Errorf("GET %s: header %s did not reach the upstream; want it kept", tt.path, k)
				}
			}
		})
	}
}

func TestSpellings(t *testing.T) {
	t.Parallel()
	got := spellings("X-Remote-User")
	for _, want := range []string{"X-Remote-User", "x-remote-user", "X_REMOTE_USER", "X_Remote-User", "X-Remote_User", "x_remote-user"} {
		if !slices.Contains(got, want) {
			t.Errorf("spellings(X-Remote-User) = %v; want it to contain %q", got, want)
		}
	}
}
