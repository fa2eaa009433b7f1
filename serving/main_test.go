package serving_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/reviewauth/reviewauth/internal/reliability"
)

func TestMain(m *testing.M) {
	maybeMemoryServer()       // BenchmarkConnectionMemory's server
	reliability.MaybeAttack() // the floods' attackers run as processes of this binary
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		// client-go keeps idle keep-alive connections to the API server in
		// its shared transport cache.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
