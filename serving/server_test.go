package serving_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/metrics"
	"github.com/reviewauth/reviewauth/serving"
)

// refuseUnauthenticated answers 401 to requests without Authorization,
// without reading their bodies, as httpauth does; others get "ok".
var refuseUnauthenticated = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") == "" {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	_, _ = io.WriteString(w, "ok")
})

func selfSigned(t testing.TB) *serving.Certificates {
	t.Helper()
	c, err := serving.NewCertificates(serving.CertificateOptions{SelfSigned: serving.SelfSigned{Name: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

var insecure = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}

// rawRequest writes req on a new TLS connection to addr and returns the
// connection and a reader on it.
func rawRequest(t testing.TB, addr, req string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, insecure)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// legitimate sends an authenticated GET and checks it is served.
func legitimate(t testing.TB, addr string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: insecure}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "https://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer x")
	if code, body := get(t, client, req); code != 200 || body != "ok" {
		t.Fatalf("legitimate request = %d %q; want 200 ok", code, body)
	}
}

// TestRefusedRequestBodyIsNotRead (issue #12): 300 unauthenticated POSTs
// that announce a 100,000-byte body and send none are each answered 401
// at once, with "Connection: close", and the connection is closed, well
// before ReadTimeout; a legitimate request is served meanwhile. net/http
// alone would try to read (up to 256 KiB of) the body before answering and
// hold every connection, unanswered, until ReadTimeout.
func TestRefusedRequestBodyIsNotRead(t *testing.T) {
	t.Parallel()
	srv, err := serving.NewHTTPServer(refuseUnauthenticated, serving.ServerOptions{
		Certificates: selfSigned(t), ReadTimeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, t.Context(), srv)
	const n = 300
	for _, expect := range []string{"", "Expect: 100-continue\r\n"} {
		start := time.Now()
		conns := make([]net.Conn, n)
		readers := make([]*bufio.Reader, n)
		for i := range n {
			conns[i], readers[i] = rawRequest(t, addr, "POST /metrics HTTP/1.1\r\nHost: proxy\r\nContent-Length: 100000\r\n"+expect+"\r\n")
			defer conns[i].Close()
		}
		legitimate(t, addr)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				_ = conns[i].SetReadDeadline(time.Now().Add(30 * time.Second))
				resp, err := http.ReadResponse(readers[i], nil)
				if err != nil {
					errs <- fmt.Errorf("conn %d: no answer: %w", i, err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 401 || !resp.Close {
					errs <- fmt.Errorf("conn %d: %d, close %v; want 401 and Connection: close", i, resp.StatusCode, resp.Close)
					return
				}
				if _, err := readers[i].ReadByte(); err != io.EOF {
					errs <- fmt.Errorf("conn %d: after the answer read %v; want EOF (closed)", i, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("%d refused requests (%q) took %v", n, expect, d)
		}
	}
}

// TestConnectionClosedAfterRefusal (issue #12): a keep-alive client refused
// (401) cannot keep its connection: 300 such connections are all closed by
// the server right after their answer, so none is held idle.
func TestConnectionClosedAfterRefusal(t *testing.T) {
	t.Parallel()
	srv, err := serving.NewHTTPServer(refuseUnauthenticated, serving.ServerOptions{Certificates: selfSigned(t)})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, t.Context(), srv)
	const n = 300
	var wg sync.WaitGroup
	var closed atomic.Int64
	for range n {
		wg.Go(func() {
			c, r := rawRequest(t, addr, "GET /metrics HTTP/1.1\r\nHost: proxy\r\nConnection: keep-alive\r\n\r\n")
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Errorf("no answer: %v", err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			if _, err := r.ReadByte(); err == io.EOF {
				closed.Add(1)
			}
		})
	}
	wg.Wait()
	if closed.Load() != n {
		t.Errorf("connections closed after a 401 = %d; want %d", closed.Load(), n)
	}
	legitimate(t, addr)
}

// TestSlowClientsAreCutOff (issue #12): 300 connections that open and send
// nothing, and 300 that trickle a request's headers (slowloris), are held
// while a legitimate request is served, and are closed by the server once
// ReadHeaderTimeout passes. ReadHeaderTimeout also bounds the TLS
// handshake: on a loaded machine, where opening 600 connections under the
// race detector can take longer than it, a slowloris connection may be cut
// off during its own handshake; that is the server doing its job, and is
// counted, not failed.
func TestSlowClientsAreCutOff(t *testing.T) {
	t.Parallel()
	srv, err := serving.NewHTTPServer(refuseUnauthenticated, serving.ServerOptions{
		Certificates: selfSigned(t), ReadHeaderTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, t.Context(), srv)
	const n = 300
	var held []net.Conn
	cutDuringHandshake := 0
	for i := range 2 * n {
		var c net.Conn
		var err error
		if i < n {
			c, err = net.Dial("tcp", addr) // not even a TLS handshake
		} else {
			c, err = tls.Dial("tcp", addr, insecure)
			if err == nil {
				_, err = io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: proxy\r\nX-Slow: ")
			} else if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) {
				cutDuringHandshake++
				continue
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	if cutDuringHandshake > 0 {
		t.Logf("%d slowloris connections were cut off by the server during their TLS handshake, before they could be held", cutDuringHandshake)
	}
	legitimate(t, addr)
	var wg sync.WaitGroup
	for i, c := range held {
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("held connection %d still open after 30s; want closed by the server after ReadHeaderTimeout", i)
			}
		})
	}
	wg.Wait()
}

// TestIdleConnectionsAreClosed: an authenticated keep-alive connection is
// kept between requests, and closed by the server after IdleTimeout.
func TestIdleConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	srv, err := serving.NewHTTPServer(refuseUnauthenticated, serving.ServerOptions{
		Certificates: selfSigned(t), IdleTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, t.Context(), srv)
	c, r := rawRequest(t, addr, "GET /metrics HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer x\r\n\r\n")
	defer c.Close()
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("authenticated request = %v, %v; want 200, kept alive", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := r.ReadByte(); err != io.EOF {
		t.Errorf("idle connection: read %v; want EOF after IdleTimeout", err)
	}
}

// TestConnectionLimit: with MaxConnections held by clients that send
// nothing, a new client is served without waiting for any of them to
// leave: the server parks the silent connection that has waited longest
// (once past its grace) outside the budget, where it reads nothing more
// and its client is not told to reconnect, and logs it; none is closed.
func TestConnectionLimit(t *testing.T) {
	t.Parallel()
	const max = 50
	var logs lines
	ctx := klog.NewContext(t.Context(), logs.logger())
	m := metrics.New()
	srv, err := serving.NewHTTPServer(refuseUnauthenticated, serving.ServerOptions{MaxConnections: max, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if srv.MaxConnections() != max {
		t.Fatalf("MaxConnections() = %d; want %d", srv.MaxConnections(), max)
	}
	addr := serve(t, ctx, srv)
	held := make([]net.Conn, max)
	for i := range held {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held[i] = c
	}
	admitted := admittedGauge(t, m)
	waitFor(t, 10*time.Second, "the held connections to be admitted", func() bool { return admitted() == max })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request past the limit = %v, %v; want 200", resp, err)
	}
	closed := 0
	for _, h := range held {
		_ = h.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := h.Read(make([]byte, 1)); err == io.EOF || errors.Is(err, syscall.ECONNRESET) {
			closed++
		}
	}
	if closed != 0 {
		t.Errorf("held connections closed by the server = %d; want 0 (one parked outside the budget)", closed)
	}
	if got := metricReader(t, m)("reviewauth_connections", "state", "parked"); got != 1 {
		t.Errorf("connections parked = %v; want 1", got)
	}
	waitFor(t, 10*time.Second, "the parking to be logged", func() bool {
		for _, l := range logs.snapshot() {
			if strings.Contains(l, "connection budget full") && strings.Contains(l, `"limit"=50`) && strings.Contains(l, `"parked.silent"=1`) {
				return true
			}
		}
		return false
	})
}

// TestPerWriteDeadline: a client that stops reading is cut off after
// WriteTimeout, while a stream that lasts longer than WriteTimeout is
// served as long as the client reads it.
func TestPerWriteDeadline(t *testing.T) {
	t.Parallel()
	const writeTimeout = 300 * time.Millisecond
	big := strings.Repeat("x", 1<<20)
	stalledErr := make(chan error, 1)
	release := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			// 64 MiB to a client that reads nothing: a write blocks,
			// then fails at its deadline.
			var err error
			for i := 0; i < 64 && err == nil; i++ {
				_, err = io.WriteString(w, big)
			}
			stalledErr <- err
		case "/stream":
			_, _ = io.WriteString(w, "first\n")
			http.NewResponseController(w).Flush()
			<-release // longer than writeTimeout: until /big failed
			_, _ = io.WriteString(w, "second\n")
		}
	})
	srv, err := serving.NewHTTPServer(handler, serving.ServerOptions{WriteTimeout: writeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, t.Context(), srv)

	streamStart := time.Now()
	resp, err := http.Get("http://" + addr + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("stream first line = %q, %v", line, err)
	}

	stalled, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	if _, err := io.WriteString(stalled, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stalledErr:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("write to a client that does not read = %v; want a timeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write to a client that does not read did not fail within 30s")
	}
	close(release)
	if line, err := br.ReadString('\n'); err != nil || line != "second\n" {
		t.Fatalf("stream second line = %q, %v; want it served although the stream lasted %v > WriteTimeout", line, err, time.Since(streamStart))
	}
	if time.Since(streamStart) <= writeTimeout {
		t.Fatalf("the stream lasted %v, not longer than WriteTimeout", time.Since(streamStart))
	}
}

// TestPerWriteDeadlineHTTP2: on HTTP/2 a stream whose client stops granting
// it flow-control window (while it reads the connection) is cut off after
// WriteTimeout once its response is past the lazily set deadline
// (h2LazyDeadline), and a small response sets no deadline at all (so a
// stream costs the connection's serve goroutine no deadline message).
func TestPerWriteDeadlineHTTP2(t *testing.T) {
	t.Parallel()
	const writeTimeout = 300 * time.Millisecond
	big := strings.Repeat("x", 1<<20)
	stalledErr := make(chan error, 1)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			_, _ = io.WriteString(w, "small")
			return
		}
		var err error
		for i := 0; i < 64 && err == nil; i++ {
			_, err = io.WriteString(w, big)
		}
		stalledErr <- err
	})
	srv, err := serving.NewHTTPServer(handler, serving.ServerOptions{Certificates: selfSigned(t), WriteTimeout: writeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, t.Context(), srv)
	h := dialH2(t, addr)
	defer h.c.Close()
	h.serverMaxStreams(t)
	// Read every frame, grant no window: the stream's 64 KiB fill, and
	// its writes block.
	go func() {
		for {
			if _, err := h.fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	if err := h.headers(1, "/big"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stalledErr:
		if err == nil {
			t.Error("writes to a stream without window succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write to a stream without window did not fail within 30s")
	}
}

// h2Conn is a raw HTTP/2 client connection for tests that misbehave.
type h2Conn struct {
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf strings.Builder
}

func dialH2(t testing.TB, addr string) *h2Conn {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("negotiated %q; want h2", c.ConnectionState().NegotiatedProtocol)
	}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	h := &h2Conn{c: c, fr: http2.NewFramer(c, c)}
	h.enc = hpack.NewEncoder(&stringWriter{&h.buf})
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return h
}

type stringWriter struct{ b *strings.Builder }

func (w *stringWriter) Write(p []byte) (int, error) { return w.b.Write(p) }

func (h *h2Conn) headers(id uint32, path string) error {
	h.buf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "proxy"}, {":path", path}, {"authorization", "Bearer x"}} {
		_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte(h.buf.String()), EndStream: true, EndHeaders: true})
}

// serverSettings reads frames until the server's SETTINGS and returns
// its MAX_CONCURRENT_STREAMS.
func (h *h2Conn) serverMaxStreams(t testing.TB) uint32 {
	t.Helper()
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			v, _ := s.Value(http2.SettingMaxConcurrentStreams)
			_ = h.fr.WriteSettingsAck()
			return v
		}
	}
}

