package authtest_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"

	"github.com/reviewauth/reviewauth/authtest"
)

// TestAdminPolicy: the administrator policy decides the administrator's
// own reviews (a 403 worded like a real server's) and its
// SelfSubjectAccessReviews; SelfSubjectReview names the administrator.
func TestAdminPolicy(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t, authtest.WithAdminUser("system:serviceaccount:ns:sidecar", "system:serviceaccounts"))
	cs := clientset(t, srv)
	ctx := context.Background()
	tok := srv.MintToken(&user.DefaultInfo{Name: "system:serviceaccount:ns:caller"}, []string{"aud"}, time.Time{})

	ssr, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ssr.Status.UserInfo; got.Username != "system:serviceaccount:ns:sidecar" || strings.Join(got.Groups, ",") != "system:serviceaccounts,system:authenticated" {
		t.Errorf("SelfSubjectReview = %+v; want the administrator with system:authenticated", got)
	}
	ssar := func(resource, group string) authorizationv1.SubjectAccessReviewStatus {
		t.Helper()
		got, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Group: group, Resource: resource}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Status
	}

	// The default: the administrator may do anything.
	if st := ssar("tokenreviews", "authentication.k8s.io"); !st.Allowed {
		t.Errorf("SSAR(create tokenreviews) by default = %+v; want allowed", st)
	}
	if _, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok, Audiences: []string{"aud"}}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("TokenReview by default = %v; want an answer", err)
	}

	// A service account without system:auth-delegator: SARs only.
	var seen authorizationv1.SubjectAccessReviewSpec
	srv.SetAdminPolicy(func(spec authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
		seen = spec
		return spec.ResourceAttributes.Resource == "subjectaccessreviews", false, "", ""
	})
	if st := ssar("tokenreviews", "authentication.k8s.io"); st.Allowed {
		t.Errorf("SSAR(create tokenreviews) = %+v; want not allowed", st)
	}
	if seen.User != "system:serviceaccount:ns:sidecar" {
		t.Errorf("policy saw user %q; want the administrator", seen.User)
	}
	if st := ssar("subjectaccessreviews", "authorization.k8s.io"); !st.Allowed {
		t.Errorf("SSAR(create subjectaccessreviews) = %+v; want allowed", st)
	}
	before := len(srv.TokenReviews())
	_, err = cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok}}, metav1.CreateOptions{})
	const want = `tokenreviews.authentication.k8s.io is forbidden: User "system:serviceaccount:ns:sidecar" cannot create resource "tokenreviews" in API group "authentication.k8s.io" at the cluster scope`
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Errorf("TokenReview without permission = %v; want 403 %q", err, want)
	}
	if n := len(srv.TokenReviews()); n != before {
		t.Errorf("a forbidden TokenReview was recorded (%d -> %d); want its body unread", before, n)
	}
	_, err = cs.CoreV1().ServiceAccounts("ns").CreateToken(ctx, "sa", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `cannot create resource "serviceaccounts/token" in API group "" in the namespace "ns"`) {
		t.Errorf("TokenRequest without permission = %v; want 403", err)
	}

	srv.SetAdminPolicy(nil)
	if st := ssar("tokenreviews", "authentication.k8s.io"); !st.Allowed {
		t.Errorf("SSAR after SetAdminPolicy(nil) = %+v; want allowed", st)
	}
}

// TestHTTP2: WithHTTP2 serves HTTP/2 to client-go, and a dropped answer
// resets the stream.
func TestHTTP2(t *testing.T) {
	t.Parallel()
	for _, h2 := range []bool{false, true} {
		var opts []authtest.Option
		if h2 {
			opts = append(opts, authtest.WithHTTP2())
		}
		srv := authtest.Start(t, opts...)
		hc, err := rest.HTTPClientFor(srv.Config())
		if err != nil {
			t.Fatal(err)
		}
		post := func() (*http.Response, error) {
			req, _ := http.NewRequest("POST", srv.URL()+"/apis/authentication.k8s.io/v1/selfsubjectreviews", strings.NewReader(`{}`))
			req.Header.Set("Content-Type", "application/json")
			return hc.Do(req)
		}
		resp, err := post()
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if want := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != want {
			t.Errorf("WithHTTP2=%v: protocol %s; want HTTP/%d", h2, resp.Proto, want)
		}
		srv.InjectFault(authtest.SelfSubjectReviews, authtest.Fault{DropConnection: true, Times: 1})
		if _, err := post(); err == nil {
			t.Errorf("WithHTTP2=%v: dropped answer gave no error", h2)
		} else if h2 && !strings.Contains(err.Error(), "stream error") {
			t.Errorf("WithHTTP2: dropped answer = %v; want a stream reset", err)
		}
		hc.CloseIdleConnections()
	}
}

// TestBodyBytes: a padded answer is exactly the size asked for, and still
// decodes.
func TestBodyBytes(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	srv.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{"*"}, Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}))
	hc, err := rest.HTTPClientFor(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	const size = 100_000
	srv.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{BodyBytes: size, Times: 1})
	req, _ := http.NewRequest("POST", srv.URL()+"/apis/authorization.k8s.io/v1/subjectaccessreviews",
		strings.NewReader(`{"spec":{"user":"u","resourceAttributes":{"verb":"get","resource":"pods"}}}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(body) != size {
		t.Fatalf("answer = %d bytes; want %d", len(body), size)
	}
	if !strings.Contains(string(body), `"allowed":true`) {
		t.Errorf("padded answer lost its status: %.200s", body)
	}
}
