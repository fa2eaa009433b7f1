package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"

	"github.com/reviewauth/reviewauth/examples/internal/cli"
)

// TestProxyBorrowsCopyBuffers: the reverse proxy copies responses through
// buffers it borrows (cli.ProxyBuffers) instead of allocating 32 KiB for
// each response. Not parallel: it counts the bytes the process allocates.
func TestProxyBorrowsCopyBuffers(t *testing.T) {
	body := strings.Repeat("m 1\n", 256)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	tr := cli.UpstreamTransport(nil)
	t.Cleanup(tr.CloseIdleConnections)
	h, err := newHandler(proxyOptions{upstream: u, transport: tr}, func(h http.Handler) http.Handler { return h }, nil)
	if err != nil {
		t.Fatal(err)
	}
	get := func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if w.Code != http.StatusOK || w.Body.Len() != len(body) {
			t.Fatalf("GET /metrics = %d, %d bytes; want 200, %d bytes", w.Code, w.Body.Len(), len(body))
		}
	}
	get() // the connection and the first buffer
	const n = 50
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		get()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per >= 32<<10 {
		t.Errorf("bytes allocated per proxied request = %d; want less than a 32 KiB copy buffer", per)
	}
}
