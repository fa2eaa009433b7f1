package grpcauth_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/reviewauth/reviewauth/metrics"
)

func TestDecisionMetricsAndSpans(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	opts := testOptions(nil)
	opts.Metrics, opts.TracerProvider = m, tp
	conn := serve(t, opts)
	calls := []struct{ method, token, name string }{
		{methodGet, aliceToken, "a"},        // allowed
		{methodGet, bobToken, "a"},          // denied
		{methodGet, "wrong-token-000", "a"}, // unauthenticated
		{methodGet, outageToken, "a"},       // unavailable
		{methodGet, aliceToken, ""},         // bad request: name missing
		{methodNop, aliceToken, "a"},        // no rule: denied
	}
	for _, c := range calls {
		_ = conn.Invoke(withBearer(t.Context(), c.token), c.method, newRequest("", "ns", c.name), new(wrapperspb.StringValue))
	}
	want := `
# HELP reviewauth_decisions_total Requests decided by a transport adapter, by transport (http, grpc) and outcome (allowed, denied, unauthenticated, unavailable).
# TYPE reviewauth_decisions_total counter
reviewauth_decisions_total{outcome="allowed",transport="grpc"} 1
reviewauth_decisions_total{outcome="allowed",transport="http"} 0
reviewauth_decisions_total{outcome="always_allowed",transport="grpc"} 0
reviewauth_decisions_total{outcome="always_allowed",transport="http"} 0
reviewauth_decisions_total{outcome="bad_request",transport="grpc"} 1
reviewauth_decisions_total{outcome="bad_request",transport="http"} 0
reviewauth_decisions_total{outcome="denied",transport="grpc"} 2
reviewauth_decisions_total{outcome="denied",transport="http"} 0
reviewauth_decisions_total{outcome="unauthenticated",transport="grpc"} 1
reviewauth_decisions_total{outcome="unauthenticated",transport="http"} 0
reviewauth_decisions_total{outcome="unavailable",transport="grpc"} 1
reviewauth_decisions_total{outcome="unavailable",transport="http"} 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "reviewauth_decisions_total"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range rec.Ended() {
		line := s.Name()
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), "secret-token") {
				t.Fatalf("span attribute %s carries a token", kv.Key)
			}
			if kv.Key == "reviewauth.decision" || kv.Key == "rpc.method" {
				line += " " + kv.Value.Emit()
			}
		}
		got = append(got, line)
	}
	want2 := []string{
		"reviewauth.grpcauth " + methodGet + " allowed",
		"reviewauth.grpcauth " + methodGet + " denied",
		"reviewauth.grpcauth " + methodGet + " unauthenticated",
		"reviewauth.grpcauth " + methodGet + " unavailable",
		"reviewauth.grpcauth " + methodGet + " bad_request",
	}
	if strings.Join(got, "\n") != strings.Join(want2, "\n") {
		t.Fatalf("spans:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want2, "\n"))
	}
}

// TestUnavailableMessageIsGeneric: the cause of an outage (which names the
// API server's address), and the text of a plain authenticator error (which
// may say anything, the token included), are logged, not sent to the
// caller.
func TestUnavailableMessageIsGeneric(t *testing.T) {
	t.Parallel()
	conn := serve(t, testOptions(nil))
	for _, tt := range []struct {
		token string
		code  codes.Code
		msg   string
	}{
		{outageToken, codes.Unavailable, "grpcauth: the authentication or authorization service is unavailable; retry later"},
		{echoToken, codes.Unauthenticated, "grpcauth: invalid bearer token"},
	} {
		err := conn.Invoke(withBearer(t.Context(), tt.token), methodGet, newRequest("", "ns", "a"), new(wrapperspb.StringValue))
		st, _ := status.FromError(err)
		if st.Code() != tt.code || st.Message() != tt.msg {
			t.Errorf("token %s: status = %v %q; want %v %q", tt.token[:4], st.Code(), st.Message(), tt.code, tt.msg)
		}
	}
}