// TestHTTP2StreamLimit: the server advertises MaxConcurrentStreams; with
// that many streams in flight, one more is refused (RST_STREAM) while the
// others keep running.
func TestHTTP2StreamLimit(t *testing.T) {
	t.Parallel()
	const max = 20
	block := make(chan struct{})
	defer close(block)
	var running atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running.Add(1)
		<-block
	})
	srv, err := serving.NewHTTPServer(handler, serving.ServerOptions{Certificates: selfSigned(t), MaxConcurrentStreams: max, ShutdownTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, t.Context(), srv)
	h := dialH2(t, addr)
	defer h.c.Close()
	if got := h.serverMaxStreams(t); got != max {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d; want %d", got, max)
	}
	for i := range max {
		if err := h.headers(uint32(2*i+1), "/"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the streams at the limit to run", func() bool { return running.Load() == max })
	if err := h.headers(2*max+1, "/"); err != nil {
		t.Fatal(err)
	}
	_ = h.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading frames: %v; want RST_STREAM for stream %d", err, 2*max+1)
		}
		if rst, ok := f.(*http2.RSTStreamFrame); ok {
			if rst.StreamID != 2*max+1 {
				t.Fatalf("RST_STREAM for stream %d; want %d (over the limit)", rst.StreamID, 2*max+1)
			}
			break
		}
	}
	if running.Load() != max {
		t.Errorf("handlers running = %d; want %d", running.Load(), max)
	}
}

