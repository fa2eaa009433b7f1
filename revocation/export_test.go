package revocation

import (
	"runtime"
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

// HeldBytes is what r's handlers hold after each source was given a
// complete list of objs (the lists themselves dropped): the revoker's own
// memory per watched object.
func HeldBytes(r *Revoker, objs func(resource string) []any) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, s := range r.sources {
		s.h.replace(objs(s.resource), true)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(r)
	return after.HeapAlloc - before.HeapAlloc
}
