package main

import (
	"bufio"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/reviewauth/reviewauth/examples/internal/clitest"
)

// TestRefusedClientsCannotHoldTheProxy (issue #12): 300 unauthenticated
// requests (POSTs announcing a 100,000-byte body never sent, keep-alive
// GETs) are each answered 401 and closed promptly; a scrape succeeds.
func TestRefusedClientsCannotHoldTheProxy(t *testing.T) {
	e := newEnv(t)
	p := start(t, e.args()...)
	if err := clitest.HoldRefused(strings.TrimPrefix(p.base, "https://"), "/metrics", 300, http.StatusUnauthorized); err != nil {
		t.Fatal(err)
	}
	if code, _ := p.do(t, "GET", "/metrics", e.scraper, nil); code != 200 {
		t.Fatalf("legitimate scrape = %d; want 200", code)
	}
}

// TestLogging (issue #12): the real program, at the default verbosity,
// writes no line for 50 allowed requests and one for a refusal, with the
// user and the cleaned path; at -v=4 it logs every allowed request; at
// -v=10, in text and JSON, no token appears in its output.
func TestLogging(t *testing.T) {
	e := newEnv(t)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	for _, tt := range []struct {
		name        string
		flags       []string
		wantAllowed int
	}{
		{"default", nil, 0},
		{"v4", []string{"-v=4"}, 50},
		{"v10 text", []string{"--v=10"}, 50},
		{"v10 json", []string{"-v=10", "--logging-format=json"}, 50},
	} {
		t.Run(tt.name, func(t *testing.T) {
			proc := clitest.Start(t, e.args(tt.flags...)...)
			p := &proxy{base: proc.Addr, client: client}
			for range 50 {
				if code, _ := p.do(t, "GET", "/metrics", e.scraper, nil); code != 200 {
					t.Fatalf("scrape = %d", code)
				}
			}
			if code, _ := p.do(t, "GET", "/metrics/../logs", e.scraper, nil); code != 403 {
				t.Fatalf("GET /logs = %d; want 403", code)
			}
			for _, tok := range []string{e.apiAud, e.other, "not-a-token-0123456789abcdef"} {
				if code, _ := p.do(t, "GET", "/metrics", tok, nil); code != 401 {
					t.Fatalf("bad token = %d; want 401", code)
				}
			}
			client.CloseIdleConnections()
			proc.Stop(t)
			out := proc.Output()
			for _, tok := range []string{e.scraper, e.apiAud, e.other, "not-a-token-0123456789abcdef"} {
				for _, part := range append(strings.Split(tok, "."), tok) {
					if len(part) > 20 && strings.Contains(out, part) {
						t.Fatal("the output holds (part of) a token")
					}
				}
			}
			allowed, refused := 0, 0
			sc := bufio.NewScanner(strings.NewReader(out))
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				if strings.Contains(line, "httpauth: request allowed") {
					allowed++
				}
				if strings.Contains(line, "httpauth: request forbidden") && strings.Contains(line, "/logs") && strings.Contains(line, scraperName) {
					refused++
				}
				if strings.Contains(line, "/metrics/../logs") {
					t.Errorf("a line holds the raw path, not the cleaned one: %s", line)
				}
			}
			if (tt.wantAllowed == 0 && allowed != 0) || allowed < tt.wantAllowed {
				t.Errorf("lines for 50 allowed requests = %d; want %d", allowed, tt.wantAllowed)
			}
			if refused != 1 {
				t.Errorf("lines for the refusal = %d; want 1\n%s", refused, out)
			}
		})
	}
}
