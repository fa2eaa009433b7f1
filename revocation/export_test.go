package revocation

import (
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// SetTestHooks makes r's reflectors retry after d instead of client-go's
// backoff (which waits on the real clock), and calls armed whenever Run's
// loop waits, with the time it waits for (zero: until poked). Call it
// before Run.
func SetTestHooks(r *Revoker, d time.Duration, armed func(next time.Time)) {
	r.backoff = &wait.Backoff{Duration: d, Steps: 1, Factor: 1}
	r.armed = armed
}