// TestHTTP2RapidReset (CVE-2023-44487): a client that opens streams and
// resets them at once, against handlers that keep running (a slow
// review, or a server short of CPU whose handlers start late), so that
// net/http queues its streams and never starts their handlers: its
// resets are counted as they are read, and its connection is parked
// once past RapidResetLimit, nothing more read from it, no GOAWAY, long
// before Go's own bound (a queue of four times MaxConcurrentStreams);
// the handlers it started are cancelled. Counted in the handler, as
// before, the queued streams' resets were never seen and the connection
// was closed by Go's bound, and its client came back with a handshake.
// With the bound off, Go's bound closes it with ENHANCE_YOUR_CALM. A
// legitimate client on another connection is served meanwhile.
func TestHTTP2RapidReset(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		limit int
		// parked: the connection is parked; else closed with
		// ENHANCE_YOUR_CALM.
		parked bool
	}{
		{name: "default bound", parked: true},
		{name: "no bound: Go's", limit: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const max = 10
			block := make(chan struct{})
			defer close(block)
			var started, cancelled atomic.Int64
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/slow" {
					started.Add(1)
					select {
					case <-block: // ignores the reset, as a handler stuck in a review would
					case <-r.Context().Done():
						cancelled.Add(1)
						<-block // and goes on ignoring it
					}
					return
				}
				_, _ = io.WriteString(w, "ok")
			})
			m := metrics.New()
			srv, err := serving.NewHTTPServer(handler, serving.ServerOptions{
				Certificates: selfSigned(t), MaxConcurrentStreams: max, ShutdownTimeout: time.Millisecond,
				RapidResetLimit: tc.limit, Metrics: m,
			})
			if err != nil {
				t.Fatal(err)
			}
			read := metricReader(t, m)
			addr := serve(t, t.Context(), srv)
			h := dialH2(t, addr)
			defer h.c.Close()
			h.serverMaxStreams(t)
			goaway := make(chan http2.ErrCode, 1)
			go func() {
				for {
					f, err := h.fr.ReadFrame()
					if err != nil {
						close(goaway)
						return
					}
					if g, ok := f.(*http2.GoAwayFrame); ok {
						goaway <- g.ErrCode
						return
					}
				}
			}()
			attack := make(chan struct{})
			go func() {
				defer close(attack)
				for id := uint32(1); id < 20000; id += 2 {
					if h.headers(id, "/slow") != nil || h.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
						return
					}
				}
			}()
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
			defer client.CloseIdleConnections()
			for range 5 {
				resp, err := client.Get("https://" + addr + "/fast")
				if err != nil {
					t.Fatalf("legitimate request during the attack: %v", err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
					t.Fatalf("legitimate request = %d over HTTP/%d; want 200 over HTTP/2", resp.StatusCode, resp.ProtoMajor)
				}
			}
			if tc.parked {
				waitFor(t, 10*time.Second, "the attacker's connection to be parked", func() bool {
					return read("reviewauth_connections", "state", "parked") == 1
				})
				// Its handlers (at most MaxConcurrentStreams of them ran;
				// none, when it was parked before the first started) are
				// cancelled, and it gets no GOAWAY: it is not read.
				waitFor(t, 10*time.Second, "the attacker's handlers to be cancelled", func() bool {
					return cancelled.Load() == started.Load()
				})
				if n := started.Load(); n > max {
					t.Errorf("handlers started = %d; want at most %d", n, max)
				}
				select {
				case code, ok := <-goaway:
					if ok {
						t.Errorf("the parked connection got GOAWAY %v; want nothing", code)
					} else {
						t.Error("the parked connection was closed; want it parked")
					}
				case <-time.After(200 * time.Millisecond):
				}
				h.c.Close()
				<-attack
				return
			}
			select {
			case code, ok := <-goaway:
				if !ok || code != http2.ErrCodeEnhanceYourCalm {
					t.Errorf("attacker's connection ended with GOAWAY %v (received %v); want ENHANCE_YOUR_CALM", code, ok)
				}
			case <-time.After(30 * time.Second):
				t.Error("the attacker's connection was not closed within 30s")
			}
			h.c.Close()
			<-attack
		})
	}
}

