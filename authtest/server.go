package authtest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/clock"
)

// DefaultAPIAudience is the audience a [Server] reviews tokens against when a
// TokenReview names no audiences and [WithAPIAudiences] was not given. It is
// the default of a real kube-apiserver.
const DefaultAPIAudience = "https://kubernetes.default.svc"

// Option configures a [Server] in [NewServer] or [Start].
type Option func(*Server)

// WithClock makes the server read time from c: token expiry, issue times and
// TokenRequest expiration timestamps. A nil c, or no WithClock, means the real
// clock. Use k8s.io/utils/clock/testing.FakeClock to test expiry without
// sleeping.
func WithClock(c clock.PassiveClock) Option {
	return func(s *Server) {
		if c != nil {
			s.clock = c
		}
	}
}

// WithAPIAudiences sets the server's own API audiences: the audiences a
// TokenReview with empty spec.audiences is reviewed against, the audiences
// of a TokenRequest that names none, and the audiences of tokens registered
// without any. No WithAPIAudiences, or no auds, means [DefaultAPIAudience].
func WithAPIAudiences(auds ...string) Option {
	return func(s *Server) {
		if len(auds) > 0 {
			s.apiAudiences = append([]string(nil), auds...)
		}
	}
}

// Server is a fake Kubernetes API server serving TokenReview,
// SubjectAccessReview and TokenRequest over TLS. Create it with [NewServer]
// or [Start]. All methods are safe for concurrent use, including while
// requests are being served.
type Server struct {
	ts           *httptest.Server
	clock        clock.PassiveClock
	apiAudiences []string
	adminToken   string
	adminUser    string
	adminGroups  []string
	http2        bool
	closed       chan struct{}
	closeOnce    sync.Once

	mu              sync.Mutex
	tokens          map[string]*tokenEntry
	revoked         map[string]bool
	serviceAccounts map[string]saEntry // key namespace/name
	policy          Policy
	adminPolicy     Policy
	faults          map[Endpoint][]*faultEntry
	blocks          map[Endpoint]chan struct{}
	stats           map[Endpoint]*endpointStats
	keys            []signingKey // keys[0] signs
	tokenReviews    []authenticationv1.TokenReview
	sars            []authorizationv1.SubjectAccessReview
}

// NewServer starts a TLS server and returns it. Close it with
// [Server.Close]. With no options the server uses the real clock, the API
// audience [DefaultAPIAudience], HTTP/1.1 only, no tokens, no service
// accounts, the policy that allows nothing, an administrator allowed
// everything, and no faults.
func NewServer(opts ...Option) *Server {
	s := &Server{
		clock:           clock.RealClock{},
		apiAudiences:    []string{DefaultAPIAudience},
		adminToken:      "authtest-admin-" + randomString(24),
		adminUser:       DefaultAdminUser,
		adminGroups:     []string{"system:masters"},
		closed:          make(chan struct{}),
		tokens:          make(map[string]*tokenEntry),
		revoked:         make(map[string]bool),
		serviceAccounts: make(map[string]saEntry),
		faults:          make(map[Endpoint][]*faultEntry),
		blocks:          make(map[Endpoint]chan struct{}),
		stats:           make(map[Endpoint]*endpointStats),
		keys:            []signingKey{newSigningKey()},
	}
	for _, opt := range opts {
		if opt != nil {
			opt(s)
		}
	}
	s.ts = httptest.NewUnstartedServer(http.HandlerFunc(s.serveHTTP))
	// Close resets connections mid-handshake; those errors are expected.
	s.ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.ts.EnableHTTP2 = s.http2
	s.ts.StartTLS()
	return s
}

// Start is [NewServer] followed by t.Cleanup(s.Close).
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := NewServer(opts...)
	t.Cleanup(s.Close)
	return s
}

// Close stops the server: it releases every blocked or delayed request,
// closes client connections and waits for handlers to return. It is safe to
// call more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.ts.CloseClientConnections()
		s.ts.Close()
	})
}

// URL returns the server's base URL, https://127.0.0.1:port.
func (s *Server) URL() string { return s.ts.URL }

