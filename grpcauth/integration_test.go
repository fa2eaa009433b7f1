package grpcauth_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/grpcauth"
)

const audience = "things.example.com"

var backupSA = &user.DefaultInfo{
	Name:   "system:serviceaccount:default:backup",
	UID:    "0b6e1f0a-1111-2222-3333-444455556666",
	Groups: []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"},
}

// realOptions returns interceptor options backed by the reviewauth
// authenticator and authorizer, talking to s, with retries off so that
// faults surface at once.
func realOptions(t testing.TB, s *authtest.Server, token grpcauth.TokenExtractor) grpcauth.Options {
	t.Helper()
	an, err := authn.NewForConfig(s.Config(), authn.Options{Audiences: []string{audience}, Backoff: wait.Backoff{Steps: -1}})
	if err != nil {
		t.Fatalf("authn.NewForConfig() = %v", err)
	}
	az, err := authz.NewForConfig(s.Config(), authz.Options{Backoff: wait.Backoff{Steps: 1}})
	if err != nil {
		t.Fatalf("authz.NewForConfig() = %v", err)
	}
	rule := grpcauth.Rule{Token: token, Attributes: getThing}
	return grpcauth.Options{
		Authenticator: an,
		Authorizer:    az,
		Rules:         map[string]grpcauth.Rule{methodGet: rule, methodList: rule},
		Skip:          grpcauth.HealthAndReflection,
	}
}

// allowBackup lets the backup service account get things in namespace
// default.
var allowBackup = authtest.Rules(authtest.Rule{
	Users: []string{backupSA.Name}, Verbs: []string{"get"}, APIGroups: []string{"example.com"},
	Resources: []string{"things"}, Namespaces: []string{"default"},
})

func TestIntegrationWithAPIServer(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	s.SetPolicy(allowBackup)
	good := s.MintToken(backupSA, []string{audience}, time.Now().Add(time.Hour))
	otherAudience := s.MintToken(backupSA, []string{"other"}, time.Now().Add(time.Hour))
	conn := serve(t, realOptions(t, s, grpcauth.FromField("security_token")))

	tests := []struct {
		name      string
		token     string
		namespace string
		fault     authtest.Endpoint
		want      codes.Code
	}{
		{name: "allowed", token: good, namespace: "default", want: codes.OK},
		{name: "wrong audience", token: otherAudience, namespace: "default", want: codes.Unauthenticated},
		{name: "unknown token", token: "not-a-token-the-server-knows", namespace: "default", want: codes.Unauthenticated},
		{name: "no RBAC rule", token: good, namespace: "kube-system", want: codes.PermissionDenied},
		{name: "SubjectAccessReview outage", token: good, namespace: "outage", fault: authtest.SubjectAccessReviews, want: codes.Unavailable},
	}
	for _, tt := range tests { // not parallel: faults are server-wide
		t.Run(tt.name, func(t *testing.T) {
			if tt.fault != "" {
				s.InjectFault(tt.fault, authtest.Fault{Status: 503})
				defer s.ClearFaults()
			}
			resp := new(wrapperspb.StringValue)
			err := conn.Invoke(t.Context(), methodGet, newRequest(tt.token, tt.namespace, "a"), resp)
			if status.Code(err) != tt.want {
				t.Fatalf("Get() = %v; want code %v", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), tt.token) {
				t.Errorf("Get() = %v; the message contains the token", err)
			}
			if tt.want == codes.OK && !strings.HasPrefix(resp.GetValue(), backupSA.Name+" ") {
				t.Errorf("Get() = %q; want the handler to see %s", resp.GetValue(), backupSA.Name)
			}
		})
	}
}

func TestIntegrationTokenReviewOutage(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	s.SetPolicy(allowBackup)
	tok := s.MintToken(backupSA, []string{audience}, time.Now().Add(time.Hour))
	conn := serve(t, realOptions(t, s, nil))
	s.InjectFault(authtest.TokenReviews, authtest.Fault{Status: 503, Times: 1})
	err := conn.Invoke(withBearer(t.Context(), tok), methodGet, newRequest("", "default", "a"), new(wrapperspb.StringValue))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Get() during a TokenReview outage = %v; want code Unavailable", err)
	}
	// The outage was not cached: the next call succeeds.
	if err := conn.Invoke(withBearer(t.Context(), tok), methodGet, newRequest("", "default", "a"), new(wrapperspb.StringValue)); err != nil {
		t.Fatalf("Get() after the outage = %v; want nil", err)
	}
}

func TestIntegrationCachesReviews(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	s.SetPolicy(allowBackup)
	tok := s.MintToken(backupSA, []string{audience}, time.Now().Add(time.Hour))
	conn := serve(t, realOptions(t, s, nil))
	for i := 0; i < 5; i++ {
		if err := conn.Invoke(withBearer(t.Context(), tok), methodGet, newRequest("", "default", "a"), new(wrapperspb.StringValue)); err != nil {
			t.Fatalf("Get() #%d = %v", i, err)
		}
	}
	if n := s.Count(authtest.TokenReviews); n != 1 {
		t.Errorf("TokenReviews after 5 calls = %d; want 1", n)
	}
	if n := s.Count(authtest.SubjectAccessReviews); n != 1 {
		t.Errorf("SubjectAccessReviews after 5 calls = %d; want 1", n)
	}
}