// TestHTTP2RapidResetBound: an HTTP/2 client that resets the requests it
// opens passes RapidResetLimit resets (the clock stands still, so
// RapidResetRate adds none) even though every handler ends at its reset,
// so that Go's own bound (a queue of four times MaxConcurrentStreams)
// never trips. A connection never served is then parked: nothing more is
// read from it (the request it sends next is not answered). The first
// budget's worth are parked outside the budget: a newcomer is served
// beside it, nothing closed. Past that, one is parked within the budget
// and closed, as an eviction, when a newcomer needs its room. A connection
// that was served, and streams reset once answered (watches stopped),
// are left to Go's own bound: clients cancel requests as a matter of
// course. With nothing waiting for room, a parked connection is closed,
// for its rapid reset, once parked ParkedMax (not before), outside the
// budget or within it. A client within the bound keeps its connection and is served
// on it, and with the bound off so is a flood. A connection refused eight times and
// never served is parked too, whether or not it reset a request.
func TestHTTP2RapidResetBound(t *testing.T) {
	t.Parallel()
	const (
		served    = "served on the same connection"
		parked    = "parked until a newcomer needs its room"
		parkedOut = "parked outside the budget, a newcomer served beside it"
		expires   = "parked until ParkedMax has passed with nothing waiting"
		gone      = "parked until its client closes it"
	)
	for _, tc := range []struct {
		name        string
		limit       int
		servedFirst bool
		resets      int
		refusals    int // requests refused (401) after the resets
		// answered resets each stream once its answer's headers arrive (a
		// watch its client stops).
		answered bool
		// oneByOne resets each stream once its handler runs, and waits
		// for the handler to end before the next: every reset is counted.
		oneByOne bool
		// inside: another connection is parked first, outside the budget
		// (1), so that this one is parked within it.
		inside bool
		want   string
	}{
		{name: "at the bound", resets: serving.DefaultRapidResetLimit, oneByOne: true, want: served},
		{name: "one past the bound", resets: serving.DefaultRapidResetLimit + 1, oneByOne: true, want: parkedOut},
		{name: "a flood", resets: 300, want: parkedOut},
		{name: "a flood, within the budget", resets: 300, inside: true, want: parked},
		{name: "a flood, then the client leaves", resets: 300, want: gone},
		{name: "a flood within the budget, then the client leaves", resets: 300, inside: true, want: gone},
		{name: "a flood, then nothing waits", resets: 300, want: expires},
		{name: "a flood within the budget, then nothing waits", resets: 300, inside: true, want: expires},
		{name: "a flood, served before", servedFirst: true, resets: 300, want: served},
		{name: "a flood of answered requests", answered: true, resets: 300, want: served},
		{name: "a flood, no bound", limit: -1, resets: 300, want: served},
		// Refused (401) eight times without being served: parked as
		// well, whether or not it reset a request too, and closed once
		// ParkedMax has passed with nothing waiting.
		{name: "refusals", refusals: 8, want: expires},
		{name: "refusals after a reset", resets: 1, oneByOne: true, refusals: 8, want: expires},
		{name: "one refusal short, after a reset", resets: 1, oneByOne: true, refusals: 7, want: served},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var started, ended atomic.Int64
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/ok":
					_, _ = io.WriteString(w, "ok")
					return
				case "/refuse":
					http.Error(w, "Unauthorized", http.StatusUnauthorized)
					return
				case "/watch":
					w.WriteHeader(http.StatusOK)
					w.(http.Flusher).Flush()
				}
				started.Add(1)
				defer ended.Add(1)
				<-r.Context().Done()
			})
			clk := clocktesting.NewFakeClock(time.Now())
			m := metrics.New()
			srv, err := serving.NewHTTPServer(handler, serving.ServerOptions{
				Certificates: selfSigned(t), RapidResetLimit: tc.limit, ShutdownTimeout: time.Millisecond,
				MaxConnections: 1, Clock: clk, Metrics: m,
			})
			if err != nil {
				t.Fatal(err)
			}
			closes := closedCounter(t, m)
			admitted := admittedGauge(t, m)
			read := metricReader(t, m)
			parkedOutside := func() int64 { return int64(read("reviewauth_connections", "state", "parked")) }
			addr := serve(t, t.Context(), srv)
			// held is what holds the connection checked: the budget, or
			// the room outside it.
			held := parkedOutside
			if tc.inside {
				pre := dialH2(t, addr)
				defer pre.c.Close()
				for id := uint32(1); id < 600; id += 2 {
					if pre.headers(id, "/wait") != nil || pre.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
						break
					}
				}
				waitFor(t, 10*time.Second, "the first connection to be parked outside the budget", func() bool { return parkedOutside() == 1 })
				held = admitted
			}
			h := dialH2(t, addr)
			defer h.c.Close()
			frames := make(chan http2.Frame, 1024)
			go func() {
				defer close(frames)
				for {
					f, err := h.fr.ReadFrame()
					if err != nil {
						return
					}
					if hf, ok := f.(*http2.HeadersFrame); ok {
						// The framer reuses its frames: keep what is read.
						frames <- &http2.HeadersFrame{FrameHeader: hf.FrameHeader}
					} else if f.Header().Type == http2.FrameGoAway {
						frames <- f
					}
				}
			}()
			// answeredWithin waits up to d for the answer to stream id:
			// true if it came, false if the connection ended first or d
			// passed (then timedOut).
			answeredWithin := func(id uint32, d time.Duration) (ok, timedOut bool) {
				deadline := time.After(d)
				for {
					select {
					case f, ok := <-frames:
						if !ok || f.Header().Type == http2.FrameGoAway {
							return false, false
						}
						if f.Header().StreamID == id {
							return true, false
						}
					case <-deadline:
						return false, true
					}
				}
			}
			// answered waits for the answer to stream id: true if it came,
			// false if the connection ended first.
			answered := func(id uint32) bool {
				t.Helper()
				ok, timedOut := answeredWithin(id, 10*time.Second)
				if timedOut {
					t.Fatalf("stream %d was neither answered nor its connection closed within 10s", id)
				}
				return ok
			}
			id := uint32(1)
			if tc.servedFirst {
				if h.headers(id, "/ok") != nil || !answered(id) {
					t.Fatal("the first request was not answered")
				}
				id += 2
			}
			path := "/wait"
			if tc.answered {
				path = "/watch"
			}
			for i := range tc.resets {
				if err := h.headers(id, path); err != nil {
					break // closed
				}
				if tc.answered && !answered(id) {
					break // closed
				}
				if tc.oneByOne {
					waitFor(t, 10*time.Second, "the handler to start", func() bool { return started.Load() == int64(i+1) })
				}
				if err := h.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
					break
				}
				if tc.oneByOne {
					waitFor(t, 10*time.Second, "the handler to end", func() bool { return ended.Load() == int64(i+1) })
				}
				id += 2
			}
			for i := range tc.refusals {
				if h.headers(id, "/refuse") != nil {
					break
				}
				// The last refusal may close the connection before its
				// answer is written.
				if !answered(id) && i < tc.refusals-1 {
					t.Fatalf("refusal %d: the connection was closed", i+1)
				}
				id += 2
			}
			if h.headers(id, "/ok") != nil {
				t.Fatalf("after %d resets, writing a request failed; want it %s", tc.resets, tc.want)
			}
			switch tc.want {
			case served:
				if !answered(id) {
					t.Fatalf("after %d resets (limit %d), the connection was closed; want the request %s", tc.resets, tc.limit, tc.want)
				}
			case gone:
				// Nothing is read from a parked connection: that its
				// client closed it is seen on its socket (CLOSE_WAIT).
				waitFor(t, 10*time.Second, "the parked connection to be held", func() bool { return held() == 1 })
				h.c.Close()
				waitFor(t, 10*time.Second, "the parked connection to be closed once its client left", func() bool {
					clk.Step(time.Second)
					return held() == 0
				})
				if n := closes("evicted") + closes("rapid_reset"); n != 0 {
					t.Errorf("connections closed by admission = %d; want 0 (the client closed it)", n)
				}
			case expires:
				waitFor(t, 10*time.Second, "the parked connection to be held", func() bool { return held() == 1 })
				// The clock has not moved since the connection was parked:
				// step it a second at a time until the connection is closed.
				var stepped time.Duration
				waitFor(t, 30*time.Second, "the parked connection to be closed", func() bool {
					if held() == 0 {
						return true
					}
					clk.Step(time.Second)
					stepped += time.Second
					return false
				})
				if stepped < serving.ParkedMax {
					t.Errorf("the parked connection was closed after %v; want not before ParkedMax (%v)", stepped, serving.ParkedMax)
				}
				// Closed for its rapid reset or its refusals (and, parked
				// first, the one outside the budget).
				want, reason := 1, "rapid_reset"
				if tc.inside {
					want = 2
				}
				if tc.refusals > 0 {
					reason = "refused"
				}
				waitFor(t, 10*time.Second, "the closes to be counted", func() bool { return closes(reason) == want })
				if answered(id) {
					t.Fatalf("after %d resets, a request on the same connection was answered; want it unread", tc.resets)
				}
				if n := closes("evicted"); n != 0 {
					t.Errorf("connections evicted = %d; want 0", n)
				}
			case parked, parkedOut:
				// parked: the budget (1) is the parked connection's: a
				// newcomer is served once its grace has passed, and the
				// parked one is closed for it, its request unanswered.
				// parkedOut: the newcomer is served beside it, nothing
				// closed, its request unanswered.
				client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}}
				defer client.CloseIdleConnections()
				got := make(chan error, 1)
				go func() {
					resp, err := client.Get("https://" + addr + "/ok")
					if err == nil {
						resp.Body.Close()
						if resp.StatusCode != 200 {
							err = fmt.Errorf("status %d", resp.StatusCode)
						}
					}
					got <- err
				}()
				if err := stepUntil(t, clk, got); err != nil {
					t.Fatalf("newcomer: %v", err)
				}
				if tc.want == parkedOut {
					if ok, _ := answeredWithin(id, 200*time.Millisecond); ok {
						t.Fatalf("after %d resets, a request on the same connection was answered; want it unread", tc.resets)
					}
					if e, r, p := closes("evicted"), closes("rapid_reset"), parkedOutside(); e != 0 || r != 0 || p != 1 {
						t.Errorf("closes: %d evicted, %d for rapid reset; parked outside the budget: %d; want 0, 0, 1", e, r, p)
					}
					break
				}
				if answered(id) {
					t.Fatalf("after %d resets, a request on the same connection was answered; want the connection %s", tc.resets, tc.want)
				}
				if got := closes("evicted"); got != 1 || closes("rapid_reset") != 0 {
					t.Errorf("closes: %d evicted, %d for rapid reset; want 1 evicted (the parked connection)", got, closes("rapid_reset"))
				}
			}
		})
	}
}

