package httpauth_test

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/httpauth"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// countingConversion counts verified chains: the x509 authenticator calls the
// conversion once per successful verification.
type countingConversion struct{ n atomic.Int64 }

func (c *countingConversion) User(chain []*x509.Certificate) (*authenticator.Response, bool, error) {
	c.n.Add(1)
	return x509request.CommonNameUserConversion.User(chain)
}

type certFixture struct {
	root, inter *testCA
	leaf        *x509.Certificate
	clock       *clocktesting.FakeClock
	conv        *countingConversion
	auth        authenticator.Request
}

// newCertFixture builds root (valid 10 days) -> intermediate (valid 2 days)
// -> leaf "node-exporter" in group "metrics" (valid 5 days): the chain
// expires with the intermediate.
func newCertFixture(t *testing.T, cacheSize int) *certFixture {
	t.Helper()
	f := &certFixture{clock: clocktesting.NewFakeClock(t0), conv: &countingConversion{}}
	f.root = newRootCA(t, "root", t0.Add(-time.Hour), t0.Add(10*24*time.Hour))
	f.inter = f.root.intermediate(t, "intermediate", t0.Add(-time.Hour), t0.Add(2*24*time.Hour))
	f.leaf, _ = f.inter.client(t, "node-exporter", []string{"metrics"}, t0.Add(-time.Hour), t0.Add(5*24*time.Hour))
	a, err := httpauth.NewClientCertAuthenticator(httpauth.ClientCertOptions{
		ClientCA: f.root.pool(), UserConversion: f.conv, CacheSize: cacheSize, Clock: f.clock,
	})
	if err != nil {
		t.Fatalf("NewClientCertAuthenticator() error %v", err)
	}
	f.auth = a
	return f
}

func (f *certFixture) authenticate(chain ...*x509.Certificate) (*authenticator.Response, bool, error) {
	return f.auth.AuthenticateRequest(withCerts(httptest.NewRequest("GET", "/metrics", nil), chain...))
}

func TestClientCertIdentity(t *testing.T) {
	t.Parallel()
	f := newCertFixture(t, 0)
	resp, ok, err := f.authenticate(f.leaf, f.inter.cert)
	if err != nil || !ok {
		t.Fatalf("AuthenticateRequest(valid chain) = %v, %v; want ok", ok, err)
	}
	u := resp.User
	if u.GetName() != "node-exporter" || !cmp.Equal(u.GetGroups(), []string{"metrics", user.AllAuthenticated}) {
		t.Errorf("AuthenticateRequest(valid chain).User = %q %v; want node-exporter [metrics system:authenticated]", u.GetName(), u.GetGroups())
	}
	if got := u.GetExtra()[user.CredentialIDKey]; len(got) != 1 || len(got[0]) != len("X509SHA256=")+64 {
		t.Errorf("credential-id extra = %v; want X509SHA256=<fingerprint>", got)
	}
	if _, isWrapped := u.(interface{ Unwrap() user.Info }); isWrapped {
		t.Errorf("User has an Unwrap method; want the plain converted user")
	}

	t.Run("no certificate", func(t *testing.T) {
		resp, ok, err := f.auth.AuthenticateRequest(httptest.NewRequest("GET", "/", nil))
		if resp != nil || ok || err != nil {
			t.Errorf("AuthenticateRequest(no TLS) = %v, %v, %v; want nil, false, nil", resp, ok, err)
		}
	})
	t.Run("untrusted CA", func(t *testing.T) {
		other := newRootCA(t, "other", t0.Add(-time.Hour), t0.Add(24*time.Hour))
		leaf, _ := other.client(t, "node-exporter", []string{"metrics"}, t0.Add(-time.Hour), t0.Add(24*time.Hour))
		_, ok, err := f.authenticate(leaf)
		if ok || !errors.Is(err, reviewauth.ErrUnauthenticated) {
			t.Errorf("AuthenticateRequest(untrusted) = %v, %v; want an error matching ErrUnauthenticated", ok, err)
		}
	})
	t.Run("missing intermediate", func(t *testing.T) {
		_, ok, err := f.authenticate(f.leaf)
		if ok || !errors.Is(err, reviewauth.ErrUnauthenticated) {
			t.Errorf("AuthenticateRequest(leaf only) = %v, %v; want an error matching ErrUnauthenticated", ok, err)
		}
	})
	t.Run("server certificate", func(t *testing.T) {
		key := newKey(t)
		srv := sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: "node-exporter"}, NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, &key.PublicKey, f.inter, nil)
		_, ok, err := f.authenticate(srv, f.inter.cert)
		if ok || !errors.Is(err, reviewauth.ErrUnauthenticated) {
			t.Errorf("AuthenticateRequest(server-auth cert) = %v, %v; want an error matching ErrUnauthenticated", ok, err)
		}
	})
	t.Run("nil CA", func(t *testing.T) {
		if a, err := httpauth.NewClientCertAuthenticator(httpauth.ClientCertOptions{}); err == nil || a != nil {
			t.Errorf("NewClientCertAuthenticator(no CA) = %v, %v; want an error", a, err)
		}
	})
}

