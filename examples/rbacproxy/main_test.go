package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/reviewauth/reviewauth/examples/internal/clitest"
	"github.com/reviewauth/reviewauth/internal/reliability"
)

func TestMain(m *testing.M) {
	reliability.MaybeAttack() // TestFloods' attackers run as processes of this binary
	clitest.MaybeRunMain(main)
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