// TestHTTP2ParkedShutdown: connections parked past the rapid-reset bound,
// their clients still there, do not hold up a graceful shutdown, whether
// parked outside the budget (the first budget's worth) or within it:
// nothing is read from them, so their clients' answers to the server's
// GOAWAY are never read (left parked, net/http's HTTP/2 server closed
// them after its 1 s GOAWAY timeout: the server stopped 1.1 s after it
// was asked to; closed as shutdown starts, 20-30 ms).
func TestHTTP2ParkedShutdown(t *testing.T) {
	t.Parallel()
	if !serving.PeerStateKnown {
		t.Skip("connections are parked on Linux only")
	}
	for _, tc := range []struct {
		name string
		// conns are the connections parked, with a budget of 1: the
		// first outside the budget, the second within it.
		conns int
	}{
		{"outside the budget", 1},
		{"outside and within the budget", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktesting.NewFakeClock(time.Now())
			m := metrics.New()
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
			srv, err := serving.NewHTTPServer(handler, serving.ServerOptions{
				Certificates: selfSigned(t), ShutdownTimeout: 20 * time.Second,
				MaxConnections: 1, Clock: clk, Metrics: m,
			})
			if err != nil {
				t.Fatal(err)
			}
			read := metricReader(t, m)
			closes := closedCounter(t, m)
			addr, stop := serveStoppable(t, t.Context(), srv)
			for i := range tc.conns {
				h := dialH2(t, addr)
				defer h.c.Close()
				for id := uint32(1); id < 600; id += 2 {
					if h.headers(id, "/wait") != nil || h.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
						t.Fatalf("connection %d was closed; want it parked", i+1)
					}
				}
				if i == 0 {
					waitFor(t, 10*time.Second, "the first connection to be parked outside the budget", func() bool {
						return read("reviewauth_connections", "state", "parked") == 1
					})
					continue
				}
				waitFor(t, 10*time.Second, "the second connection to be parked within the budget", func() bool {
					return serving.ParkedWithinBudget(addr) == 1
				})
			}
			if got := closes("rapid_reset"); got != 0 {
				t.Fatalf("%d connections closed for rapid reset; want every one parked", got)
			}
			if took := stop(); took > 500*time.Millisecond {
				t.Errorf("the server stopped %v after it was asked to, with %d connections parked; want within 500ms", took, tc.conns)
			}
		})
	}
}

