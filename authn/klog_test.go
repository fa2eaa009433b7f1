package authn_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
)

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// globalKlog configures klog's global logger the way a program's flags do
// (component-base's --feature-gates=ContextualLogging=false is
// klog.EnableContextualLogging(false)), captures everything it writes, and
// restores klog's defaults when the test ends. Tests that call it must not
// be parallel.
func globalKlog(t *testing.T, contextual bool, flags map[string]string) *syncBuffer {
	t.Helper()
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	set := func(name, value string) {
		if err := fs.Set(name, value); err != nil {
			t.Fatalf("klog flag %s=%s: %v", name, value, err)
		}
	}
	out := &syncBuffer{}
	set("logtostderr", "false")
	set("alsologtostderr", "false")
	set("stderrthreshold", "FATAL")
	klog.SetOutput(out)
	for name, value := range flags {
		set(name, value)
	}
	klog.EnableContextualLogging(contextual)
	t.Cleanup(func() {
		klog.Flush()
		set("v", "0")
		set("vmodule", "")
		set("stderrthreshold", "ERROR")
		set("logtostderr", "true")
		klog.SetOutput(os.Stderr)
		klog.EnableContextualLogging(true)
	})
	return out
}

// TestNewForConfigNeverLogsTheTokenThroughGlobalKlog (issue #11 item 1):
// with contextual logging off, client-go logs through the global klog,
// where the library cannot cap the verbosity; rest.Request logs request and
// response bodies (the token) from -v=8. The client NewForConfig builds
// must never log a body: real reviews through client-go's HTTP client and
// its debug round trippers (installed because -v is set before the client
// is built), at -v=10 and at --vmodule=*=10, over HTTP/1.1 and HTTP/2, on
// every path (success, rejection, retried 500, refusal, malformed answer).
func TestNewForConfigNeverLogsTheTokenThroughGlobalKlog(t *testing.T) {
	// Not parallel: klog's global state.
	for _, tc := range []struct {
		name  string
		flags map[string]string
	}{
		{"-v=10", map[string]string{"v": "10"}},
		{"--vmodule=*=10", map[string]string{"vmodule": "*=10"}},
	} {
		for _, h2 := range []bool{false, true} {
			name := tc.name + "/HTTP1.1"
			var opts []authtest.Option
			if h2 {
				name = tc.name + "/HTTP2"
				opts = append(opts, authtest.WithHTTP2())
			}
			t.Run(name, func(t *testing.T) {
				out := globalKlog(t, false, tc.flags)
				srv := authtest.Start(t, opts...)
				a := newAuth(t, srv, authn.Options{Audiences: []string{aud}, Backoff: wait.Backoff{Duration: time.Nanosecond, Steps: 1}})
				ctx := context.Background()
				exp := time.Now().Add(time.Hour)
				var tokens []string
				mint := func(auds ...string) string {
					tok := srv.MintToken(backup, auds, exp)
					tokens = append(tokens, tok)
					return tok
				}
				good := mint(aud)
				srv.InjectFault(authtest.TokenReviews, authtest.Fault{Status: 500, Times: 1})
				if _, ok, err := a.AuthenticateToken(ctx, good); !ok {
					t.Fatalf("AuthenticateToken(good, after a 500) = %v; want success", err)
				}
				a.AuthenticateToken(ctx, good)      // cached
				a.AuthenticateToken(ctx, mint("x")) // rejected
				srv.InjectFault(authtest.TokenReviews, authtest.Fault{MalformedBody: true, Times: 1})
				a.AuthenticateToken(ctx, mint(aud))
				srv.SetAdminPolicy(func(authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
					return false, false, "", ""
				})
				a.AuthenticateToken(ctx, mint(aud)) // 403: logged at V(0)
				klog.Flush()
				logs := out.String()
				if os.Getenv("SHOWLOGS") != "" {
					t.Log(logs)
				}
				if !strings.Contains(logs, "/apis/authentication.k8s.io/v1/tokenreviews") {
					t.Fatalf("no client-go line names the TokenReview URL: the test would prove nothing\n%s", logs)
				}
				for _, tok := range tokens {
					if strings.Contains(logs, tok) || strings.Contains(logs, tok[len(tok)-40:]) {
						t.Fatalf("global klog output contains a token:\n%s", logs)
					}
				}
				if strings.Contains(logs, `"spec"`) || strings.Contains(logs, `"status":{`) ||
					strings.Contains(logs, "Request Body") || strings.Contains(logs, "Response Body") {
					t.Fatalf("global klog output contains a review body:\n%s", logs)
				}
			})
		}
	}
}
