package serving_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/reviewauth/reviewauth/metrics"
	"github.com/reviewauth/reviewauth/serving"
)

// frameOp is one frame a test client writes.
type frameOp struct {
	typ     http2.FrameType
	stream  uint32
	payload int // DATA's length; for others, the frame's own
}

// writeFrames writes the preface (unless skipped) and ops with a Framer,
// and returns the bytes and the RST_STREAM frames among them.
func writeFrames(t testing.TB, preface bool, ops []frameOp) ([]byte, int) {
	t.Helper()
	var buf bytes.Buffer
	if preface {
		buf.WriteString(http2.ClientPreface)
	}
	fr := http2.NewFramer(&buf, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	resets := 0
	for _, op := range ops {
		var err error
		switch op.typ {
		case http2.FrameSettings:
			err = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
		case http2.FrameHeaders:
			hb.Reset()
			_ = enc.WriteField(hpack.HeaderField{Name: ":path", Value: "/\x03\x03\x03"})
			err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: op.stream, BlockFragment: hb.Bytes(), EndHeaders: true})
		case http2.FrameData:
			// A payload of RST_STREAM-looking bytes: skipped, not read as
			// headers.
			err = fr.WriteData(op.stream, false, bytes.Repeat([]byte{0, 0, 4, 3, 0, 0, 0, 0, 1}, op.payload/9+1)[:op.payload])
		case http2.FrameRSTStream:
			err = fr.WriteRSTStream(op.stream, http2.ErrCodeCancel)
			resets++
		case http2.FramePing:
			err = fr.WritePing(false, [8]byte{3, 3, 3})
		case http2.FrameWindowUpdate:
			err = fr.WriteWindowUpdate(op.stream, 3)
		default:
			t.Fatalf("no writer for %v", op.typ)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes(), resets
}

// scanChunks feeds b to a scanner in chunks of the sizes given (the last
// repeated) and returns the resets it counted.
func scanChunks(b []byte, sawPreface bool, sizes ...int) int {
	s := serving.NewFrameScanner(sawPreface)
	n, i := 0, 0
	for len(b) > 0 {
		size := sizes[min(i, len(sizes)-1)]
		i++
		size = max(1, min(size, len(b)))
		n += s.Scan(b[:size])
		b = b[size:]
	}
	return n
}

// TestFrameScanner: the scanner counts a client's RST_STREAM frames
// however the server's reads split them (at every byte, in a frame's
// header or payload), after the preface or without it, and does not
// take a payload's bytes for frames.
func TestFrameScanner(t *testing.T) {
	t.Parallel()
	flood := []frameOp{{typ: http2.FrameSettings}}
	for id := uint32(1); id < 200; id += 2 {
		flood = append(flood, frameOp{typ: http2.FrameHeaders, stream: id}, frameOp{typ: http2.FrameRSTStream, stream: id})
	}
	for _, tc := range []struct {
		name    string
		preface bool
		ops     []frameOp
		want    int
	}{
		{name: "preface only", preface: true},
		{name: "settings, no reset", preface: true, ops: []frameOp{{typ: http2.FrameSettings}, {typ: http2.FramePing}, {typ: http2.FrameWindowUpdate}}},
		{name: "one reset", preface: true, ops: []frameOp{{typ: http2.FrameSettings}, {typ: http2.FrameHeaders, stream: 1}, {typ: http2.FrameRSTStream, stream: 1}}, want: 1},
		{name: "a flood", preface: true, ops: flood, want: 100},
		{name: "after the preface was read (h2c)", ops: flood, want: 100},
		{name: "resets in a payload are no resets", preface: true, ops: []frameOp{{typ: http2.FrameSettings}, {typ: http2.FrameHeaders, stream: 1}, {typ: http2.FrameData, stream: 1, payload: 16384}, {typ: http2.FrameRSTStream, stream: 1}}, want: 1},
		{name: "an empty payload", preface: true, ops: []frameOp{{typ: http2.FrameHeaders, stream: 1}, {typ: http2.FrameData, stream: 1}, {typ: http2.FrameRSTStream, stream: 1}, {typ: http2.FrameData, stream: 3}}, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, resets := writeFrames(t, tc.preface, tc.ops)
			if resets != tc.want {
				t.Fatalf("wrote %d resets; the case wants %d", resets, tc.want)
			}
			for _, sizes := range [][]int{{len(b)}, {1}, {2}, {5}, {9}, {10}, {13}, {24, 9, 4, 1000}, {23, 1, 8, 2}} {
				if got := scanChunks(b, !tc.preface, sizes...); got != tc.want {
					t.Errorf("read in chunks of %v: %d resets; want %d", sizes, got, tc.want)
				}
			}
		})
	}
}

