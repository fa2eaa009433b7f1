package serving

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/tap"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth/metrics"
)

// Defaults of [GRPCOptions], used when a field is zero.
const (
	// DefaultGRPCConnectionTimeout bounds a new connection's handshake
	// (TLS and HTTP/2 preface): a client that connects and sends nothing
	// holds the connection this long at most (grpc's own default is 120s).
	DefaultGRPCConnectionTimeout = 10 * time.Second
	// DefaultGRPCMaxConnectionIdle closes a connection without calls for
	// this long (with a GOAWAY, which well-behaved clients follow by
	// reconnecting when they next call).
	DefaultGRPCMaxConnectionIdle = 5 * time.Minute
	// DefaultGRPCKeepaliveMinTime is the shortest interval between a
	// client's keepalive pings the server tolerates; a client pinging more
	// often is disconnected (ENHANCE_YOUR_CALM "too_many_pings"). Pings
	// on connections without calls are permitted.
	DefaultGRPCKeepaliveMinTime = 30 * time.Second
	// DefaultGRPCKeepaliveTime and DefaultGRPCKeepaliveTimeout: the server
	// pings a connection silent for a minute and closes it when the ping
	// is not answered within 20s, so that dead peers do not hold
	// connections.
	DefaultGRPCKeepaliveTime    = time.Minute
	DefaultGRPCKeepaliveTimeout = 20 * time.Second
	// DefaultGRPCMaxHeaderListSize bounds a call's metadata (grpc's own
	// default is 16 MiB).
	DefaultGRPCMaxHeaderListSize = 64 << 10
	// DefaultGRPCFirstMessageTimeout bounds how long a connection that has
	// not completed a call may keep streams open without sending a
	// message (grpc itself sets no bound: a client may hold
	// MaxConcurrentStreams empty streams per connection until keepalive
	// fails). With [AdmissionOptions].PressureTimeout set, it shrinks to
	// that as the budget fills.
	DefaultGRPCFirstMessageTimeout = 10 * time.Second
	// DefaultGRPCMaxUnservedCalls bounds the calls in progress on a
	// connection that has not completed one (see
	// [GRPCOptions].MaxUnservedCalls).
	DefaultGRPCMaxUnservedCalls = 16
)

// GRPCOptions configures a hardened gRPC server ([GRPCServerOptions],
// [ServeGRPC]). Every zero value means the default named on the field.
type GRPCOptions struct {
	// Certificates serve TLS; nil means Credentials (or none).
	Certificates *Certificates
	// Credentials are used when Certificates is nil, such as grpc's local
	// credentials on a Unix socket.
	Credentials credentials.TransportCredentials

	// MaxConnections caps the open connections ([LimitListener]). Zero
	// means [DefaultBudget], from the open-file and memory limits;
	// negative means no cap (and none of Admission, FirstMessageTimeout
	// or the rapid-reset bound applies).
	MaxConnections int
	// Admission tunes how connections past MaxConnections make room,
	// and the timeouts under pressure (see [LimitListener]).
	Admission AdmissionOptions
	// FirstMessageTimeout: zero means [DefaultGRPCFirstMessageTimeout].
	FirstMessageTimeout time.Duration
	// RapidResetLimit and RapidResetRate bound the streams a client
	// opens and then cancels on one connection (HTTP/2 rapid reset,
	// CVE-2023-44487): RapidResetLimit at once, then RapidResetRate a
	// second. Past them a connection never served is parked (nothing more
	// is read from it, its calls in progress cancelled), on Linux
	// (elsewhere it is closed): the first budget's worth outside the
	// budget (fewer where memory is short, see [ParkedMemory]), the rest
	// within it until admission needs their room (see
	// [LimitListener]); one served is closed (see [GRPCServerOptions]). Zero means
	// [DefaultRapidResetLimit] and [DefaultRapidResetRate]; a negative
	// RapidResetLimit means no bound.
	RapidResetLimit int
	RapidResetRate  float64
	// MaxUnservedCalls bounds the calls in progress on a connection that
	// has not completed one (answered, not refused): further streams are
	// refused with ResourceExhausted before a handler starts, and count
	// against RapidResetLimit. A new
	// client's first calls are few and each sends its request at once;
	// a client holding empty streams, or resetting streams faster than
	// their handlers end, is held to this many handlers per connection
	// instead of MaxConcurrentStreams. Zero means
	// [DefaultGRPCMaxUnservedCalls]; negative means no bound.
	MaxUnservedCalls int
	// Metrics, if not nil, counts the connections (see
	// [LimitOptions].Metrics).
	Metrics *metrics.Metrics
	// InTapHandle, if not nil, is called for each new stream after the
	// server's own (grpc takes one tap handle per server: give yours
	// here rather than as a grpc.ServerOption).
	InTapHandle tap.ServerInHandle
	// MaxConcurrentStreams bounds the concurrent calls of a connection.
	// Zero means [DefaultMaxConcurrentStreams].
	MaxConcurrentStreams uint32
	// ConnectionTimeout: zero means [DefaultGRPCConnectionTimeout].
	ConnectionTimeout time.Duration
	// MaxConnectionIdle: zero means [DefaultGRPCMaxConnectionIdle].
	MaxConnectionIdle time.Duration
	// KeepaliveMinTime: zero means [DefaultGRPCKeepaliveMinTime].
	KeepaliveMinTime time.Duration
	// MaxHeaderListSize: zero means [DefaultGRPCMaxHeaderListSize].
	MaxHeaderListSize uint32
	// ShutdownTimeout bounds a graceful stop: calls in flight get this
	// long, then the server stops hard. Zero means
	// [DefaultShutdownTimeout].
	ShutdownTimeout time.Duration

	// Clock paces the connection-budget log line and tells the time of
	// connections' stages. Nil means the real clock.
	Clock clock.Clock
}

