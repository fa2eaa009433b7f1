package grpcauth_test

import (
	"bytes"
	"flag"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/grpcauth"
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

// globalKlog configures klog's global logger as a program's flags do, with
// contextual logging off (component-base's
// --feature-gates=ContextualLogging=false), captures what it writes, and
// restores klog's defaults when the test ends. Tests that call it must not
// be parallel.
func globalKlog(t *testing.T, flags map[string]string) *syncBuffer {
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
	klog.EnableContextualLogging(false)
	t.Cleanup(func() {
		klog.Flush()
		set("v", "0")
		set("vmodule", "")
		set("one_output", "false")
		set("stderrthreshold", "ERROR")
		set("logtostderr", "true")
		klog.SetOutput(os.Stderr)
		klog.EnableContextualLogging(true)
	})
	return out
}

// TestTokenRequestSourceNeverLogsTheTokenThroughGlobalKlog: a
// TokenRequest's answer is the minted token. With contextual logging off,
// client-go's typed clients log response bodies through the global klog
// from -v=8, where the library cannot cap the verbosity. The source
// NewTokenRequestSourceForConfig builds must never log a body: real
// TokenRequests through client-go's HTTP client and its debug round
// trippers (installed because -v is set before the client is built), at
// -v=10 and at --vmodule=*=10, over HTTP/1.1 and HTTP/2, on success, on a
// failed refresh and on a refused request.
func TestTokenRequestSourceNeverLogsTheTokenThroughGlobalKlog(t *testing.T) {
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
			opts := []authtest.Option{}
			if h2 {
				name = tc.name + "/HTTP2"
				opts = append(opts, authtest.WithHTTP2())
			}
			t.Run(name, func(t *testing.T) {
				out := globalKlog(t, tc.flags)
				clk := clocktesting.NewFakeClock(time.Now())
				srv := authtest.Start(t, append(opts, authtest.WithClock(clk))...)
				srv.AddServiceAccount("default", "backup")
				src, err := grpcauth.NewTokenRequestSourceForConfig(srv.Config(), grpcauth.TokenRequestOptions{
					Namespace: "default", ServiceAccount: "backup", Audiences: []string{audience},
					Lifetime: 10 * time.Minute, RetryInterval: time.Second, Clock: clk,
				})
				if err != nil {
					t.Fatal(err)
				}
				var tokens []string
				get := func(wantErr bool) {
					t.Helper()
					// Token, not TokenContext: the oauth2.TokenSource
					// method logs a refresh it covers through the
					// global klog logger.
					tok, err := src.Token()
					if (err != nil) != wantErr {
						t.Fatalf("Token() = %v; want error %v", err, wantErr)
					}
					if tok != nil {
						tokens = append(tokens, tok.AccessToken)
					}
				}
				get(false)
				clk.Step(8 * time.Minute) // due: refreshed
				get(false)
				clk.Step(8 * time.Minute) // due again: the refresh fails, the cached token is served
				srv.InjectFault(authtest.TokenRequests, authtest.Fault{Status: 500})
				get(false)
				clk.Step(3 * time.Minute) // expired: the refresh's error
				get(true)
				srv.ClearFaults()
				get(false)
				klog.Flush()
				logs := out.String()
				if os.Getenv("SHOWLOGS") != "" {
					t.Log(logs)
				}
				if !strings.Contains(logs, "/api/v1/namespaces/default/serviceaccounts/backup/token") {
					t.Fatalf("no client-go line names the TokenRequest URL: the test would prove nothing\n%s", logs)
				}
				if len(tokens) < 3 {
					t.Fatalf("got %d tokens; want at least 3", len(tokens))
				}
				// client-go dumps a protobuf body in hex, 16 bytes a line:
				// look for the token in the dump's text column too.
				dumped := hexdumpText(logs)
				for _, tok := range tokens {
					if strings.Contains(logs, tok) || strings.Contains(logs, tok[len(tok)-40:]) || strings.Contains(dumped, tok) {
						t.Fatalf("global klog output contains a token:\n%s", logs)
					}
				}
				if strings.Contains(logs, "Response Body") || strings.Contains(logs, `"status":{`) || strings.Contains(logs, `"token":`) {
					t.Fatalf("global klog output contains a TokenRequest body:\n%s", logs)
				}
			})
		}
	}
}

// hexdumpLine matches a line of a hex dump (encoding/hex.Dump, which
// client-go uses for binary bodies) and captures its text column.
var hexdumpLine = regexp.MustCompile(`(?m)^\s*[0-9a-f]{8}  .*\|(.{1,16})\|\s*$`)

// hexdumpText returns the text columns of every hex dump in logs, joined.
func hexdumpText(logs string) string {
	var b strings.Builder
	for _, m := range hexdumpLine.FindAllStringSubmatch(logs, -1) {
		b.WriteString(m[1])
	}
	return b.String()
}
