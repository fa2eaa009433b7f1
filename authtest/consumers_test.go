package authtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	sarwebhook "k8s.io/apiserver/plugin/pkg/authorizer/webhook"
	sarmetrics "k8s.io/apiserver/plugin/pkg/authorizer/webhook/metrics"

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

// TestApiserverSARWebhook drives k8s.io/apiserver's webhook authorizer
// against the server's policies and faults.
func TestApiserverSARWebhook(t *testing.T) {
	t.Parallel()
	backupRule := authtest.Rule{
		Users: []string{backup.Name}, Verbs: []string{"get"},
		APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots"}, Namespaces: []string{"default"},
	}
	denyAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
		return false, true, "denied by test", ""
	}
	tests := []struct {
		name      string
		policy    authtest.Policy
		fault     *authtest.Fault
		namespace string
		want      authorizer.Decision
		wantErr   bool
	}{
		{name: "allowed by rule", policy: authtest.Rules(backupRule), namespace: "default", want: authorizer.DecisionAllow},
		{name: "no rule matches", policy: authtest.Rules(backupRule), namespace: "other", want: authorizer.DecisionNoOpinion},
		{name: "default policy", namespace: "default", want: authorizer.DecisionNoOpinion},
		{name: "denied", policy: denyAll, namespace: "default", want: authorizer.DecisionDeny},
		{name: "allowed and denied", policy: authtest.Rules(backupRule), fault: &authtest.Fault{BothAllowedAndDenied: true}, namespace: "default", want: authorizer.DecisionDeny, wantErr: true},
		{name: "503 with deny on error", policy: authtest.Rules(backupRule), fault: &authtest.Fault{Status: 503}, namespace: "default", want: authorizer.DecisionDeny, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := authtest.Start(t)
			s.SetPolicy(tt.policy)
			if tt.fault != nil {
				s.InjectFault(authtest.SubjectAccessReviews, *tt.fault)
			}
			cs := clientset(t, s)
			backoff := wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1}
			a, err := sarwebhook.NewFromInterface(cs.AuthorizationV1(), time.Minute, time.Minute, backoff, authorizer.DecisionDeny, sarmetrics.NoopAuthorizerMetrics{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			attrs := authorizer.AttributesRecord{
				User: backup, Verb: "get", APIGroup: "snapshot.storage.k8s.io", Resource: "volumesnapshots",
				Namespace: tt.namespace, Name: "snap-1", ResourceRequest: true,
			}
			got, reason, err := a.Authorize(context.Background(), attrs)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("Authorize() = %v, %q, %v; want %v, error %v", got, reason, err, tt.want, tt.wantErr)
			}
			sars := s.SubjectAccessReviews()
			if len(sars) != 1 {
				t.Fatalf("len(SubjectAccessReviews()) = %d; want 1", len(sars))
			}
			if u := sars[0].Spec; u.User != backup.Name || u.UID != backup.UID || u.ResourceAttributes == nil || u.ResourceAttributes.Namespace != tt.namespace {
				t.Errorf("recorded SAR spec = %+v; want user %q uid %q namespace %q", u, backup.Name, backup.UID, tt.namespace)
			}
		})
	}
}
