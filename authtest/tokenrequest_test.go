package authtest_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/authtest"
)

func TestTokenRequest(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	saGroups := []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"}
	tests := []struct {
		name       string
		spec       authenticationv1.TokenRequestSpec
		review     []string // audiences of the TokenReview of the token
		wantAuds   []string
		wantTTL    time.Duration
		wantExtras map[string]authenticationv1.ExtraValue // besides credential-id
	}{
		{
			name:     "audience and expiration",
			spec:     authenticationv1.TokenRequestSpec{Audiences: []string{"snap.example"}, ExpirationSeconds: new(int64(600))},
			review:   []string{"snap.example"},
			wantAuds: []string{"snap.example"},
			wantTTL:  10 * time.Minute,
		},
		{
			name:     "defaults: API audience, one hour",
			review:   nil,
			wantAuds: []string{authtest.DefaultAPIAudience},
			wantTTL:  time.Hour,
		},
		{
			name: "bound to a pod",
			spec: authenticationv1.TokenRequestSpec{
				Audiences:      []string{"a", "b"},
				BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "backup-0", UID: "pod-uid-1"},
			},
			review:   []string{"b"},
			wantAuds: []string{"b"},
			wantTTL:  time.Hour,
			wantExtras: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/pod-name": {"backup-0"},
				"authentication.kubernetes.io/pod-uid":  {"pod-uid-1"},
			},
		},
		{
			name: "bound to a node",
			spec: authenticationv1.TokenRequestSpec{
				Audiences:      []string{"dra.example"},
				BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: "node-a", UID: "node-uid-1"},
			},
			review:   []string{"dra.example"},
			wantAuds: []string{"dra.example"},
			wantTTL:  time.Hour,
			wantExtras: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/node-name": {"node-a"},
				"authentication.kubernetes.io/node-uid":  {"node-uid-1"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakePassiveClock(now)
			s := authtest.Start(t, authtest.WithClock(clk))
			cs := clientset(t, s)
			s.AddServiceAccount("default", "backup")
			treq, err := cs.CoreV1().ServiceAccounts("default").CreateToken(context.Background(), "backup", &authenticationv1.TokenRequest{Spec: tt.spec}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("CreateToken() = %v; want no error", err)
			}
			if got, want := treq.Status.ExpirationTimestamp.Time, now.Add(tt.wantTTL); !got.Equal(want) {
				t.Errorf("CreateToken().Status.ExpirationTimestamp = %v; want %v", got, want)
			}
			token := treq.Status.Token
			if n := strings.Count(token, "."); n != 2 {
				t.Errorf("CreateToken() token has %d dots; want a JWT", n)
			}
			st := tokenReview(t, cs, token, tt.review...)
			if !st.Authenticated || !slices.Equal(st.Audiences, tt.wantAuds) {
				t.Fatalf("TokenReview(requested token) = %+v; want authenticated for %q", st, tt.wantAuds)
			}
			u := st.User
			if u.Username != "system:serviceaccount:default:backup" || u.UID == "" || !slices.Equal(u.Groups, saGroups) {
				t.Errorf("TokenReview user = %q uid %q groups %q; want system:serviceaccount:default:backup, a UID, %q", u.Username, u.UID, u.Groups, saGroups)
			}
			credID := u.Extra["authentication.kubernetes.io/credential-id"]
			if len(credID) != 1 || !strings.HasPrefix(credID[0], "JTI=") {
				t.Errorf("credential-id extra = %q; want one JTI=<id>", credID)
			}
			var claims struct {
				Jti string `json:"jti"`
			}
			payload, _ := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[1])
			if err := json.Unmarshal(payload, &claims); err != nil || len(credID) == 1 && credID[0] != "JTI="+claims.Jti {
				t.Errorf("token jti = %q (%v); want the credential-id %q", claims.Jti, err, credID)
			}
			extras := maps(u.Extra)
			delete(extras, "authentication.kubernetes.io/credential-id")
			if diff := cmp.Diff(tt.wantExtras, extras, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("extras mismatch (-want +got):\n%s", diff)
			}
			// The token expires with the clock.
			clk.SetTime(now.Add(tt.wantTTL))
			if st := tokenReview(t, cs, token, tt.review...); st.Authenticated {
				t.Errorf("TokenReview at expiry = authenticated; want rejected")
			}
		})
	}
}

func maps(m map[string]authenticationv1.ExtraValue) map[string]authenticationv1.ExtraValue {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]authenticationv1.ExtraValue, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestTokenRequestErrors(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	cs := clientset(t, s)
	s.AddServiceAccount("default", "backup")
	tests := []struct {
		name      string
		namespace string
		sa        string
		spec      authenticationv1.TokenRequestSpec
		want      func(error) bool
	}{
		{"unknown service account", "default", "nobody", authenticationv1.TokenRequestSpec{}, apierrors.IsNotFound},
		{"known name, other namespace", "kube-system", "backup", authenticationv1.TokenRequestSpec{}, apierrors.IsNotFound},
		{"expiration below 10 minutes", "default", "backup", authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(599))}, apierrors.IsInvalid},
		{"unsupported bound kind", "default", "backup", authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "ConfigMap", Name: "x"}}, apierrors.IsInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := cs.CoreV1().ServiceAccounts(tt.namespace).CreateToken(context.Background(), tt.sa, &authenticationv1.TokenRequest{Spec: tt.spec}, metav1.CreateOptions{})
			if !tt.want(err) {
				t.Errorf("CreateToken(%s/%s) = %v; want the expected error kind", tt.namespace, tt.sa, err)
			}
		})
	}
	_, err := cs.CoreV1().ServiceAccounts("default").CreateToken(context.Background(), "backup", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("CreateToken() at exactly 10 minutes = %v; want no error", err)
	}
}

func TestWriteKubeconfig(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	s.AddToken("tok", backup, []string{"x"}, time.Time{})
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := s.WriteKubeconfig(path); err != nil {
		t.Fatalf("WriteKubeconfig() = %v", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("clientcmd.BuildConfigFromFlags(kubeconfig) = %v", err)
	}
	if cfg.Host != s.URL() {
		t.Errorf("kubeconfig host = %q; want %q", cfg.Host, s.URL())
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st := tokenReview(t, cs, "tok", "x"); !st.Authenticated {
		t.Errorf("TokenReview through the kubeconfig = %+v; want authenticated", st)
	}
}
