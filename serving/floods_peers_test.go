package serving_test

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/reviewauth/reviewauth/internal/reliability"
)

// BenchmarkFloodPeers measures, under the attacks of TestFloodsHTTP and
// TestFloodsGRPC, what the peers serve: kube-rbac-proxy v0.21's server
// (net/http with TLS and no connection cap, header or idle timeout) and
// the upstream CSI snapshot-metadata sidecar's (grpc-go's defaults with
// TLS). Each sub-benchmark runs one attack once, whatever b.N, and reports
// the share of calls answered within 1s and the new-connection p50/p95.
// Run it with -bench FloodPeers -benchtime 1x.
func BenchmarkFloodPeers(b *testing.B) {
	report := func(b *testing.B, newTries, existingTries *reliability.Tries) {
		n, x := newTries.Summary(reliability.Bound), existingTries.Summary(reliability.Bound)
		b.Logf("new connection: %v", n)
		b.Logf("existing connection: %v", x)
		b.ReportMetric(100*n.Fraction(), "new-within-1s-%")
		b.ReportMetric(100*x.Fraction(), "existing-within-1s-%")
		b.ReportMetric(float64(n.P50.Milliseconds()), "new-p50-ms")
		b.ReportMetric(float64(min(n.P95, reliability.CallTimeout).Milliseconds()), "new-p95-ms")
	}
	for _, a := range []reliability.Attack{reliability.HTTPIdle, reliability.HTTPSlowloris, reliability.HTTPBodylessPost} {
		b.Run("kube-rbac-proxy net/http/"+string(a), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			cert := selfSigned(b).ServerConfig("h2", "http/1.1")
			srv := &http.Server{Handler: refuseUnauthenticated, TLSConfig: cert, ErrorLog: log.New(io.Discard, "", 0)}
			go func() { _ = srv.ServeTLS(ln, "", "") }()
			defer srv.Close()
			url := "https://" + ln.Addr().String() + "/metrics"
			keepAlive := reliability.KeepAliveClient()
			defer keepAlive.CloseIdleConnections()
			var res reliability.AttackResult
			newTries, existingTries := reliability.Measure(b.Context(), reliability.Run,
				reliability.AttackFunc(b, reliability.AttackSpec{Addr: ln.Addr().String(), Kind: a, N: reliability.Attackers, Path: "/metrics"}, &res),
				reliability.HTTPGet(reliability.NewConnectionClient(), url, "Bearer x", 200), reliability.HTTPGet(keepAlive, url, "Bearer x", 200))
			report(b, newTries, existingTries)
		})
	}
	for _, a := range []reliability.Attack{reliability.NoTLS, reliability.NoPreface, reliability.PrefaceOnly, reliability.EmptyStreams, reliability.RapidReset} {
		b.Run("upstream sidecar grpc-go/"+string(a), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(selfSigned(b).ServerConfig("h2"))))
			healthpb.RegisterHealthServer(srv, health.NewServer())
			go func() { _ = srv.Serve(ln) }()
			defer srv.Stop()
			addr := ln.Addr().String()
			existing, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})))
			if err != nil {
				b.Fatal(err)
			}
			defer existing.Close()
			check := healthpb.NewHealthClient(existing)
			var res reliability.AttackResult
			newTries, existingTries := reliability.Measure(b.Context(), reliability.Run,
				reliability.AttackFunc(b, reliability.AttackSpec{Addr: addr, Kind: a, N: reliability.Attackers, Path: "/grpc.health.v1.Health/Check"}, &res),
				grpcNewConnCheck(addr), func(ctx context.Context) error {
					_, err := check.Check(ctx, &healthpb.HealthCheckRequest{})
					return err
				})
			report(b, newTries, existingTries)
		})
	}
}
