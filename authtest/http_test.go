package authtest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/reviewauth/reviewauth/authtest"
)

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

func readAll(resp *http.Response) ([]byte, error) { return io.ReadAll(resp.Body) }

func decodeStatus(t testing.TB, resp *http.Response, body []byte) metav1.Status {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Status Content-Type = %q; want application/json", ct)
	}
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("Status body %q: %v", body, err)
	}
	if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure {
		t.Errorf("Status = kind %q, apiVersion %q, status %q; want Status, v1, Failure", st.Kind, st.APIVersion, st.Status)
	}
	if int(st.Code) != resp.StatusCode {
		t.Errorf("Status.Code = %d; want the HTTP status %d", st.Code, resp.StatusCode)
	}
	return st
}

func TestAdminTokenRequired(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	s.AddToken("user-token", backup, nil, time.Time{})
	tests := []struct {
		name  string
		token string
	}{
		{"no token", ""},
		{"wrong token", "not-the-admin-token"},
		{"a registered user token", "user-token"},
		{"admin token with a suffix", s.AdminToken() + "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := s.Config()
			cfg.BearerToken = tt.token
			resp, body := do(t, s, cfg, http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews", "application/json", `{"spec":{"token":"user-token"}}`)
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("POST tokenreviews with %s = %d; want 401", tt.name, resp.StatusCode)
			}
			st := decodeStatus(t, resp, body)
			if st.Reason != metav1.StatusReasonUnauthorized || st.Message != "Unauthorized" {
				t.Errorf("401 Status = reason %q, message %q; want Unauthorized, Unauthorized", st.Reason, st.Message)
			}
			if resp.Header.Get("WWW-Authenticate") != "" {
				t.Errorf("401 has WWW-Authenticate %q; want none", resp.Header.Get("WWW-Authenticate"))
			}
			if strings.Contains(string(body), "user-token") {
				t.Errorf("401 body %s contains the token", body)
			}
		})
	}
	if got := s.Count(authtest.TokenReviews); got != 0 {
		t.Errorf("Count(TokenReviews) after unauthenticated requests = %d; want 0", got)
	}
}

func TestRequestDecoding(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	s.AddToken("tok", backup, []string{"x"}, time.Time{})
	const trPath = "/apis/authentication.k8s.io/v1/tokenreviews"
	tests := []struct {
		name        string
		method      string
		path        string
		contentType string
		body        string
		wantCode    int
		wantReason  metav1.StatusReason
	}{
		{"full TokenReview", "POST", trPath, "application/json", `{"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1","spec":{"token":"tok","audiences":["x"]}}`, 201, ""},
		{"without kind and apiVersion", "POST", trPath, "application/json", `{"spec":{"token":"tok","audiences":["x"]}}`, 201, ""},
		{"trailing slash", "POST", trPath + "/", "application/json", `{"spec":{"token":"tok"}}`, 201, ""},
		{"wrong kind", "POST", trPath, "application/json", `{"kind":"SubjectAccessReview","apiVersion":"authentication.k8s.io/v1","spec":{"token":"tok"}}`, 400, metav1.StatusReasonBadRequest},
		{"wrong apiVersion", "POST", trPath, "application/json", `{"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1beta1","spec":{"token":"tok"}}`, 400, metav1.StatusReasonBadRequest},
		{"malformed JSON", "POST", trPath, "application/json", `{"spec":`, 400, metav1.StatusReasonBadRequest},
		{"unknown field", "POST", trPath, "application/json", `{"spec":{"token":"tok","audience":["x"]}}`, 400, metav1.StatusReasonBadRequest},
		{"trailing data", "POST", trPath, "application/json", `{"spec":{"token":"tok"}} {}`, 400, metav1.StatusReasonBadRequest},
		{"empty token", "POST", trPath, "application/json", `{"spec":{}}`, 400, metav1.StatusReasonBadRequest},
		{"unsupported media type", "POST", trPath, "text/plain", `{"spec":{"token":"tok"}}`, 415, metav1.StatusReasonUnsupportedMediaType},
		{"bad protobuf", "POST", trPath, "application/vnd.kubernetes.protobuf", "k8s\x00garbage", 400, metav1.StatusReasonBadRequest},
		{"GET", "GET", trPath, "", "", 405, metav1.StatusReasonMethodNotAllowed},
		{"unknown path", "POST", "/apis/authentication.k8s.io/v1/tokenrequests", "application/json", `{}`, 404, metav1.StatusReasonNotFound},
		{"token request without name", "POST", "/api/v1/namespaces/default/serviceaccounts//token", "application/json", `{}`, 404, metav1.StatusReasonNotFound},
		{"SAR with a TokenReview body", "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", "application/json", `{"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1","spec":{"token":"tok"}}`, 400, metav1.StatusReasonBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := do(t, s, s.Config(), tt.method, tt.path, tt.contentType, tt.body)
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("%s %s = %d %s; want %d", tt.method, tt.path, resp.StatusCode, body, tt.wantCode)
			}
			if tt.wantCode >= 400 {
				if st := decodeStatus(t, resp, body); st.Reason != tt.wantReason {
					t.Errorf("Status.Reason = %q; want %q", st.Reason, tt.wantReason)
				}
				if strings.Contains(string(body), `"tok"`) {
					t.Errorf("error body %s contains the token", body)
				}
			}
		})
	}
}

// TestTokenReviewJSONShape checks the raw answer: 201, kind and apiVersion
// set, and a rejection without an authenticated field.
func TestTokenReviewJSONShape(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	s.AddToken("tok", backup, []string{"snap.example"}, time.Time{})
	tests := []struct {
		name     string
		body     string
		wantAuth bool
	}{
		{"accepted", `{"spec":{"token":"tok","audiences":["snap.example"]}}`, true},
		{"rejected", `{"spec":{"token":"tok","audiences":["other"]}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := post(t, s, "/apis/authentication.k8s.io/v1/tokenreviews", "application/json", tt.body)
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("POST tokenreviews = %d; want 201", resp.StatusCode)
			}
			var got struct {
				Kind       string                     `json:"kind"`
				APIVersion string                     `json:"apiVersion"`
				Status     map[string]json.RawMessage `json:"status"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			if got.Kind != "TokenReview" || got.APIVersion != "authentication.k8s.io/v1" {
				t.Errorf("answer kind %q, apiVersion %q; want TokenReview, authentication.k8s.io/v1", got.Kind, got.APIVersion)
			}
			_, hasAuth := got.Status["authenticated"]
			_, hasErr := got.Status["error"]
			if hasAuth != tt.wantAuth || hasErr == tt.wantAuth {
				t.Errorf("status fields %s: authenticated present %v, error present %v; want %v, %v", body, hasAuth, hasErr, tt.wantAuth, !tt.wantAuth)
			}
		})
	}
}

// TestJWKSMediaType: like a real API server (go-restful, a route that
// produces only application/jwk-set+json), the key set is refused with 406
// to a client that accepts only application/json.
func TestJWKSMediaType(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	client := s.Config()
	hc, err := rest.HTTPClientFor(client)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		accept string
		want   int
	}{
		{"", 200},
		{"application/jwk-set+json", 200},
		{"application/json, */*", 200},
		{"application/*;q=0.5", 200},
		{"application/json", 406},
	} {
		req, _ := http.NewRequest("GET", s.URL()+"/openid/v1/jwks", nil)
		if tt.accept != "" {
			req.Header.Set("Accept", tt.accept)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("GET /openid/v1/jwks, Accept %q = %d; want %d", tt.accept, resp.StatusCode, tt.want)
		}
	}
}
