package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
)

// TestOutHeaderSetsOwnBearer: the forwarded request carries draproxy's own
// token when its header is built, so that client-go's bearer round tripper
// does not clone it to set one, and never the driver's.
func TestOutHeaderSetsOwnBearer(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	host, _, err := rest.DefaultServerUrlFor(f.config())
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{upstream: host, bearer: must(newUpstreamBearer(f.config()))}
	driver := http.Header{"Authorization": {"Bearer driver-token"}, "Accept": {"application/json"}}
	r := httptest.NewRequestWithContext(request.WithUser(t.Context(), &user.DefaultInfo{Name: driverSA}), http.MethodGet, "/", nil)
	r.Header = driver
	h := p.outHeader(r, &user.DefaultInfo{Name: driverSA}, nil)
	if got, want := h.Values("Authorization"), []string{"Bearer " + f.proxyToken}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("outHeader: Authorization = %q; want %q", got, want)
	}
	if got := h.Get("Accept"); got != "application/json" {
		t.Errorf("outHeader: Accept = %q; want application/json", got)
	}
}

// TestUpstreamBearerAsClientGo: for every way a rest.Config carries a bearer
// token, the Authorization header draproxy sets is the one client-go's own
// transport for that configuration sends (the oracle), and a configuration
// without one leaves it to the transport.
func TestUpstreamBearerAsClientGo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, tt := range []struct {
		name    string
		cfg     rest.Config
		none    bool // no bearer: the transport's credentials
		wantErr bool
	}{
		{name: "token", cfg: rest.Config{BearerToken: "static-token"}},
		{name: "file", cfg: rest.Config{BearerTokenFile: file}},
		{name: "token and file: the file wins", cfg: rest.Config{BearerToken: "static-token", BearerTokenFile: file}},
		{name: "token and unreadable file", cfg: rest.Config{BearerToken: "static-token", BearerTokenFile: missing}},
		{name: "unreadable file only", cfg: rest.Config{BearerTokenFile: missing}, wantErr: true},
		{name: "basic auth", cfg: rest.Config{Username: "u", Password: "p"}, none: true},
		{name: "nothing", none: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := tt.cfg
			cfg.Host = "https://api.invalid"
			var sent string
			cfg.Transport = roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				sent = r.Header.Get("Authorization")
				return nil, errors.New("recorded")
			})
			b, err := newUpstreamBearer(&cfg)
			rt, rtErr := rest.TransportFor(&cfg)
			if tt.wantErr {
				if err == nil || rtErr == nil {
					t.Fatalf("newUpstreamBearer() = %v, rest.TransportFor() = %v; want both to fail", err, rtErr)
				}
				return
			}
			if err != nil || rtErr != nil {
				t.Fatalf("newUpstreamBearer() = %v, rest.TransportFor() = %v", err, rtErr)
			}
			if (b == nil) != tt.none {
				t.Fatalf("newUpstreamBearer() = %v; want nil: %t", b, tt.none)
			}
			_, _ = rt.RoundTrip(httptest.NewRequest(http.MethodGet, "https://api.invalid/api", nil))
			if tt.none {
				return
			}
			if got := b.header(); len(got) != 1 || got[0] != sent {
				t.Errorf("header() = %q; want %q, as client-go sends", got, sent)
			}
		})
	}
}

// TestUpstreamBearerRotation: a rotated token is used from the next request
// the token source returns it on; while the source fails, the first token
// is used, as client-go's bearer round tripper does.
func TestUpstreamBearerRotation(t *testing.T) {
	t.Parallel()
	src := &fakeTokenSource{}
	src.set("first", nil)
	b := &upstreamBearer{bearer: "first", source: src}
	steps := []struct {
		token string
		err   error
		want  string
	}{
		{token: "first", want: "Bearer first"},
		{token: "second", want: "Bearer second"},
		{token: "second", want: "Bearer second"},
		{err: errors.New("unreadable"), want: "Bearer first"},
		{token: "third", want: "Bearer third"},
	}
	var last []string
	for i, s := range steps {
		src.set(s.token, s.err)
		got := b.header()
		if len(got) != 1 || got[0] != s.want {
			t.Errorf("step %d: header() = %q; want %q", i, got, s.want)
		}
		if i == 2 && &got[0] != &last[0] {
			t.Errorf("step %d: header() built anew for the same token; want it reused", i)
		}
		last = got
	}
}

// fakeTokenSource returns the token or error last set.
type fakeTokenSource struct {
	cur atomic.Pointer[oauth2.Token]
	err atomic.Pointer[error]
}

func (s *fakeTokenSource) set(token string, err error) {
	s.cur.Store(&oauth2.Token{AccessToken: token})
	s.err.Store(&err)
}

func (s *fakeTokenSource) Token() (*oauth2.Token, error) {
	if err := *s.err.Load(); err != nil {
		return nil, err
	}
	return s.cur.Load(), nil
}

func (s *fakeTokenSource) ResetTokenOlderThan(time.Time) {}

var _ transport.ResettableTokenSource = (*fakeTokenSource)(nil)

// TestForwardWithTokenFile: draproxy configured with a token file (as
// in a pod: rest.InClusterConfig) forwards with the file's token.
func TestForwardWithTokenFile(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	f.addSlice("a-1", "node-a")
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(f.proxyToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startProxy(t, f, func(o *options) {
		o.Upstream.BearerToken = ""
		o.Upstream.BearerTokenFile = file
	})
	token := f.token(driverOn("node-a"))
	f.seen()
	if code, body := h.do(t, http.MethodGet, "/apis/resource.k8s.io/v1/resourceslices/a-1", token, nil, nil); code != http.StatusOK {
		t.Fatalf("GET = %d %s; want 200", code, body)
	}
	for _, r := range f.seen() {
		if got := r.Header.Get("Authorization"); got != "Bearer "+f.proxyToken {
			t.Errorf("%s %s: Authorization = %q; want draproxy's token from the file", r.Method, r.Path, got)
		}
	}
}