// FuzzFrameScanner: for any sequence of frames a client may write (the
// fuzzer's bytes choose them and how the reads split them), the scanner
// counts the RST_STREAM frames x/net's Framer reads from the same bytes;
// on any bytes at all it does not panic.
func FuzzFrameScanner(f *testing.F) {
	f.Add([]byte{0, 3, 1, 3, 2, 4}, []byte{1, 9}, true)
	f.Add([]byte{1, 1, 3, 3, 5, 3, 2, 2}, []byte{24, 1, 7}, false)
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x04\x03"), []byte{3}, true)
	types := []http2.FrameType{http2.FrameSettings, http2.FrameHeaders, http2.FrameData, http2.FrameRSTStream, http2.FramePing, http2.FrameWindowUpdate}
	f.Fuzz(func(t *testing.T, choose, split []byte, preface bool) {
		sizes := []int{1 << 30}
		if len(split) > 0 {
			sizes = sizes[:0]
			for _, b := range split {
				sizes = append(sizes, int(b)+1)
			}
		}
		// Any bytes: no panic.
		_ = scanChunks(choose, !preface, sizes...)
		if len(choose) > 200 {
			choose = choose[:200]
		}
		var ops []frameOp
		for i, b := range choose {
			op := frameOp{typ: types[int(b)%len(types)], stream: uint32(2*i + 1)}
			if op.typ == http2.FrameData {
				op.payload = int(b) * 67
			}
			ops = append(ops, op)
		}
		b, _ := writeFrames(t, preface, ops)
		// The oracle: x/net's Framer, reading what was written.
		r := bytes.NewReader(b)
		if preface {
			r.Seek(int64(len(http2.ClientPreface)), io.SeekStart)
		}
		fr := http2.NewFramer(nil, r)
		fr.SetMaxReadFrameSize(1 << 24)
		want := 0
		for {
			fh, err := fr.ReadFrame()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				var se http2.StreamError
				if !errors.As(err, &se) {
					t.Fatalf("oracle: %v", err)
				}
				continue
			}
			if fh.Header().Type == http2.FrameRSTStream {
				want++
			}
		}
		if got := scanChunks(b, !preface, sizes...); got != want {
			t.Fatalf("scanner counted %d resets; the Framer read %d", got, want)
		}
	})
}

// BenchmarkFrameScanner: what counting a rapid-reset client's resets
// costs as the server reads them ("scanner": the 9-byte headers read in
// place), beside reading the same bytes with x/net's Framer ("framer"),
// which a scan beside net/http's own would need (and a copy of the
// bytes, and a goroutine per connection).
func BenchmarkFrameScanner(b *testing.B) {
	var ops []frameOp
	for id := uint32(1); id < 2000; id += 2 {
		ops = append(ops, frameOp{typ: http2.FrameHeaders, stream: id}, frameOp{typ: http2.FrameRSTStream, stream: id})
	}
	buf, resets := writeFrames(b, false, ops)
	b.Run("scanner", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			s := serving.NewFrameScanner(true)
			if n := s.Scan(buf); n != resets {
				b.Fatalf("%d resets; want %d", n, resets)
			}
		}
	})
	b.Run("framer", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		r := bytes.NewReader(buf)
		for b.Loop() {
			r.Reset(buf)
			fr := http2.NewFramer(nil, r)
			n := 0
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					break
				}
				if f.Header().Type == http2.FrameRSTStream {
					n++
				}
			}
			if n != resets {
				b.Fatalf("%d resets; want %d", n, resets)
			}
		}
	})
}

// TestH2ClientCertificate: served by x/net's HTTP/2 server through the
// connection that counts resets, a request over HTTP/2 still carries its
// connection's TLS state (the client's certificate, for x509
// authentication), with a connection budget or without.
func TestH2ClientCertificate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		max  int
	}{
		{name: "budget"},
		{name: "no budget", max: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ca := newCA(t, "client CA")
			certs, err := serving.NewCertificates(serving.CertificateOptions{ClientCAFile: writeFile(t, t.TempDir(), "ca.crt", ca.pem), SelfSigned: serving.SelfSigned{Name: "test"}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(certs.Close)
			srv, err := serving.NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
					http.Error(w, "no client certificate", http.StatusUnauthorized)
					return
				}
				_, _ = io.WriteString(w, r.Proto+" "+r.TLS.PeerCertificates[0].Subject.CommonName)
			}), serving.ServerOptions{Certificates: certs, MaxConnections: tc.max})
			if err != nil {
				t.Fatal(err)
			}
			addr := serve(t, t.Context(), srv)
			client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{ca.clientCert(t, "alice")}}}}
			defer client.CloseIdleConnections()
			req, _ := http.NewRequest("GET", "https://"+addr+"/", nil)
			if code, body := get(t, client, req); code != 200 || body != "HTTP/2.0 alice" {
				t.Fatalf("= %d %q; want 200 \"HTTP/2.0 alice\"", code, body)
			}
		})
	}
}

// TestH2CRapidReset: HTTP/2 with prior knowledge (h2c, a Unix socket's
// server) counts a client's resets as they are read too: with handlers
// busy, its connection is parked past RapidResetLimit, and a request
// over h2c is served.
func TestH2CRapidReset(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	defer close(block)
	var started atomic.Int64
	m := metrics.New()
	srv, err := serving.NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started.Add(1)
			<-block
			return
		}
		_, _ = io.WriteString(w, r.Proto)
	}), serving.ServerOptions{UnencryptedHTTP2: true, MaxConcurrentStreams: 4, ShutdownTimeout: time.Millisecond, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	read := metricReader(t, m)
	addr := serve(t, t.Context(), srv)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	h := &h2Conn{c: c, fr: http2.NewFramer(c, c)}
	h.enc = hpack.NewEncoder(&stringWriter{&h.buf})
	go func() { _, _ = io.Copy(io.Discard, c) }()
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for id := uint32(1); id < 4000; id += 2 {
			if h.headers(id, "/slow") != nil || h.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				return
			}
		}
	}()
	waitFor(t, 10*time.Second, "the h2c connection to be parked", func() bool {
		return read("reviewauth_connections", "state", "parked") == 1
	})
	if n := started.Load(); n > 4 {
		t.Errorf("handlers started = %d; want at most MaxConcurrentStreams (4)", n)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &protocols}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	if code, body := get(t, client, req); code != 200 || body != "HTTP/2.0" {
		t.Fatalf("= %d %q; want 200 over HTTP/2", code, body)
	}
}
