package suite_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

const (
	extraCredentialID = "authentication.kubernetes.io/credential-id"
	extraNodeName     = "authentication.kubernetes.io/node-name"
	extraNodeUID      = "authentication.kubernetes.io/node-uid"
	extraPodName      = "authentication.kubernetes.io/pod-name"
	extraPodUID       = "authentication.kubernetes.io/pod-uid"
)

// TestSmoke checks that the real API server answers as CONTEXT.md records:
// audience-scoped tokens, rejections as status.error, and pod-bound extras.
func TestSmoke(t *testing.T) {
	c := cluster.Get(t)
	c.CreateNamespace(t, "apps")
	c.CreateServiceAccount(t, "apps", "backup")
	tok := c.RequestToken(t, "apps", "backup", cluster.TokenOptions{Audiences: []string{"snap.example"}, ExpirationSeconds: 600})
	t.Logf("TokenRequest(apps/backup, [snap.example], 600s): %d-byte token", len(tok))

	t.Run("audience matches", func(t *testing.T) {
		st := c.ReviewToken(t, tok, "snap.example")
		if !st.Authenticated || st.Error != "" {
			t.Fatalf("TokenReview(snap.example) = authenticated %v, error %q; want authenticated", st.Authenticated, st.Error)
		}
		if want := []string{"snap.example"}; !slices.Equal(st.Audiences, want) {
			t.Errorf("TokenReview(snap.example).audiences = %q; want %q", st.Audiences, want)
		}
		if want := "system:serviceaccount:apps:backup"; st.User.Username != want {
			t.Errorf("TokenReview(snap.example).user = %q; want %q", st.User.Username, want)
		}
		for _, g := range []string{"system:serviceaccounts", "system:serviceaccounts:apps", "system:authenticated"} {
			if !slices.Contains(st.User.Groups, g) {
				t.Errorf("TokenReview(snap.example).groups = %q; want it to contain %q", st.User.Groups, g)
			}
		}
		if st.User.UID == "" {
			t.Errorf("TokenReview(snap.example).uid = empty; want the ServiceAccount UID")
		}
		if id := st.User.Extra[extraCredentialID]; len(id) != 1 || !strings.HasPrefix(id[0], "JTI=") {
			t.Errorf("TokenReview(snap.example).extra[%s] = %q; want one JTI=<uuid>", extraCredentialID, id)
		}
	})

	rejected := []struct {
		name      string
		audiences []string
		wantInErr string
	}{
		{name: "other audience", audiences: []string{"other"}, wantInErr: `is invalid for the target audiences ["other"]`},
		{name: "no audience means the server's own", audiences: nil, wantInErr: `is invalid for the target audiences ["` + cluster.DefaultAudience + `"]`},
	}
	for _, tc := range rejected {
		t.Run(tc.name, func(t *testing.T) {
			st := c.ReviewToken(t, tok, tc.audiences...)
			t.Logf("observed: TokenReview(%q).status.error = %q", tc.audiences, st.Error)
			if st.Authenticated {
				t.Fatalf("TokenReview(%q).authenticated = true; want false", tc.audiences)
			}
			if !strings.Contains(st.Error, tc.wantInErr) {
				t.Errorf("TokenReview(%q).error = %q; want it to contain %q", tc.audiences, st.Error, tc.wantInErr)
			}
			if st.User.Username != "" {
				t.Errorf("TokenReview(%q).user = %q; want none", tc.audiences, st.User.Username)
			}
		})
	}

	t.Run("garbage token", func(t *testing.T) {
		st := c.ReviewToken(t, "not-a-token", "snap.example")
		t.Logf("observed: TokenReview(garbage).status.error = %q", st.Error)
		if st.Authenticated || st.Error == "" {
			t.Errorf("TokenReview(garbage) = authenticated %v, error %q; want rejected with an error", st.Authenticated, st.Error)
		}
	})

	t.Run("pod-bound token carries the node", func(t *testing.T) {
		node := c.CreateNode(t, cluster.UniqueName("node-a"))
		pod := c.CreatePod(t, "apps", "backup-0", cluster.PodOptions{NodeName: node.Name, ServiceAccount: "backup"})
		ptok := c.RequestToken(t, "apps", "backup", cluster.TokenOptions{Audiences: []string{"snap.example"}, BoundPod: pod})
		st := c.ReviewToken(t, ptok, "snap.example")
		if !st.Authenticated {
			t.Fatalf("TokenReview(pod-bound) = error %q; want authenticated", st.Error)
		}
		for key, want := range map[string]string{
			extraNodeName: node.Name,
			extraNodeUID:  string(node.UID),
			extraPodName:  pod.Name,
			extraPodUID:   string(pod.UID),
		} {
			if got := st.User.Extra[key]; !slices.Equal(got, authenticationv1.ExtraValue{want}) {
				t.Errorf("TokenReview(pod-bound).extra[%s] = %q; want [%q]", key, got, want)
			}
		}

		// kube-apiserver caches successful token authentications for 10s
		// (TokenSuccessCacheTTL, not a flag), TokenReviews included: a deleted
		// pod's token keeps authenticating until that entry expires.
		c.DeletePod(t, "apps", pod.Name)
		deleted := time.Now()
		var last authenticationv1.TokenReviewStatus
		err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			st, err := c.TokenReview(ctx, ptok, "snap.example")
			last = st
			return !st.Authenticated, err
		})
		if err != nil {
			t.Fatalf("TokenReview(token of deleted pod) = authenticated %v, error %q 20s after deletion; want rejected (%v)", last.Authenticated, last.Error, err)
		}
		t.Logf("observed: token of deleted pod rejected %v after deletion; status.error = %q", time.Since(deleted).Round(100*time.Millisecond), last.Error)
		if last.Error == "" {
			t.Errorf("TokenReview(token of deleted pod).error = empty; want the reason")
		}
	})
}
