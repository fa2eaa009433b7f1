package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	snapshotfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	smsv1alpha1 "github.com/kubernetes-csi/external-snapshot-metadata/client/apis/snapshotmetadataservice/v1alpha1"
	smsfake "github.com/kubernetes-csi/external-snapshot-metadata/client/clientset/versioned/fake"

	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/examples/internal/cli"
	"github.com/reviewauth/reviewauth/examples/internal/clitest"
	"github.com/reviewauth/reviewauth/internal/reliability"
	"github.com/reviewauth/reviewauth/serving"
)

// fakeSnapshotsMain is main with the snapshot API of the unit tests
// (testSnapshots, a SnapshotMetadataService naming testAudience) from fake
// clientsets, for the process TestFloods runs: the fake API server serves
// reviews, not snapshots.
func fakeSnapshotsMain() {
	cli.Main("snapshotmetadata", func(ctx context.Context) error {
		services := smsfake.NewSimpleClientset(&smsv1alpha1.SnapshotMetadataService{
			ObjectMeta: metav1.ObjectMeta{Name: testDriver},
			Spec:       smsv1alpha1.SnapshotMetadataServiceSpec{Audience: testAudience, Address: "flood", CACert: []byte("flood")},
		})
		return run(ctx, os.Args[1:], deps{backend: FakeBackend{}, snapshots: snapshotfake.NewSimpleClientset(testSnapshots()...), services: services},
			func(addr net.Addr) { fmt.Printf("listening on %s\n", addr) })
	})
}

// Bounds of the sidecar's flood test.
const (
	// sidecarFloodRun is how long each attack is measured.
	sidecarFloodRun = 3 * time.Second
	// sidecarExtraFiles bounds the files the process holds beyond its
	// budget of client connections while attacked, counted from its files
	// before (listeners, API server connections, log files): connections
	// waiting to be admitted (as many as the budget), connections parked
	// outside the budget past the rapid-reset bound (as many again; junk
	// tokens at full speed pass it too, their calls past MaxUnservedCalls
	// refused), one being swapped in; and, as the fake API server speaks
	// HTTP/1.1 (a real one speaks HTTP/2, one connection), a connection
	// per review in flight (16 TokenReviews, 16 SubjectAccessReviews) and
	// the JWKS fetch.
	sidecarExtraFiles = 2*reliability.Budget + 1 + 2*16 + 1
	// sidecarRSSBound bounds the sidecar's resident memory during the
	// rapid-reset attack; the race detector (the sidecar is this test
	// binary) multiplies it, so its bound is sidecarRaceRSSBound.
	sidecarRSSBound     = 256 << 20
	sidecarRaceRSSBound = 1 << 30
	// recoveryBound is how soon after an attack's end the sidecar holds
	// no client connection but the existing one: the rapid-reset
	// attackers' connections parked outside the budget (at most the
	// budget's worth), whose clients stopped with frames unsent and are
	// never seen to close them, are closed 10 s after they were parked
	// (serving's parkedMax), one per EvictionInterval, once nothing
	// waits; the rest within 5 s.
	recoveryBound = 10*time.Second + reliability.Budget*serving.DefaultEvictionInterval + 5*time.Second
)

