package authtest_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/authtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// clientset returns a client-go clientset for s.
func clientset(t testing.TB, s *authtest.Server) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		t.Fatalf("kubernetes.NewForConfig() = %v", err)
	}
	return cs
}

func tokenReview(t testing.TB, cs kubernetes.Interface, token string, audiences ...string) authenticationv1.TokenReviewStatus {
	t.Helper()
	tr, err := cs.AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenReviews().Create() = %v; want no error", err)
	}
	return tr.Status
}

var backup = &user.DefaultInfo{
	Name:   "system:serviceaccount:default:backup",
	UID:    "6f1f0d63-5b1c-4f2e-9c55-0b4b0a0e8d11",
	Groups: []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"},
	Extra: map[string][]string{
		"authentication.kubernetes.io/credential-id": {"JTI=8f0f6a4e-1c1e-4a43-a3a8-6b4d2c1b3b52"},
		"authentication.kubernetes.io/pod-name":      {"backup-0"},
		"authentication.kubernetes.io/pod-uid":       {"1d2e3f40-0000-4000-8000-000000000001"},
		"authentication.kubernetes.io/node-name":     {"node-a"},
		"authentication.kubernetes.io/node-uid":      {"1d2e3f40-0000-4000-8000-000000000002"},
	},
}

var backupInfo = authenticationv1.UserInfo{
	Username: backup.Name,
	UID:      backup.UID,
	Groups:   backup.Groups,
	Extra: map[string]authenticationv1.ExtraValue{
		"authentication.kubernetes.io/credential-id": {"JTI=8f0f6a4e-1c1e-4a43-a3a8-6b4d2c1b3b52"},
		"authentication.kubernetes.io/pod-name":      {"backup-0"},
		"authentication.kubernetes.io/pod-uid":       {"1d2e3f40-0000-4000-8000-000000000001"},
		"authentication.kubernetes.io/node-name":     {"node-a"},
		"authentication.kubernetes.io/node-uid":      {"1d2e3f40-0000-4000-8000-000000000002"},
	},
}

func TestTokenReview(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	cs := clientset(t, s)
	const (
		snap    = "snap-token-0123456789"
		multi   = "multi-token-0123456789"
		noAud   = "noaud-token-0123456789"
		revoked = "revoked-token-0123456789"
	)
	s.AddToken(snap, backup, []string{"snap.example"}, time.Time{})
	s.AddToken(multi, backup, []string{"a", "b", "c"}, time.Time{})
	s.AddToken(noAud, backup, nil, time.Time{})
	s.AddToken(revoked, backup, []string{"snap.example"}, time.Time{})
	s.RevokeToken(revoked)

	tests := []struct {
		name      string
		token     string
		audiences []string
		want      authenticationv1.TokenReviewStatus
	}{
		{
			name: "matching audience", token: snap, audiences: []string{"snap.example"},
			want: authenticationv1.TokenReviewStatus{Authenticated: true, User: backupInfo, Audiences: []string{"snap.example"}},
		},
		{
			name: "one of several requested audiences", token: snap, audiences: []string{"other", "snap.example"},
			want: authenticationv1.TokenReviewStatus{Authenticated: true, User: backupInfo, Audiences: []string{"snap.example"}},
		},
		{
			name: "intersection in token order", token: multi, audiences: []string{"c", "x", "a"},
			want: authenticationv1.TokenReviewStatus{Authenticated: true, User: backupInfo, Audiences: []string{"a", "c"}},
		},
		{
			name: "audience mismatch", token: snap, audiences: []string{"other"},
			want: authenticationv1.TokenReviewStatus{Error: `[invalid bearer token, token audiences ["snap.example"] is invalid for the target audiences ["other"]]`},
		},
		{
			name: "empty audiences reviewed against the API audience", token: snap,
			want: authenticationv1.TokenReviewStatus{Error: `[invalid bearer token, token audiences ["snap.example"] is invalid for the target audiences ["https://kubernetes.default.svc"]]`},
		},
		{
			name: "token without audiences accepted for the API audience", token: noAud,
			want: authenticationv1.TokenReviewStatus{Authenticated: true, User: backupInfo, Audiences: []string{"https://kubernetes.default.svc"}},
		},
		{
			name: "token without audiences rejected for another audience", token: noAud, audiences: []string{"snap.example"},
			want: authenticationv1.TokenReviewStatus{Error: `[invalid bearer token, token audiences ["https://kubernetes.default.svc"] is invalid for the target audiences ["snap.example"]]`},
		},
		{
			name: "unknown token", token: "unknown-token-0123456789", audiences: []string{"snap.example"},
			want: authenticationv1.TokenReviewStatus{Error: "[invalid bearer token, token lookup failed]"},
		},
		{
			name: "well-formed unknown JWT", token: authtest.MintJWT(map[string]any{"aud": []string{"snap.example"}, "sub": backup.Name}), audiences: []string{"snap.example"},
			want: authenticationv1.TokenReviewStatus{Error: "[invalid bearer token, token lookup failed]"},
		},
		{
			name: "revoked token", token: revoked, audiences: []string{"snap.example"},
			want: authenticationv1.TokenReviewStatus{Error: "[invalid bearer token, service account token has been invalidated]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tokenReview(t, cs, tt.token, tt.audiences...)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("TokenReview(%q) status mismatch (-want +got):\n%s", tt.audiences, diff)
			}
			if strings.Contains(got.Error, tt.token) {
				t.Errorf("TokenReview(%q).Status.Error = %q; contains the token", tt.audiences, got.Error)
			}
		})
	}
}