// closedCounter returns a function that reads m's count of connections
// closed for reason, all stages.
func closedCounter(t *testing.T, m *metrics.Metrics) func(reason string) int {
	read := metricReader(t, m)
	return func(reason string) int { return int(read("reviewauth_connections_closed_total", "reason", reason)) }
}

// TestHealth: /healthz and /livez are always ok; /readyz follows the
// server, not ready before Serve and after shutdown starts.
func TestHealth(t *testing.T) {
	t.Parallel()
	var health serving.Health
	get := func(h http.Handler, path string) int {
		r, _ := http.NewRequest("GET", path, nil)
		w := &recorder{header: http.Header{}}
		h.ServeHTTP(w, r)
		return w.code
	}
	if got := get(&health, "/readyz"); got != 503 {
		t.Errorf("/readyz before serving = %d; want 503", got)
	}
	for _, p := range []string{"/healthz", "/livez"} {
		if got := get(&health, p); got != 200 {
			t.Errorf("%s = %d; want 200", p, got)
		}
	}
	if got := get(&health, "/metrics"); got != 404 {
		t.Errorf("/metrics on Health = %d; want 404", got)
	}
	srv, err := serving.NewHTTPServer(&health, serving.ServerOptions{Health: &health})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	waitFor(t, 10*time.Second, "ready", health.Ready)
	resp, err := http.Get("http://" + ln.Addr().String() + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/readyz while serving = %v, %v; want 200", resp, err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if health.Ready() {
		t.Error("ready after shutdown; want not ready")
	}
}

