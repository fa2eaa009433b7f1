package authz_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// backup is the identity a real API server returns for a pod-bound token of
// the default/backup service account on node-a.
func backup() *user.DefaultInfo {
	return &user.DefaultInfo{
		Name:   "system:serviceaccount:default:backup",
		UID:    "6f1f0d63-5b1c-4f2e-9c55-0b4b0a0e8d11",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"},
		Extra: map[string][]string{
			"authentication.kubernetes.io/credential-id": {"JTI=8f0f6a4e-1c1e-4a43-a3a8-6b4d2c1b3b52"},
			"authentication.kubernetes.io/node-name":     {"node-a"},
			"authentication.kubernetes.io/node-uid":      {"1d2e3f40-0000-4000-8000-000000000002"},
		},
	}
}

// getPods is "get pods in default" by u.
func getPods(u user.Info) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User: u, Verb: "get", Namespace: "default", APIVersion: "v1", Resource: "pods", Name: "p", ResourceRequest: true,
	}
}

// withSelectors parses field and label selectors into a, the way
// k8s.io/apiserver's filters do.
func withSelectors(t testing.TB, a authorizer.AttributesRecord, field, label string) authorizer.AttributesRecord {
	t.Helper()
	if field != "" {
		fs, err := fields.ParseSelector(field)
		if err != nil {
			t.Fatalf("fields.ParseSelector(%q) = %v", field, err)
		}
		a.FieldSelectorRequirements = fs.Requirements()
	}
	if label != "" {
		ls, err := labels.Parse(label)
		if err != nil {
			t.Fatalf("labels.Parse(%q) = %v", label, err)
		}
		a.LabelSelectorRequirements, _ = ls.Requirements()
	}
	return a
}

// allowBackupPods allows the backup service account to get and list pods.
var allowBackupPods = authtest.Rules(authtest.Rule{
	Users: []string{"system:serviceaccount:default:backup"}, Verbs: []string{"get", "list"},
	APIGroups: []string{""}, Resources: []string{"pods"},
})

type fixture struct {
	srv   *authtest.Server
	clock *clocktesting.FakeClock
	az    *authz.Authorizer
}

// newFixture starts an authtest server with policy p and an Authorizer on a
// fake clock for it.
func newFixture(t *testing.T, p authtest.Policy, opts authz.Options) *fixture {
	t.Helper()
	srv := authtest.Start(t)
	srv.SetPolicy(p)
	fc := clocktesting.NewFakeClock(time.Now())
	opts.Clock = fc
	az, err := authz.NewForConfig(srv.Config(), opts)
	if err != nil {
		t.Fatalf("NewForConfig() = %v", err)
	}
	return &fixture{srv: srv, clock: fc, az: az}
}

func (f *fixture) sars() int { return f.srv.Count(authtest.SubjectAccessReviews) }

type result struct {
	d      authorizer.Decision
	reason string
	err    error
}

// authorizeStepping runs Authorize on its own goroutine and steps the fake
// clock by step whenever a retry is waiting on it, until Authorize returns.
func (f *fixture) authorizeStepping(ctx context.Context, a authorizer.Attributes, step time.Duration) result {
	done := make(chan result, 1)
	go func() {
		d, r, err := f.az.Authorize(ctx, a)
		done <- result{d, r, err}
	}()
	for {
		select {
		case r := <-done:
			return r
		default:
		}
		if f.clock.HasWaiters() {
			f.clock.Step(step)
		}
		runtime.Gosched()
	}
}
