package revocation_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: Run stops every
// watch and timer it started before it returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
