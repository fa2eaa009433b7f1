package serving_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

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