// TestFloods (issue #22): the snapshot-metadata sidecar as a process, with
// --max-connections=64 and every other serving default (JWKS
// pre-verification on), attacked by 112 connections of each kind from the
// backup client's own address, reopening at once: TCP without TLS, TLS
// without the HTTP/2 preface, a preface without streams, 100 streams
// without a request, HTTP/2 rapid reset, and calls with JWT-shaped junk
// tokens. The backup client, minting a token for every call as the
// upstream iterator does, is served within 1s at least 95% of the time on
// a new connection and every time on one opened before; the process never
// holds more files than before plus the budget (and sidecarExtraFiles);
// during rapid reset its resident memory stays under sidecarRSSBound and
// its files are back to what they were within recoveryBound of the
// attack's end; each
// unverifiable junk token costs at most one TokenReview and a forged one
// none; and SIGTERM in the middle of rapid reset ends the process within
// its shutdown grace.
func TestFloods(t *testing.T) {
	// Timings on a 2-core machine: never beside another flood test.
	reliability.Exclusive(t)
	s := authtest.Start(t)
	s.SetPolicy(authtest.Rules(authtest.Rule{
		Users: []string{backupUser.Name}, Verbs: []string{"get"}, APIGroups: []string{snapshotGroup},
		Resources: []string{snapshotResource}, Namespaces: []string{testNS}, Names: allowedSnapshots,
	}))
	dir := t.TempDir()
	kubeconfig, caFile := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "ca.pem")
	if err := s.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	proc := clitest.Start(t, "--listen=127.0.0.1:0", "--kubeconfig="+kubeconfig, "--driver="+testDriver,
		"--self-signed-ca-file="+caFile, fmt.Sprintf("--max-connections=%d", reliability.Budget))
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	creds := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: poolOf(caPEM)}))
	token := func() string { return s.MintToken(backupUser, []string{testAudience}, time.Now().Add(time.Hour)) }
	call := func(ctx context.Context, cc *grpc.ClientConn, tok string) error {
		_, err := recvAll(api.NewSnapshotMetadataClient(cc).GetMetadataAllocated(ctx,
			&api.GetMetadataAllocatedRequest{SecurityToken: tok, Namespace: testNS, SnapshotName: "snap-1"}))
		return err
	}
	newConn := func(ctx context.Context) error {
		cc, err := grpc.NewClient(proc.Addr, creds)
		if err != nil {
			return err
		}
		defer cc.Close()
		return call(ctx, cc, token())
	}
	existing, err := grpc.NewClient(proc.Addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer existing.Close()
	existingCall := func(ctx context.Context) error { return call(ctx, existing, token()) }
	if err := existingCall(t.Context()); err != nil {
		t.Fatalf("a call before the attacks: %v", err)
	}
	pid := proc.Pid()
	baseFiles, err := reliability.OpenFiles(pid)
	if err != nil {
		t.Skipf("cannot count the process's files: %v", err)
	}
	files := func() int64 { n, _ := reliability.OpenFiles(pid); return int64(n) }
	_, portStr, _ := net.SplitHostPort(proc.Addr)
	port, _ := strconv.Atoi(portStr)
	serverConns := func() int {
		n, err := reliability.ServerConns(port)
		if err != nil {
			t.Fatalf("counting the sidecar's connections: %v", err)
		}
		return n
	}
	// check logs an attack's figures, reports the files over the bound and
	// returns the timing goals missed.
	check := func(name string, newTries, existingTries *reliability.Tries, peakFiles int64) []string {
		t.Helper()
		n, x := newTries.Summary(reliability.Bound), existingTries.Summary(reliability.Bound)
		t.Logf("%s: new connection: %v", name, n)
		t.Logf("%s: existing connection: %v", name, x)
		t.Logf("%s: peak open files %d (before: %d, budget %d)", name, peakFiles, baseFiles, reliability.Budget)
		if limit := int64(baseFiles + reliability.Budget + sidecarExtraFiles); peakFiles > limit {
			t.Errorf("%s: %d open files; want at most %d (before, plus the budget, plus %d)", name, peakFiles, limit, sidecarExtraFiles)
		}
		return append(n.Missed("new-connection", reliability.NewGoal), x.Missed("existing-connection", reliability.ExistingGoal)...)
	}
	const method = "/snapshotmetadata.SnapshotMetadata/GetMetadataAllocated"
	flood := func(a reliability.Attack) func(ctx context.Context) {
		var res reliability.AttackResult
		return reliability.AttackFunc(t, reliability.AttackSpec{Addr: proc.Addr, Kind: a, N: reliability.Attackers, Path: method}, &res)
	}
	for _, a := range []reliability.Attack{reliability.NoTLS, reliability.NoPreface, reliability.PrefaceOnly, reliability.EmptyStreams} {
		reliability.Goal(t, string(a), func() []string {
			sampler := reliability.Sample(files)
			newTries, existingTries := reliability.Measure(t.Context(), sidecarFloodRun, flood(a), newConn, existingCall)
			return check(string(a), newTries, existingTries, sampler.Stop())
		})
	}

	// Rapid reset: memory during, files after.
	reliability.Goal(t, "rapid reset", func() []string {
		sampler := reliability.Sample(files)
		rss := reliability.Sample(func() int64 { n, _ := reliability.ResidentBytes(pid); return n })
		newTries, existingTries := reliability.Measure(t.Context(), sidecarFloodRun, flood(reliability.RapidReset), newConn, existingCall)
		end := time.Now()
		missed := check("rapid reset", newTries, existingTries, sampler.Stop())
		peakRSS := rss.Stop()
		bound := int64(sidecarRSSBound)
		if raceEnabled {
			bound = sidecarRaceRSSBound
		}
		t.Logf("rapid reset: peak resident memory %d MiB (bound %d MiB, race detector %v)", peakRSS>>20, bound>>20, raceEnabled)
		if peakRSS > bound {
			t.Errorf("resident memory during rapid reset = %d MiB; want at most %d MiB", peakRSS>>20, bound>>20)
		}
		// The files the attack made the sidecar hold are its client
		// connections; only the existing connection is left.
		for n := serverConns(); n > 1; n = serverConns() {
			if time.Since(end) > recoveryBound {
				t.Errorf("%d client connections %v after rapid reset; want 1 (the existing connection)", n, recoveryBound)
				return missed
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("rapid reset: client connections back to 1 within %v of the attack's end (open files %d, before %d)", time.Since(end).Round(time.Millisecond), files(), baseFiles)
		return missed
	})

	// Junk tokens at full speed, in the request's security_token.
	genuine := token()
	reliability.Goal(t, "junk tokens", func() []string {
		sampler := reliability.Sample(files)
		var res reliability.AttackResult
		newTries, existingTries := reliability.Measure(t.Context(), sidecarFloodRun, reliability.AttackFunc(t, reliability.AttackSpec{
			Addr: proc.Addr, Kind: reliability.JunkGRPCAttack, N: reliability.Attackers, PerConn: 4, Path: method, Genuine: genuine, Namespace: testNS, Name: "snap-1"}, &res), newConn, existingCall)
		missed := check("junk tokens", newTries, existingTries, sampler.Stop())
		unverifiable, forged, maxPer := reliability.JunkReviews(s.TokenReviews(), reliability.KeyID(genuine))
		p95 := newTries.Summary(reliability.Bound).P95
		t.Logf("junk tokens: %d sent; TokenReviews of unverifiable ones %d (at most %d per token), of forged ones %d", res.Sent, unverifiable, maxPer, forged)
		if forged != 0 || maxPer > 1 {
			t.Errorf("TokenReviews of forged junk = %d (want 0); most reviews of one unverifiable junk token = %d (want at most 1)", forged, maxPer)
		}
		if p95 > reliability.Bound {
			missed = append(missed, fmt.Sprintf("new-connection p95 = %v; want at most %v", p95, reliability.Bound))
		}
		return missed
	})

	// SIGTERM mid rapid reset.
	attack := reliability.StartAttack(t, reliability.AttackSpec{Addr: proc.Addr, Kind: reliability.RapidReset, N: reliability.Attackers, Path: method})
	time.Sleep(reliability.Ramp) // the attack under way: a wait for load, not for a timer
	took := proc.Terminate(t)
	attack.Stop(t)
	t.Logf("SIGTERM mid rapid reset: exited after %v", took.Round(time.Millisecond))
	if took > serving.DefaultShutdownTimeout+2*time.Second {
		t.Errorf("exit %v after SIGTERM mid-attack; want within the shutdown grace (%v)", took, serving.DefaultShutdownTimeout)
	}
}