func (o GRPCOptions) withDefaults() GRPCOptions {
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if o.ConnectionTimeout <= 0 {
		o.ConnectionTimeout = DefaultGRPCConnectionTimeout
	}
	if o.MaxConnectionIdle <= 0 {
		o.MaxConnectionIdle = DefaultGRPCMaxConnectionIdle
	}
	if o.KeepaliveMinTime <= 0 {
		o.KeepaliveMinTime = DefaultGRPCKeepaliveMinTime
	}
	if o.MaxHeaderListSize == 0 {
		o.MaxHeaderListSize = DefaultGRPCMaxHeaderListSize
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultBudget()
	}
	if o.FirstMessageTimeout <= 0 {
		o.FirstMessageTimeout = DefaultGRPCFirstMessageTimeout
	}
	if o.RapidResetLimit == 0 {
		o.RapidResetLimit = DefaultRapidResetLimit
	}
	if o.RapidResetRate <= 0 {
		o.RapidResetRate = DefaultRapidResetRate
	}
	if o.MaxUnservedCalls == 0 {
		o.MaxUnservedCalls = DefaultGRPCMaxUnservedCalls
	}
	return o
}

// GRPCServerOptions returns the grpc.ServerOptions of a hardened server:
// transport credentials (TLS from Certificates, reloaded per handshake),
// MaxConcurrentStreams, the handshake's ConnectionTimeout, keepalive
// enforcement (KeepaliveMinTime, pings without calls permitted), server
// keepalive pings and MaxConnectionIdle, MaxHeaderListSize, and the stats
// handler and tap handle through which [ServeGRPC]'s connection budget
// follows each connection's calls (see [LimitListener]): a stream whose
// first message arrives makes the connection's first call in progress, a
// call that ended OK (an HTTP status below 400) makes it a connection that
// completed a call, one that ended Unauthenticated or PermissionDenied a
// refused one (any other code, Unavailable included, neither), and a stream
// that ends without the server's status (the client reset it) counts
// against RapidResetLimit. Add your interceptors (and more stats handlers,
// if you like) and pass them all to grpc.NewServer; serve with
// [ServeGRPC], which applies MaxConnections.
//
// grpc-go has no per-connection GOAWAY and no hook for RST_STREAM: a
// stream the client resets has its context cancelled, and its handler runs
// until it notices (grpc runs at most MaxConcurrentStreams handlers per
// connection, and reads no more frames from the connection meanwhile, so
// that resets cost at most that many goroutines per connection). A
// connection past RapidResetLimit that was never served is parked, as an
// HTTP/2 one is (see [ServerOptions].RapidResetLimit), and the calls it
// opened without sending their request are cancelled: closed, its client
// reconnects at once and pays, and makes the server pay, a TLS handshake
// and MaxUnservedCalls streams again. At the default budget (1,322) with
// 2,313 such clients from the legitimate client's address (Intel Xeon, 2
// cores, docs/benchmarks.md), closing them held the sidecar at 88% of a
// core (rapid reset) and 127% (100 streams without a request), the
// attackers opening 16,800 and 28,000 connections over the attack (the
// first 2,313 included), and 96% of new connections answered within 1 s
// under the second; parked, 10% and 11% of a core, about 3,500
// connections, and 100% (RSS 203 and 293 MiB; with the calls left
// waiting, 817 MiB). A connection that was served is closed
// at the bound (TCP, without a GOAWAY), so that its client reconnects
// rather than waits.
func GRPCServerOptions(opts GRPCOptions) []grpc.ServerOption {
	o := opts.withDefaults()
	out := []grpc.ServerOption{
		grpc.MaxConcurrentStreams(o.MaxConcurrentStreams),
		grpc.ConnectionTimeout(o.ConnectionTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: o.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: o.MaxConnectionIdle,
			Time:              DefaultGRPCKeepaliveTime,
			Timeout:           DefaultGRPCKeepaliveTimeout,
		}),
		grpc.MaxHeaderListSize(o.MaxHeaderListSize),
		grpc.StatsHandler(grpcStats{}),
		grpc.InTapHandle(grpcTap(o.InTapHandle, int32(max(o.MaxUnservedCalls, 0)))),
	}
	if creds := o.credentials(); creds != nil {
		out = append(out, grpc.Creds(handshakeCreds{creds}))
	}
	return out
}