func TestIntegrationTokenRequestSource(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	s.SetPolicy(allowBackup)
	s.AddServiceAccount("default", "backup")
	src, err := grpcauth.NewTokenRequestSourceForConfig(s.Config(), grpcauth.TokenRequestOptions{
		Namespace:      "default",
		ServiceAccount: "backup",
		Audiences:      []string{audience},
	})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, realOptions(t, s, nil))
	for i := 0; i < 3; i++ {
		tok, err := tokenOf(t.Context(), src)
		if err != nil {
			t.Fatalf("Token() = %v", err)
		}
		resp := new(wrapperspb.StringValue)
		if err := conn.Invoke(withBearer(t.Context(), tok), methodGet, newRequest("", "default", "a"), resp); err != nil {
			t.Fatalf("Get() with a TokenRequest token = %v", err)
		}
		if !strings.HasPrefix(resp.GetValue(), backupSA.Name+" ") {
			t.Errorf("Get() = %q; want the handler to see %s", resp.GetValue(), backupSA.Name)
		}
	}
	if n := s.Count(authtest.TokenRequests); n != 1 {
		t.Errorf("TokenRequests for 3 calls = %d; want 1 (cached)", n)
	}
}

// A DRA-style node-local server: the pod-bound token must name this node
// (authz.NodeLocal) and the caller must pass a SubjectAccessReview.
func TestIntegrationNodeLocal(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	s.SetPolicy(allowBackup)
	onNode := func(node string) *user.DefaultInfo {
		u := *backupSA
		u.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
		return &u
	}
	here := s.MintToken(onNode("node-a"), []string{audience}, time.Now().Add(time.Hour))
	there := s.MintToken(onNode("node-b"), []string{audience}, time.Now().Add(time.Hour))
	opts := realOptions(t, s, nil)
	opts.Authorizer = authz.All(authz.NodeLocal(authz.NodeLocalOptions{NodeName: "node-a"}), opts.Authorizer)
	conn := serve(t, opts)
	for _, tt := range []struct {
		name  string
		token string
		want  codes.Code
	}{
		{name: "this node", token: here, want: codes.OK},
		{name: "other node", token: there, want: codes.PermissionDenied},
	} {
		err := conn.Invoke(withBearer(context.Background(), tt.token), methodGet, newRequest("", "default", "a"), new(wrapperspb.StringValue))
		if status.Code(err) != tt.want {
			t.Errorf("%s: Get() = %v; want code %v", tt.name, err, tt.want)
		}
	}
}

func TestIntegrationTokenRequestRefresh(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	s := authtest.Start(t, authtest.WithClock(clk))
	s.AddServiceAccount("default", "backup")
	src, err := grpcauth.NewTokenRequestSourceForConfig(s.Config(), grpcauth.TokenRequestOptions{
		Namespace:      "default",
		ServiceAccount: "backup",
		Audiences:      []string{audience},
		Lifetime:       10 * time.Minute,
		Clock:          clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := klog.NewContext(t.Context(), logr.Discard())
	var seen []string
	steps := []struct {
		name     string
		at       time.Duration
		fault    bool
		wantErr  bool
		wantNew  bool // a token not seen before
		requests int
	}{
		{name: "first", at: 0, wantNew: true, requests: 1},
		{name: "1s before 80%", at: 8*time.Minute - time.Second, requests: 1},
		{name: "at 80%: refreshed before expiry", at: 8 * time.Minute, wantNew: true, requests: 2},
		{name: "refresh fails, token still valid", at: 16 * time.Minute, fault: true, requests: 3},
		{name: "refresh fails, token expired", at: 18 * time.Minute, fault: true, wantErr: true, requests: 4},
		{name: "API server back", at: 18*time.Minute + time.Second, wantNew: true, requests: 5},
	}
	for _, st := range steps {
		clk.SetTime(t0.Add(st.at))
		s.ClearFaults()
		if st.fault {
			s.InjectFault(authtest.TokenRequests, authtest.Fault{Status: 503})
		}
		tok, err := tokenOf(ctx, src)
		if (err != nil) != st.wantErr {
			t.Fatalf("%s: Token() = _, %v; want error %v", st.name, err, st.wantErr)
		}
		if st.wantErr && tok != "" {
			t.Errorf("%s: Token() returned a token with its error", st.name)
		}
		if !st.wantErr {
			isNew := !slices.Contains(seen, tok)
			if isNew != st.wantNew {
				t.Errorf("%s: Token() new = %v; want %v", st.name, isNew, st.wantNew)
			}
			seen = append(seen, tok)
		}
		if n := s.Count(authtest.TokenRequests); n != st.requests {
			t.Errorf("%s: TokenRequests = %d; want %d", st.name, n, st.requests)
		}
	}
}