// AdminToken returns the bearer token that every request must carry; the
// same token is in [Server.Config].
func (s *Server) AdminToken() string { return s.adminToken }

// Config returns a new client configuration for the server: its host, the
// CA data that verifies its TLS certificate, and the administrator bearer
// token. Client-side rate limiting is off (QPS -1); set QPS and Burst on the
// returned copy to test throttling.
func (s *Server) Config() *rest.Config {
	return &rest.Config{
		Host:        s.ts.URL,
		BearerToken: s.adminToken,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: s.caPEM(),
		},
		QPS: -1,
	}
}

// WriteKubeconfig writes a kubeconfig file for the server at path, with one
// cluster, one user carrying the administrator token, and a current context
// named "authtest".
func (s *Server) WriteKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["authtest"] = &clientcmdapi.Cluster{
		Server:                   s.ts.URL,
		CertificateAuthorityData: s.caPEM(),
	}
	cfg.AuthInfos["authtest"] = &clientcmdapi.AuthInfo{Token: s.adminToken}
	cfg.Contexts["authtest"] = &clientcmdapi.Context{Cluster: "authtest", AuthInfo: "authtest"}
	cfg.CurrentContext = "authtest"
	return clientcmd.WriteToFile(*cfg, path)
}

func (s *Server) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.ts.Certificate().Raw})
}

func (s *Server) now() time.Time { return s.clock.Now() }

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

// serveHTTP authenticates the administrator, routes the request and runs
// the endpoint's handler inside the observation, blocking and fault logic.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.isAdmin(r) {
		writeStatus(w, unauthorizedStatus())
		return
	}
	if strings.TrimSuffix(r.URL.Path, "/") == "/openid/v1/jwks" {
		if r.Method != http.MethodGet {
			writeStatus(w, methodNotAllowedStatus(r.Method, r.URL.Path))
			return
		}
		done := s.begin(JWKS)
		defer done()
		f, handled := s.intercept(w, r, JWKS)
		if handled {
			return
		}
		if f.MalformedBody {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"keys": [`))
			return
		}
		s.serveJWKS(w, r)
		return
	}
	e, ns, name, ok := route(r.URL.Path)
	if !ok {
		writeStatus(w, notFoundStatus())
		return
	}
	if r.Method != http.MethodPost {
		writeStatus(w, methodNotAllowedStatus(r.Method, r.URL.Path))
		return
	}
	done := s.begin(e)
	defer done()
	switch e {
	case TokenReviews:
		if !s.adminForbidden(w, "authentication.k8s.io", "tokenreviews", "", "") {
			s.serveTokenReview(w, r)
		}
	case SubjectAccessReviews:
		if !s.adminForbidden(w, "authorization.k8s.io", "subjectaccessreviews", "", "") {
			s.serveSubjectAccessReview(w, r)
		}
	case TokenRequests:
		if !s.adminForbidden(w, "", "serviceaccounts", "token", ns) {
			s.serveTokenRequest(w, r, ns, name)
		}
	case SelfSubjectReviews:
		s.serveSelfSubjectReview(w, r)
	case SelfSubjectAccessReviews:
		s.serveSelfSubjectAccessReview(w, r)
	}
}

func (s *Server) isAdmin(r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(auth) <= len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return false
	}
	return strings.TrimSpace(auth[len(prefix):]) == s.adminToken
}

// route maps a path to an endpoint; for TokenRequests it also returns the
// namespace and service account name.
func route(path string) (e Endpoint, ns, name string, ok bool) {
	switch strings.TrimSuffix(path, "/") {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		return TokenReviews, "", "", true
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		return SubjectAccessReviews, "", "", true
	case "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
		return SelfSubjectAccessReviews, "", "", true
	case "/apis/authentication.k8s.io/v1/selfsubjectreviews":
		return SelfSubjectReviews, "", "", true
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	// api v1 namespaces {ns} serviceaccounts {name} token
	if len(parts) == 7 && parts[0] == "api" && parts[1] == "v1" && parts[2] == "namespaces" &&
		parts[4] == "serviceaccounts" && parts[6] == "token" && parts[3] != "" && parts[5] != "" {
		return TokenRequests, parts[3], parts[5], true
	}
	return "", "", "", false
}