func TestTokenReviewRecordsAndCounts(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	cs := clientset(t, s)
	s.AddToken("tok-a", backup, []string{"x"}, time.Time{})
	tokenReview(t, cs, "tok-a", "x")
	tokenReview(t, cs, "tok-b", "y")
	if got := s.Count(authtest.TokenReviews); got != 2 {
		t.Errorf("Count(TokenReviews) = %d; want 2", got)
	}
	if got := s.Count(authtest.SubjectAccessReviews); got != 0 {
		t.Errorf("Count(SubjectAccessReviews) = %d; want 0", got)
	}
	var tokens []string
	for _, tr := range s.TokenReviews() {
		tokens = append(tokens, tr.Spec.Token)
	}
	if want := []string{"tok-a", "tok-b"}; !slices.Equal(tokens, want) {
		t.Errorf("TokenReviews() tokens = %q; want %q", tokens, want)
	}
	s.Reset()
	if got, n := s.Count(authtest.TokenReviews), len(s.TokenReviews()); got != 0 || n != 0 {
		t.Errorf("after Reset: Count = %d, len(TokenReviews()) = %d; want 0, 0", got, n)
	}
}

func TestTokenReviewAPIAudiences(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t, authtest.WithAPIAudiences("https://issuer.example", "api"))
	cs := clientset(t, s)
	s.AddToken("tok", backup, []string{"api"}, time.Time{})
	got := tokenReview(t, cs, "tok")
	if !got.Authenticated || !slices.Equal(got.Audiences, []string{"api"}) {
		t.Errorf("TokenReview(no audiences) = %+v; want authenticated for [api]", got)
	}
}

func TestTokenReviewExpiry(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	exp := start.Add(10 * time.Minute)
	tests := []struct {
		name      string
		now       time.Time
		wantAuth  bool
		wantError string
	}{
		{name: "well before exp", now: start, wantAuth: true},
		{name: "1ns before exp", now: exp.Add(-time.Nanosecond), wantAuth: true},
		{name: "at exp", now: exp, wantError: "[invalid bearer token, service account token has expired]"},
		{name: "after exp", now: exp.Add(time.Hour), wantError: "[invalid bearer token, service account token has expired]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakePassiveClock(start)
			s := authtest.Start(t, authtest.WithClock(clk))
			cs := clientset(t, s)
			token := s.MintToken(backup, []string{"snap.example"}, exp)
			clk.SetTime(tt.now)
			got := tokenReview(t, cs, token, "snap.example")
			if got.Authenticated != tt.wantAuth || got.Error != tt.wantError {
				t.Errorf("TokenReview at %v = authenticated %v, error %q; want %v, %q", tt.now, got.Authenticated, got.Error, tt.wantAuth, tt.wantError)
			}
		})
	}
}

