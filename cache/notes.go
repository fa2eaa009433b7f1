package cache

import (
	"context"
	"sync"

	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/warning"
)

// notes are the warnings (k8s.io/apiserver/pkg/warning) and audit
// annotations (k8s.io/apiserver/pkg/audit) that a wrapped authenticator or
// authorizer records during one shared call. The call records them apart
// from every caller's context, and each answer the call gives, then and
// from the cache, replays them into its caller's context, as
// k8s.io/apiserver's token cache does. A nil *notes is none.
type notes struct {
	annotations map[string]string
	warnings    []warningNote
}

type warningNote struct{ agent, text string }

// replay adds n's audit annotations and warnings to ctx's audit context
// and warning recorder, where it has them. It does nothing for a nil n,
// without allocating.
func (n *notes) replay(ctx context.Context) {
	if n == nil {
		return
	}
	for k, v := range n.annotations {
		audit.AddAuditAnnotation(ctx, k, v)
	}
	for _, w := range n.warnings {
		warning.AddWarning(ctx, w.agent, w.text)
	}
}

// recorder records the warnings of one call: a warning.Recorder.
type recorder struct {
	mu       sync.Mutex
	warnings []warningNote
}

// AddWarning implements warning.Recorder.
func (r *recorder) AddWarning(agent, text string) {
	r.mu.Lock()
	r.warnings = append(r.warnings, warningNote{agent, text})
	r.mu.Unlock()
}

// recording returns ctx with a warning recorder and an audit context of its
// own, in place of those of the caller whose context ctx derives from, and
// a function that returns what was recorded so far (nil if nothing).
func recording(ctx context.Context) (context.Context, func() *notes) {
	r := &recorder{}
	ctx = warning.WithWarningRecorder(ctx, r)
	if audit.AuditContextFrom(ctx) != nil {
		// WithAuditContext keeps an audit context the parent has;
		// hide the caller's so that it makes a new one.
		ctx = withoutAuditContext{ctx}
	}
	ctx = audit.WithAuditContext(ctx)
	ac := audit.AuditContextFrom(ctx)
	return ctx, func() *notes {
		r.mu.Lock()
		w := r.warnings
		r.mu.Unlock()
		a := ac.GetEventAnnotations()
		if len(w) == 0 && len(a) == 0 {
			return nil
		}
		return &notes{annotations: a, warnings: w}
	}
}

// withoutAuditContext is a context without its parent's audit context. The
// audit package keeps its context key unexported, so the value is
// recognised by its type, *audit.AuditContext, which nothing else stores.
type withoutAuditContext struct{ context.Context }

func (c withoutAuditContext) Value(key any) any {
	v := c.Context.Value(key)
	if _, ok := v.(*audit.AuditContext); ok {
		return nil
	}
	return v
}
