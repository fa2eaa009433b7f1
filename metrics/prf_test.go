package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/reviewauth/reviewauth/internal/cache"
	"github.com/reviewauth/reviewauth/metrics"
)

// TestKeyPRFInfo: the PRF cache keys are derived with is exported, as the
// value cache.PRF returns.
func TestKeyPRFInfo(t *testing.T) {
	t.Parallel()
	want := `
# HELP reviewauth_cache_key_prf_info The keyed hash cache keys are derived with in this process (cache.PRF): sha256 or blake2b; always 1.
# TYPE reviewauth_cache_key_prf_info gauge
reviewauth_cache_key_prf_info{prf="` + cache.PRF() + `"} 1
`
	if err := testutil.CollectAndCompare(metrics.New(), strings.NewReader(want), "reviewauth_cache_key_prf_info"); err != nil {
		t.Error(err)
	}
}