func TestMintToken(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	s := authtest.Start(t, authtest.WithClock(clocktesting.NewFakePassiveClock(now)))
	exp := now.Add(time.Hour)
	token := s.MintToken(backup, []string{"snap.example"}, exp)
	other := s.MintToken(backup, []string{"snap.example"}, exp)
	if token == other {
		t.Errorf("MintToken() twice = same token; want distinct tokens")
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("MintToken() has %d dot-separated parts; want 3", len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("payload base64url decode: %v", err)
	}
	var claims struct {
		Aud  []string `json:"aud"`
		Sub  string   `json:"sub"`
		Exp  int64    `json:"exp"`
		Iat  int64    `json:"iat"`
		Nbf  int64    `json:"nbf"`
		Jti  string   `json:"jti"`
		Kube struct {
			Namespace      string            `json:"namespace"`
			ServiceAccount map[string]string `json:"serviceaccount"`
			Pod            map[string]string `json:"pod"`
			Node           map[string]string `json:"node"`
		} `json:"kubernetes.io"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatalf("payload JSON: %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"aud", claims.Aud, []string{"snap.example"}},
		{"sub", claims.Sub, backup.Name},
		{"exp", claims.Exp, exp.Unix()},
		{"iat", claims.Iat, now.Unix()},
		{"nbf", claims.Nbf, now.Unix()},
		{"namespace", claims.Kube.Namespace, "default"},
		{"serviceaccount", claims.Kube.ServiceAccount, map[string]string{"name": "backup", "uid": backup.UID}},
		{"pod", claims.Kube.Pod, map[string]string{"name": "backup-0", "uid": "1d2e3f40-0000-4000-8000-000000000001"}},
		{"node", claims.Kube.Node, map[string]string{"name": "node-a", "uid": "1d2e3f40-0000-4000-8000-000000000002"}},
	}
	for _, c := range checks {
		if !cmp.Equal(c.got, c.want) {
			t.Errorf("MintToken() claim %s = %v; want %v", c.name, c.got, c.want)
		}
	}
	if claims.Jti == "" {
		t.Errorf("MintToken() claim jti is empty; want a unique id")
	}
}

func TestMintJWT(t *testing.T) {
	t.Parallel()
	token := authtest.MintJWT(map[string]any{"sub": "x", "aud": "y"})
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("MintJWT() has %d parts; want 3", len(parts))
	}
	for i, p := range parts {
		if _, err := base64.RawURLEncoding.DecodeString(p); err != nil {
			t.Errorf("MintJWT() part %d is not base64url: %v", i, err)
		}
	}
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	if got, want := string(payload), `{"aud":"y","sub":"x"}`; got != want {
		t.Errorf("MintJWT() payload = %s; want %s", got, want)
	}
}

// TestConcurrentUse exercises every mutating method while reviews are being
// served; run with -race.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	cs := clientset(t, s)
	s.AddServiceAccount("default", "backup")
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			token := s.MintToken(backup, []string{"x"}, time.Time{})
			if st := tokenReview(t, cs, token, "x"); !st.Authenticated {
				t.Errorf("TokenReview(fresh token %d) = %+v; want authenticated", i, st)
			}
			s.RevokeToken(token)
			if st := tokenReview(t, cs, token, "x"); st.Authenticated {
				t.Errorf("TokenReview(revoked token %d) = authenticated; want rejected", i)
			}
		})
		wg.Go(func() {
			s.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{"*"}, Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}))
			s.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{EmptyStatus: true, Times: 1})
			_ = s.SubjectAccessReviews()
			_ = s.TokenReviews()
			_ = s.Count(authtest.TokenReviews) + s.InFlight(authtest.TokenReviews) + s.MaxInFlight(authtest.TokenReviews)
			s.Reset()
			s.ClearFaults()
			s.AddServiceAccount("default", "backup")
		})
	}
	wg.Wait()
}
