package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run() = %v", err)
	}
	want := []string{
		"good token, its own namespace      -> 200 OK as system:serviceaccount:apps:backup",
		"good token, another namespace      -> 403 PermissionDenied",
		"token for another audience         -> 401 Unauthenticated",
		"token for the API server itself    -> 401 Unauthenticated",
		"expired token                      -> 401 Unauthenticated",
		"malformed token                    -> 401 Unauthenticated",
		"API server down (503)              -> 503 Unavailable",
		"TokenReviews sent: 10 ",
		"SubjectAccessReviews sent: 2",
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q; got:\n%s", w, out.String())
		}
	}
}