func TestClientCertCacheExpiry(t *testing.T) {
	t.Parallel()
	f := newCertFixture(t, 0)
	verify := func(step string, wantOK bool, wantVerifications int64) {
		t.Helper()
		_, ok, err := f.authenticate(f.leaf, f.inter.cert)
		if ok != wantOK || (err != nil) == wantOK {
			t.Fatalf("%s: AuthenticateRequest = %v, %v; want ok %v", step, ok, err, wantOK)
		}
		if got := f.conv.n.Load(); got != wantVerifications {
			t.Fatalf("%s: verifications = %d; want %d", step, got, wantVerifications)
		}
	}
	verify("first request", true, 1)
	verify("second request is cached", true, 1)
	f.clock.SetTime(f.inter.cert.NotAfter.Add(-time.Nanosecond))
	verify("just before the intermediate expires", true, 1)
	f.clock.SetTime(f.inter.cert.NotAfter)
	verify("at the intermediate's NotAfter", true, 1)
	f.clock.SetTime(f.inter.cert.NotAfter.Add(time.Nanosecond))
	verify("1ns after the intermediate's NotAfter (leaf still valid)", false, 1)
	verify("still expired", false, 1)
}

func TestClientCertCacheKeyIsWholeChain(t *testing.T) {
	t.Parallel()
	f := newCertFixture(t, 0)
	if _, ok, err := f.authenticate(f.leaf, f.inter.cert); !ok || err != nil {
		t.Fatalf("AuthenticateRequest(leaf, intermediate) = %v, %v; want ok", ok, err)
	}
	// The same leaf with an extra (irrelevant) certificate is another chain:
	// it is verified, not served from the cache.
	if _, ok, err := f.authenticate(f.leaf, f.inter.cert, f.root.cert); !ok || err != nil {
		t.Fatalf("AuthenticateRequest(leaf, intermediate, root) = %v, %v; want ok", ok, err)
	}
	if got := f.conv.n.Load(); got != 2 {
		t.Errorf("verifications = %d; want 2 (one per distinct chain)", got)
	}
	// The leaf alone must not hit the entry of the verified chain.
	if _, ok, err := f.authenticate(f.leaf); ok || err == nil {
		t.Errorf("AuthenticateRequest(leaf only) = %v, %v; want a verification failure", ok, err)
	}
}

func TestClientCertCacheSize(t *testing.T) {
	t.Parallel()
	f := newCertFixture(t, 2)
	leaves := make([]*x509.Certificate, 3)
	for i := range leaves {
		leaves[i], _ = f.inter.client(t, "c", nil, t0.Add(-time.Hour), t0.Add(time.Hour))
	}
	steps := []struct {
		leaf int
		want int64 // verifications after the step
	}{
		{0, 1}, {1, 2}, // at the limit: both cached
		{0, 2}, {1, 2},
		{2, 3}, // limit+1: evicts the least recently used (0)
		{1, 3}, {2, 3},
		{0, 4}, // evicted, verified again
	}
	for i, s := range steps {
		if _, ok, err := f.authenticate(leaves[s.leaf], f.inter.cert); !ok || err != nil {
			t.Fatalf("step %d: AuthenticateRequest(leaf %d) = %v, %v; want ok", i, s.leaf, ok, err)
		}
		if got := f.conv.n.Load(); got != s.want {
			t.Fatalf("step %d (leaf %d): verifications = %d; want %d", i, s.leaf, got, s.want)
		}
	}
}

func TestClientCertCacheDisabled(t *testing.T) {
	t.Parallel()
	f := newCertFixture(t, -1)
	for i := 1; i <= 3; i++ {
		if _, ok, err := f.authenticate(f.leaf, f.inter.cert); !ok || err != nil {
			t.Fatalf("AuthenticateRequest #%d = %v, %v; want ok", i, ok, err)
		}
		if got := f.conv.n.Load(); got != int64(i) {
			t.Fatalf("after request %d: verifications = %d; want %d", i, got, i)
		}
	}
}

