package serving_test

import (
	"net"
	"runtime"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/metrics"
	"github.com/reviewauth/reviewauth/serving"
)

// TestParkOutsideTheBudget: a connection parked past the rapid-reset bound
// leaves the budget (1) while fewer than the budget's worth are parked
// outside it, so that the next connection is admitted at once and nothing
// is closed; one parked past that stays within it. A connection closed
// before its reset is counted (a reset that ends as the server closes the
// connection) is not parked: it is in no list (parking it crashed the
// process at the default budget under 600 rapid-reset clients) and holds
// nothing.
func TestParkOutsideTheBudget(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("connections are parked on Linux only")
	}
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	m := metrics.New()
	read := metricReader(t, m)
	state := func(s string) int { return int(read("reviewauth_connections", "state", s)) }
	inner := newChanListener()
	ln := serving.AdmissionListener(inner, 1, serving.LimitOptions{Clock: clk, Metrics: m}, serving.AdmissionTestConfig{})
	defer ln.Close()
	accept := func() net.Conn {
		t.Helper()
		_, srv := tcpPair(t)
		inner.conns <- srv
		got := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				t.Error(err)
			}
			got <- c
		}()
		select {
		case c := <-got:
			if c == nil {
				t.FailNow()
			}
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("a connection was not admitted within 10s")
		}
		return nil
	}
	// Closed, then parked: nothing happens.
	closed := accept()
	closed.Close()
	serving.Park(closed)
	if a, p := state("admitted"), state("parked"); a != 0 || p != 0 {
		t.Fatalf("after parking a closed connection: %d admitted, %d parked; want 0, 0", a, p)
	}
	// Parked outside the budget: the next one is admitted at once.
	first := accept()
	serving.Park(first)
	if a, p := state("admitted"), state("parked"); a != 0 || p != 1 {
		t.Fatalf("after parking: %d admitted, %d parked; want 0, 1", a, p)
	}
	second := accept()
	defer second.Close()
	// Past the budget's worth outside it: parked within it.
	serving.Park(second)
	if a, p := state("admitted"), state("parked"); a != 1 || p != 1 {
		t.Fatalf("after parking another: %d admitted, %d parked; want 1, 1", a, p)
	}
	first.Close()
	if a, p := state("admitted"), state("parked"); a != 1 || p != 0 {
		t.Fatalf("after closing the one parked outside: %d admitted, %d parked; want 1, 0", a, p)
	}
}
