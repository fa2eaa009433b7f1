package review

import (
	"context"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// MaxClientVerbosity is the highest log verbosity client-go may use for a
// review request. client-go logs request and response bodies at V(8) and
// headers from V(6), through the request context's logger; a TokenReview's
// body is the token (in the request, and echoed in the response), so those
// levels never reach the caller's logger, whatever its -v.
const MaxClientVerbosity = 5

// quiet returns ctx with its logger capped at MaxClientVerbosity.
func quiet(ctx context.Context) context.Context {
	l := klog.FromContext(ctx)
	sink := l.GetSink()
	if sink == nil {
		return ctx
	}
	// The wrapper adds one frame between the caller and the sink.
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1)
	}
	return klog.NewContext(ctx, logr.New(cappedSink{LogSink: sink, max: MaxClientVerbosity}))
}

// cappedSink drops every message above a verbosity.
type cappedSink struct {
	logr.LogSink
	max int
}

// Init does nothing: the wrapped sink was initialised by its own logger,
// and it may be shared by many goroutines.
func (s cappedSink) Init(logr.RuntimeInfo) {}

func (s cappedSink) Enabled(level int) bool { return level <= s.max && s.LogSink.Enabled(level) }

func (s cappedSink) Info(level int, msg string, kv ...any) {
	if level <= s.max {
		s.LogSink.Info(level, msg, kv...)
	}
}

func (s cappedSink) WithValues(kv ...any) logr.LogSink {
	return cappedSink{LogSink: s.LogSink.WithValues(kv...), max: s.max}
}

func (s cappedSink) WithName(name string) logr.LogSink {
	return cappedSink{LogSink: s.LogSink.WithName(name), max: s.max}
}
