package suite_test

import (
	"os"
	"testing"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// TestMain starts one real kube-apiserver for every test in the suite.
func TestMain(m *testing.M) { os.Exit(cluster.Main(m, cluster.Options{})) }
