package main

import (
	"sync"
	"time"

	"google.golang.org/grpc"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth/grpcauth"
	"github.com/reviewauth/reviewauth/internal/loglimit"
)

// Refusal logging limits: at most refusalLogBurst lines at once, then one
// per refusalLogInterval. A client looping on a bad token or a missing
// RoleBinding would otherwise fill the log with a line per call; the lines
// left out are counted in the next line written ("suppressed").
const (
	refusalLogInterval = 200 * time.Millisecond
	refusalLogBurst    = 20
)

// refusalLog logs the calls the sidecar refuses (PermissionDenied and
// Unauthenticated) at the default verbosity, so that operators see them,
// rate-limited (the library's log limiter, which httpauth's refusal log
// uses too). It never logs a token. It is safe for concurrent use.
type refusalLog struct {
	logger klog.Logger
	limit  *loglimit.Limiter
}

func newRefusalLog(logger klog.Logger, clk clock.PassiveClock) *refusalLog {
	return &refusalLog{logger: logger, limit: loglimit.New(refusalLogBurst, refusalLogInterval, clk)}
}

// log writes one line unless the rate limit is reached.
func (l *refusalLog) log(msg string, kv ...any) {
	ok, n := l.limit.Allow()
	if !ok {
		return
	}
	if n > 0 {
		kv = append(kv, "suppressed", n)
	}
	l.logger.Info(msg, kv...)
}

// denied logs a PermissionDenied: who, which snapshot in which namespace,
// its role in the call (snapshot, target snapshot, base snapshot), and why.
func (l *refusalLog) denied(u user.Info, ns, role, snapshot, reason string) {
	name := ""
	if u != nil {
		name = u.GetName()
	}
	l.log("Refused a call: permission denied", "user", name, "namespace", ns, "role", role, "snapshot", snapshot, "reason", reason)
}

// unauthenticated logs an Unauthenticated call: what it asked for, and why
// it was refused (the status message, which never holds the token). The
// caller is unknown: its token was missing or rejected.
func (l *refusalLog) unauthenticated(method string, req any, reason string) {
	kv := []any{"method", method}
	for _, f := range []string{"namespace", "snapshot_name", "target_snapshot_name", "base_snapshot_id"} {
		if v, ok := grpcauth.StringField(req, f); ok && v != "" {
			kv = append(kv, f, v)
		}
	}
	l.log("Refused a call: unauthenticated", append(kv, "reason", reason)...)
}

// recordingStream remembers the first message received on a stream.
type recordingStream struct {
	grpc.ServerStream
	mu    sync.Mutex
	first any
}

func (s *recordingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.mu.Lock()
		if s.first == nil {
			s.first = m
		}
		s.mu.Unlock()
	}
	return err
}

func (s *recordingStream) firstMessage() any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first
}
