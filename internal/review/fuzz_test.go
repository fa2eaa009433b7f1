package review_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/reviewauth/reviewauth/internal/review"
)

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// FuzzAnswer feeds arbitrary answers (code, headers, body) to Create: it
// must never panic, succeed only on a 2xx answer within the limit that is a
// TokenReview, and never put the body of an error answer in its error.
func FuzzAnswer(f *testing.F) {
	f.Add(201, "application/json", "", []byte(`{"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1","status":{"authenticated":true}}`))
	f.Add(403, "application/json", "", []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":403,"reason":"Forbidden"}`))
	f.Add(429, "text/plain", "7", []byte("slow down"))
	f.Add(201, "application/vnd.kubernetes.protobuf", "", []byte("k8s\x00\x0a\xff\xff\xff\xff\x0f\x01"))
	f.Add(200, "application/json", "", []byte(`{"kind":"SubjectAccessReview","apiVersion":"authorization.k8s.io/v1"}`))
	f.Add(201, "application/json", "", []byte(`{"spec":{"token":"eyJhbGciOiJSUzI1NiJ9.payload.sig"},"status":{"authenticated":true}}`))
	f.Add(201, "application/json", "", []byte(`{"kind":"TokenReview","spec":{"token":"eyJhbGciOiJSUzI1NiJ9.payload.sig"}}`))
	f.Fuzz(func(t *testing.T, code int, contentType, retryAfter string, body []byte) {
		if code < 100 || code > 999 {
			return
		}
		rt := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			h := http.Header{}
			h.Set("Content-Type", contentType)
			h.Set("Retry-After", retryAfter)
			return &http.Response{StatusCode: code, Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: -1, Request: r}, nil
		})
		c, err := review.NewClient(&rest.Config{Host: "https://apiserver.invalid", Transport: rt, QPS: -1})
		if err != nil {
			t.Fatal(err)
		}
		got, err := review.Create(context.Background(), c, tokenReviewPath, tokenReviewKind, newTokenReview())
		if err == nil {
			if code < 200 || code > 299 || got == nil || got.Kind != "TokenReview" {
				t.Fatalf("Create() = %+v, nil for a %d answer; want an error", got, code)
			}
			return
		}
		if errors.Is(err, review.ErrAnswerTooLarge) {
			return
		}
		// An answer echoes the token: no error may quote it whole.
		if len(bytes.TrimSpace(body)) >= 16 && strings.Contains(err.Error(), string(bytes.TrimSpace(body))) {
			t.Fatalf("error %q carries the answer's body", err)
		}
	})
}
