package authtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"

	"github.com/reviewauth/reviewauth/authtest"
)

// TestApiserverTokenWebhook drives k8s.io/apiserver's own token webhook
// authenticator against the server, to check that a real consumer reads
// its answers as it reads a kube-apiserver's.
func TestApiserverTokenWebhook(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		fault      *authtest.Fault
		unknown    bool // review a well-formed token the server does not know
		audiences  []string
		wantOK     bool
		wantErr    string // substring; "" wants no error when not ok
		wantReview int
	}{
		{name: "accepted", audiences: []string{"snap.example"}, wantOK: true, wantReview: 1},
		// The rejection carries no status.audiences, so the webhook falls back
		// to its implicit audiences, finds no overlap with "other" and
		// drops status.error: (nil, false, nil).
		{name: "wrong audience", audiences: []string{"other"}, wantReview: 1},
		{name: "unknown token", unknown: true, wantErr: "[invalid bearer token, token lookup failed]", wantReview: 1},
		{name: "500 is retried", fault: &authtest.Fault{Status: 500, Times: 1}, audiences: []string{"snap.example"}, wantOK: true, wantReview: 2},
		{name: "503 without Retry-After is not retried", fault: &authtest.Fault{Status: 503, Times: 1}, audiences: []string{"snap.example"}, wantErr: "503", wantReview: 1},
		{name: "connection reset is retried", fault: &authtest.Fault{DropConnection: true, Times: 1}, audiences: []string{"snap.example"}, wantOK: true, wantReview: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := authtest.Start(t)
			token := s.MintToken(backup, []string{"snap.example"}, time.Time{})
			if tt.fault != nil {
				s.InjectFault(authtest.TokenReviews, *tt.fault)
			}
			cs := clientset(t, s)
			backoff := wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 3}
			noop := webhook.AuthenticatorMetrics{
				RecordRequestTotal:   func(context.Context, string) {},
				RecordRequestLatency: func(context.Context, string, float64) {},
			}
			a, err := webhook.NewFromInterface(cs.AuthenticationV1(), authenticator.Audiences{authtest.DefaultAPIAudience}, backoff, 0, noop)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if tt.audiences != nil {
				ctx = authenticator.WithAudiences(ctx, tt.audiences)
			}
			tok := token
			if tt.unknown {
				tok = authtest.MintJWT(map[string]any{"sub": backup.Name})
			}
			resp, ok, err := a.AuthenticateToken(ctx, tok)
			if ok != tt.wantOK {
				t.Fatalf("AuthenticateToken() ok = %v, err = %v; want ok %v", ok, err, tt.wantOK)
			}
			if tt.wantOK {
				if resp.User.GetName() != backup.Name || resp.User.GetUID() != backup.UID {
					t.Errorf("AuthenticateToken() user = %q (uid %q); want %q (uid %q)", resp.User.GetName(), resp.User.GetUID(), backup.Name, backup.UID)
				}
			} else if tt.wantErr == "" && err != nil {
				t.Errorf("AuthenticateToken() error = %v; want nil", err)
			} else if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("AuthenticateToken() error = %v; want it to contain %q", err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), tok) {
				t.Errorf("AuthenticateToken() error contains the token")
			}
			if got := s.Count(authtest.TokenReviews); got != tt.wantReview {
				t.Errorf("Count(TokenReviews) = %d; want %d", got, tt.wantReview)
			}
		})
	}
}
