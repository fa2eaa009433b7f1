package main

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestVersionAndHealth (issue #12): --version prints the version;
// --metrics-listen serves /healthz, /livez and /readyz (ready while
// serving) and /metrics.
func TestVersionAndHealth(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), []string{"--version"}, &out); err != nil || !strings.HasPrefix(out.String(), "draproxy ") {
		t.Fatalf("run(--version) = %v, %q", err, out.String())
	}
	f := startFakeAPI(t)
	lines, _ := startRun(t, f, "--socket="+filepath.Join(shortDir(t), "d.sock"), "--metrics-listen=127.0.0.1:0")
	var metrics string
	for _, l := range strings.Split(lines.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "metrics on "); ok {
			metrics = strings.TrimSuffix(v, "/metrics")
		}
	}
	if metrics == "" {
		t.Fatalf("no metrics line in %q", lines.String())
	}
	for _, path := range []string{"/healthz", "/livez", "/readyz", "/metrics"} {
		var resp *http.Response
		var err error
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err = http.Get(metrics + path)
			if (err == nil && resp.StatusCode == 200) || time.Now().After(deadline) {
				break
			}
			if err == nil {
				resp.Body.Close()
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s = %d; want 200", path, resp.StatusCode)
		}
	}
}
