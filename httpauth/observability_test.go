package httpauth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/spf13/pflag"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/util/cert"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/httpauth"
	"github.com/reviewauth/reviewauth/metrics"
)

func TestDecisionMetricsAndSpans(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	authn := authenticator.TokenFunc(func(_ context.Context, token string) (*authenticator.Response, bool, error) {
		switch token {
		case "good", "denied":
			return &authenticator.Response{User: &user.DefaultInfo{Name: token}}, true, nil
		case "down":
			return nil, false, &reviewauth.ReviewError{Review: "TokenReview"}
		}
		return nil, false, &reviewauth.RejectedError{Reason: "no"}
	})
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetUser().GetName() == "good" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionDeny, "no", nil
	})
	mw, err := httpauth.New(httpauth.Options{Authenticator: authn, Authorizer: authz, Attributes: httpauth.NonResource(),
		AlwaysAllowPaths: []string{"/healthz"}, Metrics: m, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, c := range []struct{ path, auth string }{
		{"/x", "Bearer good"}, {"/x", "Bearer good"}, {"/x", "Bearer denied"}, {"/x", "Bearer bad"},
		{"/x", "Bearer down"}, {"/x", ""}, {"/healthz", ""}, {"/a%2fb", "Bearer good"},
	} {
		r := httptest.NewRequest("GET", c.path, nil)
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	want := `
# HELP reviewauth_decisions_total Requests decided by a transport adapter, by transport (http, grpc) and outcome (allowed, denied, unauthenticated, unavailable).
# TYPE reviewauth_decisions_total counter
reviewauth_decisions_total{outcome="allowed",transport="grpc"} 0
reviewauth_decisions_total{outcome="allowed",transport="http"} 2
reviewauth_decisions_total{outcome="always_allowed",transport="grpc"} 0
reviewauth_decisions_total{outcome="always_allowed",transport="http"} 1
reviewauth_decisions_total{outcome="bad_request",transport="grpc"} 0
reviewauth_decisions_total{outcome="bad_request",transport="http"} 1
reviewauth_decisions_total{outcome="denied",transport="grpc"} 0
reviewauth_decisions_total{outcome="denied",transport="http"} 1
reviewauth_decisions_total{outcome="unauthenticated",transport="grpc"} 0
reviewauth_decisions_total{outcome="unauthenticated",transport="http"} 2
reviewauth_decisions_total{outcome="unavailable",transport="grpc"} 0
reviewauth_decisions_total{outcome="unavailable",transport="http"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "reviewauth_decisions_total"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == "reviewauth.decision" {
				got = append(got, s.Name()+"="+kv.Value.Emit())
			}
		}
	}
	wantSpans := "reviewauth.httpauth=allowed reviewauth.httpauth=allowed reviewauth.httpauth=denied reviewauth.httpauth=unauthenticated reviewauth.httpauth=unavailable reviewauth.httpauth=unauthenticated reviewauth.httpauth=always_allowed reviewauth.httpauth=bad_request"
	if strings.Join(got, " ") != wantSpans {
		t.Fatalf("spans = %v; want %v", got, wantSpans)
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pem")
	os.WriteFile(empty, []byte("not a pem"), 0o600)
	caPEM, _, err := cert.GenerateSelfSignedCertKey("ca.example", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "ca.pem")
	os.WriteFile(good, caPEM, 0o600)
	tests := []struct {
		name    string
		args    []string
		wantErr string
		wantNil bool
	}{
		{"unset: no client certificates", nil, "", true},
		{"missing file", []string{"--client-ca-file=" + filepath.Join(dir, "nope")}, "--client-ca-file", false},
		{"not a PEM", []string{"--client-ca-file=" + empty}, "--client-ca-file", false},
		{"a CA bundle", []string{"--client-ca-file=" + good}, "", false},
	}
	for _, tt := range tests {
		var f httpauth.Flags
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		f.AddFlags(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		err := f.Validate()
		if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s: Validate() = %v; want error %q", tt.name, err, tt.wantErr)
		}
		ca, err := f.ClientCertificates(httpauth.ClientCertOptions{})
		if tt.wantNil && (ca != nil || err != nil) {
			t.Errorf("%s: ClientCertificates() = (%v, %v); want nil", tt.name, ca, err)
		}
		if !tt.wantNil && tt.wantErr != "" && err == nil {
			t.Errorf("%s: ClientCertificates() = nil error; want one", tt.name)
		}
		if !tt.wantNil && tt.wantErr == "" && (ca == nil || err != nil) {
			t.Errorf("%s: ClientCertificates() = (%v, %v); want an authenticator", tt.name, ca, err)
		}
	}
}
