package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/local"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/examples/internal/clitest"
	"github.com/reviewauth/reviewauth/grpcauth"
)

// TestNoTokenAtAnyVerbosity (issue #12): the real program at -v=10, in
// text and in JSON, serving allowed, denied and unauthenticated calls,
// never writes a token.
func TestNoTokenAtAnyVerbosity(t *testing.T) {
	s := authtest.Start(t)
	s.SetPolicy(authtest.Rules(authtest.Rule{Users: []string{"system:serviceaccount:dra:driver"}, Verbs: []string{"get"},
		APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Namespaces: []string{"gpu-jobs"}}))
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := s.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	tokens := []string{s.MintToken(driverOn("node-a"), []string{testAudience}, exp), s.MintToken(driverOn("node-b"), []string{testAudience}, exp),
		s.MintToken(driverOn("node-a"), nil, exp), "not-a-token-0123456789abcdef"}
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "dra")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			sock := filepath.Join(dir, "p.sock")
			p := clitest.Start(t, "--listen=unix://"+sock, "--kubeconfig="+kubeconfig, "--audience="+testAudience,
				"--node-name=node-a", "-v=10", "--logging-format="+format)
			for _, tok := range tokens {
				for _, ns := range []string{"gpu-jobs", "other"} {
					src, err := grpcauth.NewFileTokenSource(writeTokenFile(t, tok), grpcauth.FileOptions{})
					if err != nil {
						t.Fatal(err)
					}
					conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(local.NewCredentials()),
						grpc.WithPerRPCCredentials(grpcauth.PerRPCCredentials(src)))
					if err != nil {
						t.Fatal(err)
					}
					_ = conn.Invoke(t.Context(), methodPrepare, NewPrepareRequest(ns, "claim-1"), NewPrepareResponse())
					conn.Close()
				}
			}
			p.Stop(t)
			out := p.Output()
			if !strings.Contains(out, "grpcauth") && !strings.Contains(out, "TokenReview") && len(out) < 1000 {
				t.Fatalf("little output at -v=10; is the logging flag applied?\n%s", out)
			}
			for _, tok := range tokens {
				for _, part := range append(strings.Split(tok, "."), tok) {
					if len(part) > 20 && strings.Contains(out, part) {
						t.Fatal("the output holds (part of) a token")
					}
				}
			}
		})
	}
}

// TestVersionAndHealth (issue #12): --version prints the version;
// --metrics-listen serves /healthz, /livez and /readyz (ready while
// serving) and /metrics.
func TestVersionAndHealth(t *testing.T) {
	if err := run(context.Background(), []string{"--version"}, nil); err != nil {
		t.Fatalf("run(--version) = %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metrics := ln.Addr().String()
	ln.Close()
	startPlugin(t, "127.0.0.1:0", "--metrics-listen="+metrics)
	for _, path := range []string{"/healthz", "/livez", "/readyz", "/metrics"} {
		var resp *http.Response
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err = http.Get("http://" + metrics + path)
			if err == nil || time.Now().After(deadline) {
				break
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