func TestClientCertAndToken(t *testing.T) {
	t.Parallel()
	f := newCertFixture(t, 0)
	other := newRootCA(t, "other", t0.Add(-time.Hour), t0.Add(24*time.Hour))
	untrusted, _ := other.client(t, "system:admin", []string{"metrics"}, t0.Add(-time.Hour), t0.Add(24*time.Hour))
	noCN, _ := f.inter.client(t, "", []string{"metrics"}, t0.Add(-time.Hour), t0.Add(24*time.Hour))

	tests := []struct {
		name        string
		chain       []*x509.Certificate
		token       string
		wantCode    int
		wantUser    string
		wantReviews int64
	}{
		{name: "certificate alone", chain: []*x509.Certificate{f.leaf, f.inter.cert}, wantCode: 200, wantUser: "node-exporter"},
		{name: "token alone", token: scraperToken, wantCode: 200, wantUser: scraper.Name, wantReviews: 1},
		{name: "both: certificate wins, token not reviewed", chain: []*x509.Certificate{f.leaf, f.inter.cert}, token: scraperToken, wantCode: 200, wantUser: "node-exporter"},
		{name: "both with a bad token: certificate wins", chain: []*x509.Certificate{f.leaf, f.inter.cert}, token: badToken, wantCode: 200, wantUser: "node-exporter"},
		{name: "invalid certificate alone", chain: []*x509.Certificate{untrusted}, wantCode: 401},
		{name: "invalid certificate with a valid token", chain: []*x509.Certificate{untrusted}, token: scraperToken, wantCode: 401},
		{name: "certificate without CN falls back to token", chain: []*x509.Certificate{noCN, f.inter.cert}, token: scraperToken, wantCode: 200, wantUser: scraper.Name, wantReviews: 1},
		{name: "certificate without CN and no token", chain: []*x509.Certificate{noCN, f.inter.cert}, wantCode: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tokens := &fakeTokens{}
			mw := newMiddleware(t, httpauth.Options{Authenticator: tokens, ClientCertificates: f.auth})
			r := get("/metrics", tt.token)
			if tt.chain != nil {
				r = withCerts(r, tt.chain...)
			}
			w, s := serve(mw, r)
			if w.Code != tt.wantCode {
				t.Fatalf("%s: code = %d; want %d (body %s)", tt.name, w.Code, tt.wantCode, w.Body)
			}
			if tt.wantCode == 200 && (s.user == nil || s.user.GetName() != tt.wantUser) {
				t.Errorf("%s: handler saw user %v; want %q", tt.name, s.user, tt.wantUser)
			}
			if tt.wantCode == 401 && w.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("%s: 401 without WWW-Authenticate", tt.name)
			}
			if got := tokens.calls.Load(); got != tt.wantReviews {
				t.Errorf("%s: token reviews = %d; want %d", tt.name, got, tt.wantReviews)
			}
			if s.called && s.header.Get("Authorization") != "" {
				t.Errorf("%s: handler saw an Authorization header", tt.name)
			}
		})
	}

	t.Run("certificates only", func(t *testing.T) {
		t.Parallel()
		mw, err := httpauth.New(httpauth.Options{ClientCertificates: f.auth, Authorizer: metricsOnly, Attributes: httpauth.Kubelet("node-1")})
		if err != nil {
			t.Fatal(err)
		}
		if w, _ := serve(mw, get("/metrics", scraperToken)); w.Code != 401 {
			t.Errorf("token without a token authenticator: code = %d; want 401", w.Code)
		}
		if w, _ := serve(mw, withCerts(get("/metrics", ""), f.leaf, f.inter.cert)); w.Code != 200 {
			t.Errorf("certificate: code = %d; want 200", w.Code)
		}
	})
}

