package authn_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
)

// logSink collects every log line at every verbosity.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) context() context.Context {
	logger := funcr.New(func(prefix, args string) {
		s.mu.Lock()
		s.lines = append(s.lines, prefix+" "+args)
		s.mu.Unlock()
	}, funcr.Options{Verbosity: 100})
	return klog.NewContext(context.Background(), logger)
}

func (s *logSink) all() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// TestTokenNeverLeaks drives every path an error or a log line can take with
// a reviewer that echoes the token wherever it can, and checks that the
// token appears in no error string and no log line, at any verbosity.
func TestTokenNeverLeaks(t *testing.T) {
	t.Parallel()
	const secret = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXRva2VuLXBheWxvYWQ.U0VDUkVUU0lHTkFUVVJF"
	okStatus := authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}, Audiences: []string{aud}}
	tests := []struct {
		name     string
		reviewer reviewerFunc
	}{
		{"success", answer(okStatus)},
		{"rejection echoing the token", answer(authenticationv1.TokenReviewStatus{Error: "invalid bearer token " + secret})},
		{"audience mismatch", answer(authenticationv1.TokenReviewStatus{Authenticated: true, User: okStatus.User, Audiences: []string{"x"}})},
		{"transport error echoing the token", func(_ context.Context, tr *authenticationv1.TokenReview) (*authenticationv1.TokenReview, error) {
			return nil, errors.New("connection reset while sending " + tr.Spec.Token)
		}},
		{"panicking reviewer", func(_ context.Context, tr *authenticationv1.TokenReview) (*authenticationv1.TokenReview, error) {
			panic("reviewer blew up on " + tr.Spec.Token)
		}},
		{"slow reviewer past the deadline", func(ctx context.Context, tr *authenticationv1.TokenReview) (*authenticationv1.TokenReview, error) {
			<-ctx.Done()
			return nil, fmt.Errorf("%w: gave up on %s", ctx.Err(), tr.Spec.Token)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := authn.New(tt.reviewer, authn.Options{Audiences: []string{aud}, Backoff: wait.Backoff{Steps: -1}, Timeout: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			var sink logSink
			ctx := sink.context()
			for i := 0; i < 2; i++ { // a review, then the cache
				_, _, err = a.AuthenticateToken(ctx, secret)
				if err != nil {
					for _, s := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
						if strings.Contains(s, secret) || strings.Contains(s, "c2VjcmV0LXRva2VuLXBheWxvYWQ") {
							t.Fatalf("error %q contains the token", s)
						}
					}
				}
			}
			if logs := sink.all(); strings.Contains(logs, "c2VjcmV0LXRva2VuLXBheWxvYWQ") {
				t.Fatalf("logs contain the token:\n%s", logs)
			}
		})
	}
}

// TestClientGoNeverLogsTheToken runs real reviews through client-go with a
// logger at verbosity 10, where client-go logs request and response bodies,
// and checks that the token reaches no log line.
func TestClientGoNeverLogsTheToken(t *testing.T) {
	t.Parallel()
	srv := authtest.Start(t)
	a := newAuth(t, srv, authn.Options{Audiences: []string{aud}, Backoff: wait.Backoff{Steps: 1, Duration: time.Nanosecond}})
	var sink logSink
	ctx := sink.context()
	good := srv.MintToken(backup, []string{aud}, time.Now().Add(time.Hour))
	other := srv.MintToken(backup, []string{"other"}, time.Now().Add(time.Hour))
	srv.InjectFault(authtest.TokenReviews, authtest.Fault{Status: 500, Times: 1})
	for _, tok := range []string{good, other, good} {
		a.AuthenticateToken(ctx, tok)
	}
	logs := sink.all()
	if logs == "" {
		t.Fatalf("no log lines at all: the test would prove nothing")
	}
	for _, tok := range []string{good, other} {
		if strings.Contains(logs, tok) || strings.Contains(logs, tok[len(tok)-40:]) {
			t.Fatalf("logs contain a token:\n%s", logs)
		}
	}
}
