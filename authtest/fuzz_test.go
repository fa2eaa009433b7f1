package authtest_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/reviewauth/reviewauth/authtest"
)

// FuzzRequestBody posts arbitrary bodies to every endpoint, as JSON and as
// protobuf: the server must answer 201 or a 4xx Status, never fail, and
// never echo the token of a rejected review in an error.
func FuzzRequestBody(f *testing.F) {
	s := authtest.Start(f)
	s.AddServiceAccount("default", "backup")
	s.AddToken("fuzz-token", backup, []string{"x"}, time.Time{})
	seeds := []string{
		`{"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1","spec":{"token":"fuzz-token","audiences":["x"]}}`,
		`{"kind":"SubjectAccessReview","apiVersion":"authorization.k8s.io/v1","spec":{"user":"u","nonResourceAttributes":{"verb":"get","path":"/"}}}`,
		`{"kind":"TokenRequest","apiVersion":"authentication.k8s.io/v1","spec":{"audiences":["x"],"expirationSeconds":600,"boundObjectRef":{"kind":"Pod","name":"p","uid":"u"}}}`,
		`{"spec":{"token":"fuzz-token"}}`,
		`null`,
		`[]`,
		`{"spec":`,
		"k8s\x00\x0a\x00",
		"",
	}
	for _, seed := range seeds {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	paths := []string{
		"/apis/authentication.k8s.io/v1/tokenreviews",
		"/apis/authorization.k8s.io/v1/subjectaccessreviews",
		"/api/v1/namespaces/default/serviceaccounts/backup/token",
	}
	f.Fuzz(func(t *testing.T, body string, protobuf bool) {
		contentType := "application/json"
		if protobuf {
			contentType = "application/vnd.kubernetes.protobuf"
		}
		for _, path := range paths {
			resp, got := post(t, s, path, contentType, body)
			switch {
			case resp.StatusCode == http.StatusCreated:
			case resp.StatusCode >= 400 && resp.StatusCode < 500:
				var st metav1.Status
				if err := json.Unmarshal(got, &st); err != nil || st.Kind != "Status" || int(st.Code) != resp.StatusCode {
					t.Errorf("POST %s = %d with body %q; want a Status body", path, resp.StatusCode, got)
				}
			default:
				t.Errorf("POST %s (%s) = %d; want 201 or 4xx", path, contentType, resp.StatusCode)
			}
		}
	})
}
