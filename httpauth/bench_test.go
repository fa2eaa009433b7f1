package httpauth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	tokenwebhook "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	sarwebhook "k8s.io/apiserver/plugin/pkg/authorizer/webhook"
	sarmetrics "k8s.io/apiserver/plugin/pkg/authorizer/webhook/metrics"
	"k8s.io/client-go/kubernetes"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/httpauth"
)

// BenchmarkMiddleware measures one authorized GET /metrics with a bearer
// token through httptest.NewRecorder, with warm caches, against one authtest
// server:
//
//   - none: the bare handler;
//   - reviewauth: httpauth.New over authn.Authenticator, authz.Authorizer
//     and the RequestInfo mapper (the same path parsing the API server's
//     filters do);
//   - apiserver: k8s.io/apiserver's WithRequestInfo, WithAuthentication and
//     WithAuthorization over its delegated token authenticator
//     (token/cache.New over the token webhook's NewFromInterface, behind
//     bearertoken.New) and its SubjectAccessReview webhook authorizer, with
//     the kubelet's cache TTLs (2m token, 5m/30s SAR).
//
// The added latency of a middleware is its ns/op minus none's.
func BenchmarkMiddleware(b *testing.B) {
	s := authtest.Start(b)
	s.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{promSA.Name}, Verbs: []string{"get"}, NonResourceURLs: []string{"/metrics"}}))
	token := s.MintToken(promSA, []string{testAudience}, time.Now().Add(24*time.Hour))
	auth := "Bearer " + token

	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	})

	// reviewauth
	tokens, err := authn.NewForConfig(s.Config(), authn.Options{Audiences: []string{testAudience}, SuccessTTL: 2 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	sar, err := authz.NewForConfig(s.Config(), authz.Options{AllowedTTL: 5 * time.Minute, DeniedTTL: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	mw, err := httpauth.New(httpauth.Options{Authenticator: tokens, Authorizer: sar, Attributes: httpauth.RequestInfo()})
	if err != nil {
		b.Fatal(err)
	}
	ours := mw(bare)

	// apiserver
	cs, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		b.Fatal(err)
	}
	noop := tokenwebhook.AuthenticatorMetrics{
		RecordRequestTotal:   func(context.Context, string) {},
		RecordRequestLatency: func(context.Context, string, float64) {},
	}
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	wh, err := tokenwebhook.NewFromInterface(cs.AuthenticationV1(), authenticator.Audiences{testAudience}, backoff, 10*time.Second, noop)
	if err != nil {
		b.Fatal(err)
	}
	theirTokens := bearertoken.New(tokencache.New(wh, false, 2*time.Minute, 10*time.Second))
	theirSAR, err := sarwebhook.NewFromInterface(cs.AuthorizationV1(), 5*time.Minute, 30*time.Second, backoff, authorizer.DecisionNoOpinion, sarmetrics.NoopAuthorizerMetrics{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	scheme := runtime.NewScheme()
	codecs := serializer.NewCodecFactory(scheme)
	theirs := filters.WithAuthorization(bare, theirSAR, codecs)
	theirs = filters.WithAuthentication(theirs, theirTokens, filters.Unauthorized(codecs), authenticator.Audiences{testAudience}, nil)
	theirs = filters.WithRequestInfo(theirs, &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")})

	r := httptest.NewRequest("GET", "/metrics", nil)
	authValue := []string{auth}
	variants := []struct {
		name string
		h    http.Handler
	}{{"none", bare}, {"reviewauth", ours}, {"apiserver", theirs}}
	for _, v := range variants {
		r.Header["Authorization"] = authValue
		w := httptest.NewRecorder()
		v.h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("%s: warming up: code %d (%s); want 200", v.name, w.Code, w.Body)
		}
	}
	tr, sars := s.Count(authtest.TokenReviews), s.Count(authtest.SubjectAccessReviews)
	b.Cleanup(func() {
		if n, m := s.Count(authtest.TokenReviews)-tr, s.Count(authtest.SubjectAccessReviews)-sars; n != 0 || m != 0 {
			b.Errorf("the warm benchmark sent %d TokenReviews and %d SubjectAccessReviews; want 0", n, m)
		}
	})
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r.Header["Authorization"] = authValue
				w := httptest.NewRecorder()
				v.h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("code %d; want 200", w.Code)
				}
			}
		})
	}
}

// BenchmarkClientCert measures authenticating a request that presents a
// client certificate chain (ECDSA P-256 leaf and intermediate under a root):
//
//   - apiserver: k8s.io/apiserver's x509 authenticator, which verifies the
//     chain on every request;
//   - reviewauth: NewClientCertAuthenticator, the same authenticator behind
//     a cache keyed by the chain's SHA-256, warm.
func BenchmarkClientCert(b *testing.B) {
	now := time.Now()
	root := newRootCA(b, "root", now.Add(-time.Hour), now.Add(24*time.Hour))
	inter := root.intermediate(b, "intermediate", now.Add(-time.Hour), now.Add(24*time.Hour))
	leaf, _ := inter.client(b, "system:node:node-1", []string{"system:nodes"}, now.Add(-time.Hour), now.Add(24*time.Hour))

	opts := x509request.DefaultVerifyOptions()
	opts.Roots = root.pool()
	theirs := x509request.New(opts, x509request.CommonNameUserConversion)
	ours, err := httpauth.NewClientCertAuthenticator(httpauth.ClientCertOptions{ClientCA: root.pool()})
	if err != nil {
		b.Fatal(err)
	}
	r := withCerts(httptest.NewRequest("GET", "/metrics", nil), leaf, inter.cert)
	for _, v := range []struct {
		name string
		a    authenticator.Request
	}{{"apiserver", theirs}, {"reviewauth", ours}} {
		if _, ok, err := v.a.AuthenticateRequest(r); !ok || err != nil {
			b.Fatalf("%s: warming up: %v, %v", v.name, ok, err)
		}
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if resp, ok, err := v.a.AuthenticateRequest(r); !ok || err != nil || resp.User.GetName() != "system:node:node-1" {
					b.Fatalf("AuthenticateRequest = %v, %v", ok, err)
				}
			}
		})
	}
}