// TestClientCertificatesMatchAPIServer: for certificates with and without
// organizations, with system:authenticated or system:unauthenticated among
// them, and CN system:anonymous, the user NewClientCertAuthenticator
// returns, and the one the middleware's authorizer and handler see, are
// the user k8s.io/apiserver's x509 authenticator gives in its union with
// the AuthenticatedGroupAdder (the API server's, the kubelet's and
// kube-rbac-proxy's stack); a cached answer is the same.
func TestClientCertificatesMatchAPIServer(t *testing.T) {
	t.Parallel()
	now := time.Now()
	root := newRootCA(t, "root", now.Add(-time.Hour), now.Add(time.Hour))
	opts := x509request.DefaultVerifyOptions()
	opts.Roots = root.pool()
	theirs := x509request.New(opts, x509request.CommonNameUserConversion)
	ours, err := httpauth.NewClientCertAuthenticator(httpauth.ClientCertOptions{ClientCA: root.pool()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		cn     string
		groups []string
	}{
		{"node-exporter", nil},
		{"node-exporter", []string{"metrics"}},
		{"scraper", []string{"metrics", user.AllAuthenticated}},
		{"scraper", []string{user.AllUnauthenticated}},
		{user.Anonymous, nil},
		{user.Anonymous, []string{"metrics"}},
		{"system:kube-apiserver", []string{"system:masters"}},
	} {
		leaf, _ := root.client(t, tt.cn, tt.groups, now.Add(-time.Hour), now.Add(time.Hour))
		want := toDefault(apiServerAuthenticate(t, theirs, withCerts(httptest.NewRequest("GET", "/", nil), leaf)))
		for _, round := range []string{"verified", "cached"} {
			resp, ok, err := ours.AuthenticateRequest(withCerts(httptest.NewRequest("GET", "/", nil), leaf))
			if !ok || err != nil {
				t.Fatalf("CN %q O %q, %s: AuthenticateRequest = %v, %v", tt.cn, tt.groups, round, ok, err)
			}
			if diff := cmp.Diff(want, toDefault(resp.User)); diff != "" {
				t.Errorf("CN %q O %q, %s: user (-apiserver +ours):\n%s", tt.cn, tt.groups, round, diff)
			}
		}
		var asked user.Info
		mw := newMiddleware(t, httpauth.Options{ClientCertificates: ours, Authorizer: authorizer.AuthorizerFunc(
			func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				asked = a.GetUser()
				return authorizer.DecisionAllow, "", nil
			})})
		if w, s := serve(mw, withCerts(get("/metrics", ""), leaf)); w.Code != 200 || !cmp.Equal(want, toDefault(s.user)) || !cmp.Equal(want, toDefault(asked)) {
			t.Errorf("CN %q O %q through the middleware: code %d, handler saw %+v, authorizer %+v; want %+v", tt.cn, tt.groups, w.Code, s.user, asked, want)
		}
	}
}

// neverExpires is RFC 5280's NotAfter for a certificate without a
// well-defined expiration date, 99991231235959Z (section 4.1.2.5).
var neverExpires = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// TestClientCertFarExpiry: a chain that never expires (every certificate
// at 99991231235959Z) is cached, and so is one whose expiry is exactly,
// just under and just over the largest time.Duration away, where
// notAfter-now+1ns used to overflow to a negative TTL and nothing was
// cached. The entry lives for the largest Duration, never past NotAfter:
// at that TTL minus 1ns it is still served, at the TTL the chain is
// verified again.
func TestClientCertFarExpiry(t *testing.T) {
	t.Parallel()
	const maxTTL = time.Duration(math.MaxInt64)
	root := newRootCA(t, "root", t0.Add(-time.Hour), neverExpires)
	leaf, _ := root.client(t, "node-exporter", []string{"metrics"}, t0.Add(-time.Hour), neverExpires)
	if got := leaf.NotAfter; !got.Equal(neverExpires) {
		t.Fatalf("leaf NotAfter = %v; want %v", got, neverExpires)
	}
	for _, tt := range []struct {
		name string
		now  time.Time
		// wantExpiry is when the cache entry expires.
		wantExpiry time.Time
	}{
		{"99991231235959Z from 2026", t0, t0.Add(maxTTL)},
		{"NotAfter exactly the largest Duration away", neverExpires.Add(-maxTTL), neverExpires},
		{"NotAfter 1ns more than the largest Duration away", neverExpires.Add(-maxTTL).Add(-time.Nanosecond), neverExpires.Add(-time.Nanosecond)},
		{"NotAfter 1ns less than the largest Duration away", neverExpires.Add(-maxTTL).Add(time.Nanosecond), neverExpires.Add(time.Nanosecond)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakeClock(tt.now)
			conv := &countingConversion{}
			a, err := httpauth.NewClientCertAuthenticator(httpauth.ClientCertOptions{ClientCA: root.pool(), UserConversion: conv, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			verify := func(step string, wantVerifications int64) {
				t.Helper()
				if _, ok, err := a.AuthenticateRequest(withCerts(httptest.NewRequest("GET", "/", nil), leaf)); !ok || err != nil {
					t.Fatalf("%s: AuthenticateRequest = %v, %v; want ok", step, ok, err)
				}
				if got := conv.n.Load(); got != wantVerifications {
					t.Fatalf("%s: verifications = %d; want %d", step, got, wantVerifications)
				}
			}
			verify("first request", 1)
			verify("second request is cached", 1)
			clk.SetTime(tt.wantExpiry.Add(-time.Nanosecond))
			verify("1ns before the entry's expiry", 1)
			clk.SetTime(tt.wantExpiry)
			if tt.wantExpiry.After(neverExpires) {
				// Past NotAfter: the chain is expired, and refused.
				if _, ok, err := a.AuthenticateRequest(withCerts(httptest.NewRequest("GET", "/", nil), leaf)); ok || err == nil {
					t.Fatalf("at the entry's expiry, past NotAfter: AuthenticateRequest = %v, %v; want refused", ok, err)
				}
				return
			}
			verify("at the entry's expiry: verified again", 2)
		})
	}
}
