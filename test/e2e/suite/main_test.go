package suite_test

import (
	"os"
	"testing"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// TestMain starts one real kube-apiserver for every test in the suite
// (auditing the ServiceAccounts TestManifestPermissions checks), and
// removes the example programs the flows built.
func TestMain(m *testing.M) {
	code := cluster.Main(m, cluster.Options{AuditUserGroups: auditedGroups()})
	cleanupExamples()
	os.Exit(code)
}