type recorder struct {
	header http.Header
	code   int
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(p []byte) (int, error) {
	if r.code == 0 {
		r.code = 200
	}
	return len(p), nil
}
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

// TestPerReadDeadline: an authorized client that announces a body and
// stops sending it is cut off after ReadTimeout, while an upload whose
// handler takes longer than ReadTimeout between reads is read to the end:
// the deadline bounds each read, not the request.
func TestPerReadDeadline(t *testing.T) {
	t.Parallel()
	const readTimeout = 300 * time.Millisecond
	stalledErr := make(chan error, 1)
	proceed := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stalled" {
			_, err := io.Copy(io.Discard, r.Body)
			stalledErr <- err
			return
		}
		first := make([]byte, len("first chunk;"))
		if _, err := io.ReadFull(r.Body, first); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		<-proceed // longer than readTimeout: until the stalled body was cut off
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		_, _ = fmt.Fprintf(w, "%d", int64(len(first))+n)
	})
	srv, err := serving.NewHTTPServer(handler, serving.ServerOptions{ReadTimeout: readTimeout})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, t.Context(), srv)

	start := time.Now()
	uploaded := make(chan string, 1)
	go func() {
		resp, err := http.Post("http://"+addr+"/upload", "text/plain", strings.NewReader("first chunk;second chunk"))
		if err != nil {
			uploaded <- err.Error()
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		uploaded <- fmt.Sprint(resp.StatusCode, " ", string(body))
	}()

	stalled, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	if _, err := io.WriteString(stalled, "POST /stalled HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\npartial"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stalledErr:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("read of a stalled body = %v; want a timeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a stalled body was not cut off within 30s")
	}
	close(proceed)
	if got := <-uploaded; got != "200 24" {
		t.Errorf("upload read over %v (> ReadTimeout) = %q; want 200 and 24 bytes read", time.Since(start), got)
	}
	if time.Since(start) <= readTimeout {
		t.Fatalf("the upload lasted %v, not longer than ReadTimeout", time.Since(start))
	}
}