// credentials are the transport credentials o describes, or nil.
func (o GRPCOptions) credentials() credentials.TransportCredentials {
	switch {
	case o.Certificates != nil:
		return credentials.NewTLS(admissionTLS(o.Certificates.ServerConfig("h2")))
	case o.Credentials != nil:
		return o.Credentials
	}
	return nil
}

// ServeGRPC serves srv on ln, capped at MaxConnections, until ctx is done,
// then stops gracefully within ShutdownTimeout (then hard) and returns
// nil; it returns an error when serving fails. While it serves, it keeps
// the Certificates' files watched. srv must have been built with
// [GRPCServerOptions] of the same opts.
func ServeGRPC(ctx context.Context, srv *grpc.Server, ln net.Listener, opts GRPCOptions) error {
	o := opts.withDefaults()
	var adm *admission
	if o.MaxConnections > 0 {
		c := admissionConfig{
			LimitOptions: LimitOptions{AdmissionOptions: o.Admission, Logger: klog.FromContext(ctx), Clock: o.Clock, Metrics: o.Metrics},
			handshake:    o.ConnectionTimeout, waiting: o.FirstMessageTimeout, idle: o.MaxConnectionIdle,
			join: true,
		}
		if creds := o.credentials(); creds != nil {
			c.tls = creds.Info().SecurityProtocol == "tls"
		}
		if o.RapidResetLimit > 0 {
			c.resetBurst, c.resetInterval = o.RapidResetLimit, time.Duration(float64(time.Second)/o.RapidResetRate)
			// Past the bound, a connection never served is parked, not
			// closed to reconnect at once (see GRPCServerOptions).
			c.park = true
		}
		adm = newAdmission(o.MaxConnections, c)
		ln = adm.listener(ln)
	}
	if c := o.Certificates; c != nil {
		certCtx, stopCerts := context.WithCancel(ctx)
		certsDone := make(chan struct{})
		go func() { defer close(certsDone); c.Run(certCtx) }()
		defer func() { stopCerts(); <-certsDone }()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	if adm != nil {
		adm.closeParked()
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	timer := time.NewTimer(o.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		srv.Stop()
		<-stopped
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
}
