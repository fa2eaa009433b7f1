package serving_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/reviewauth/reviewauth/serving"
)

// startGRPC serves the health service with opts until the test ends.
func startGRPC(t testing.TB, opts serving.GRPCOptions) string {
	t.Helper()
	srv := grpc.NewServer(serving.GRPCServerOptions(opts)...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- serving.ServeGRPC(ctx, srv, ln, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeGRPC() = %v after cancel; want nil", err)
		}
	})
	return ln.Addr().String()
}

func healthCheck(t testing.TB, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check = %v, %v; want SERVING", resp, err)
	}
}

// rawH2 opens a TLS connection with ALPN h2 and sends the client preface
// and SETTINGS.
func rawH2(t testing.TB, addr string) (*tls.Conn, *http2.Framer) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c, fr
}

// TestGRPCHardening (issue #12): a gRPC server built with
// GRPCServerOptions serves TLS from Certificates; advertises
// MaxConcurrentStreams; closes a connection that does not complete its
// handshake within ConnectionTimeout; disconnects a client that pings
// more often than KeepaliveMinTime allows (ENHANCE_YOUR_CALM); and serves
// a legitimate call while 300 silent connections are held.
func TestGRPCHardening(t *testing.T) {
	t.Parallel()
	addr := startGRPC(t, serving.GRPCOptions{
		Certificates:         selfSigned(t),
		MaxConcurrentStreams: 17,
		ConnectionTimeout:    time.Second,
	})
	var held []net.Conn
	for range 300 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	healthCheck(t, addr)

	t.Run("streams advertised", func(t *testing.T) {
		c, fr := rawH2(t, addr)
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
				if v, _ := s.Value(http2.SettingMaxConcurrentStreams); v != 17 {
					t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d; want 17", v)
				}
				return
			}
		}
	})
	t.Run("ping flood", func(t *testing.T) {
		c, fr := rawH2(t, addr)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			for i := range 20 {
				if fr.WritePing(false, [8]byte{byte(i)}) != nil {
					return
				}
			}
		}()
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("reading frames: %v; want GOAWAY", err)
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				if g.ErrCode != http2.ErrCodeEnhanceYourCalm || string(g.DebugData()) != "too_many_pings" {
					t.Errorf("GOAWAY %v %q; want ENHANCE_YOUR_CALM too_many_pings", g.ErrCode, g.DebugData())
				}
				return
			}
		}
	})
	t.Run("silent connections closed", func(t *testing.T) {
		for i, c := range held {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.Copy(io.Discard, c); err != nil {
				t.Fatalf("held connection %d: %v; want closed by the server after ConnectionTimeout", i, err)
			}
		}
	})
	healthCheck(t, addr)
}

// grpcHeaders writes a gRPC call's HEADERS for method on stream id.
func grpcHeaders(fr *http2.Framer, enc *hpack.Encoder, buf *bytes.Buffer, id uint32, method string, endStream bool) error {
	buf.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "x"}, {":path", method},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndStream: endStream, EndHeaders: true})
}

// TestGRPCRapidReset (CVE-2023-44487 for gRPC): a client that opens
// streams and resets them at once has its connection closed by the server
// past RapidResetLimit, while a legitimate client on another connection
// is served. grpc-go alone (RapidResetLimit -1, what the upstream sidecar
// runs) keeps the connection after 20,000 such streams.
func TestGRPCRapidReset(t *testing.T) {
	t.Parallel()
	const limit, streams = 50, 20000
	for _, tt := range []struct {
		name  string
		limit int
	}{{"bounded", limit}, {"grpc-go alone", -1}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr := startGRPC(t, serving.GRPCOptions{Certificates: selfSigned(t), RapidResetLimit: tt.limit, RapidResetRate: 1})
			c, fr := rawH2(t, addr)
			defer c.Close()
			var buf bytes.Buffer
			enc := hpack.NewEncoder(&buf)
			closed := make(chan int, 1)
			pong := make(chan struct{}, 1)
			var sent atomic.Int64
			go func() {
				_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						closed <- int(sent.Load())
						return
					}
					if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
						pong <- struct{}{}
					}
				}
			}()
			attack := make(chan struct{})
			go func() {
				defer close(attack)
				for id := uint32(1); id < 2*streams; id += 2 {
					if grpcHeaders(fr, enc, &buf, id, "/grpc.health.v1.Health/Check", false) != nil || fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
						return
					}
					sent.Add(1)
				}
			}()
			healthCheck(t, addr)
			if tt.limit < 0 {
				<-attack
				if err := fr.WritePing(false, [8]byte{1}); err != nil {
					t.Fatalf("ping after %d resets: %v", streams, err)
				}
				select {
				case <-pong:
				case n := <-closed:
					t.Fatalf("grpc-go alone closed the connection after %d resets", n)
				}
				return
			}
			select {
			case n := <-closed:
				if n < limit {
					t.Errorf("connection closed after %d resets; want at least RapidResetLimit (%d)", n, limit)
				}
				t.Logf("the rapid-reset connection was closed after %d streams sent", n)
			case <-time.After(30 * time.Second):
				t.Fatal("the rapid-reset connection was not closed within 30s")
			}
			healthCheck(t, addr)
		})
	}
}

// TestGRPCUnservedCalls: a connection that has not completed a call may
// have at most MaxUnservedCalls calls in progress (the next is refused
// with ResourceExhausted before a handler starts, at the limit and past
// it); once one completed, only MaxConcurrentStreams applies.
func TestGRPCUnservedCalls(t *testing.T) {
	t.Parallel()
	const limit = 3
	addr := startGRPC(t, serving.GRPCOptions{Certificates: selfSigned(t), MaxUnservedCalls: limit})
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	watch := func(ctx context.Context) error {
		w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = w.Recv() // the first status: the call is in progress
		return err
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var cancels []context.CancelFunc
	for i := range limit {
		wctx, wcancel := context.WithCancel(ctx)
		cancels = append(cancels, wcancel)
		if err := watch(wctx); err != nil {
			t.Fatalf("call %d of %d on a new connection: %v", i+1, limit, err)
		}
	}
	if err := watch(ctx); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("call %d on a connection that completed none = %v; want ResourceExhausted", limit+1, err)
	}
	cancels[0]() // one ends: room for one
	waitFor(t, 10*time.Second, "a call to be admitted after one ended", func() bool {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil
	})
	for i := range 3 * limit { // served: only MaxConcurrentStreams applies
		if err := watch(ctx); err != nil {
			t.Fatalf("call %d on a connection that completed one: %v", i+1, err)
		}
	}
}
