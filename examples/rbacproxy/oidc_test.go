package main

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	jose "gopkg.in/go-jose/go-jose.v2"

	"github.com/reviewauth/reviewauth/authtest"
)

// issuer is an OpenID provider for tests: discovery and keys over TLS, and
// RS256 ID tokens.
type issuer struct {
	srv    *httptest.Server
	key    *rsa.PrivateKey
	down   atomic.Bool
	caFile string
}

func newIssuer(t *testing.T, dir string) *issuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &issuer{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		if is.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/keys",
			"id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	is.srv = httptest.NewTLSServer(mux)
	t.Cleanup(is.srv.Close)
	is.caFile = filepath.Join(dir, "oidc-ca.pem")
	if err := os.WriteFile(is.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: is.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return is
}

func (is *issuer) token(t *testing.T, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: is.key}, (&jose.SignerOptions{}).WithHeader("kid", "k1").WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]any{"iss": is.srv.URL, "aud": "rbacproxy-client", "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	for k, v := range claims {
		base[k] = v
	}
	payload, _ := json.Marshal(base)
	jws, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	s, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOIDC (issue #12): --oidc-* tokens are verified by k8s.io/apiserver's
// OIDC authenticator, composed with the TokenReview authenticator: a token
// of the issuer is authenticated locally (no TokenReview) and authorized
// as its email; one for another client is refused without a TokenReview;
// service-account tokens still go to the TokenReview; an issuer whose keys
// were never fetched is 503, not 401.
func TestOIDC(t *testing.T) {
	e := newEnv(t)
	is := newIssuer(t, e.dir)
	args := e.args("--oidc-issuer="+is.srv.URL, "--oidc-clientID=rbacproxy-client", "--oidc-ca-file="+is.caFile)
	p := start(t, args...)
	good := is.token(t, map[string]any{"sub": "alice", "email": "alice@example.com"})
	// The authenticator fetches the issuer's keys in the background.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _ := p.do(t, "GET", "/metrics", good, nil)
		if code == 200 {
			break
		}
		if code != 503 || time.Now().After(deadline) {
			t.Fatalf("OIDC token = %d; want 200 once the issuer's keys are fetched", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	reviews := e.api.Count(authtest.TokenReviews)
	for _, tt := range []struct {
		name, token string
		want        int
	}{
		{"issuer's token", good, 200},
		{"issuer's token for another client", is.token(t, map[string]any{"sub": "alice", "email": "alice@example.com", "aud": "other"}), 401},
		{"issuer's token, email not verified", is.token(t, map[string]any{"sub": "m", "email": "alice@example.com", "email_verified": false}), 401},
		{"issuer's token, expired", is.token(t, map[string]any{"sub": "alice", "email": "alice@example.com", "exp": time.Now().Add(-time.Hour).Unix()}), 401},
		{"issuer's token, user without RBAC", is.token(t, map[string]any{"sub": "bob", "email": "bob@example.com"}), 403},
	} {
		if code, _ := p.do(t, "GET", "/metrics", tt.token, nil); code != tt.want {
			t.Errorf("%s = %d; want %d", tt.name, code, tt.want)
		}
	}
	if got := e.api.Count(authtest.TokenReviews) - reviews; got != 0 {
		t.Errorf("TokenReviews for OIDC tokens = %d; want 0", got)
	}
	if code, _ := p.do(t, "GET", "/metrics", e.scraper, nil); code != 200 {
		t.Errorf("service-account token with OIDC on = %d; want 200", code)
	}
	if e.api.Count(authtest.TokenReviews)-reviews != 1 {
		t.Errorf("TokenReviews for a service-account token = %d; want 1", e.api.Count(authtest.TokenReviews)-reviews)
	}

	// An issuer that could not be reached at start: could not check.
	down := newIssuer(t, e.dir)
	down.down.Store(true)
	p2 := start(t, e.args("--oidc-issuer="+down.srv.URL, "--oidc-clientID=rbacproxy-client", "--oidc-ca-file="+down.caFile)...)
	if code, _ := p2.do(t, "GET", "/metrics", down.token(t, map[string]any{"sub": "alice", "email": "alice@example.com"}), nil); code != 503 {
		t.Errorf("OIDC token while the issuer is unreachable = %d; want 503", code)
	}
}
