package serving

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth/internal/loglimit"
	"github.com/reviewauth/reviewauth/metrics"
)

// Defaults of [ServerOptions]. Each is used when its field is zero; each
// bounds what one client can hold.
const (
	// DefaultMaxConnections was the fixed connection budget of a server
	// whose MaxConnections is zero.
	//
	// Deprecated: the default budget is [DefaultBudget], read from the
	// process's open-file and memory limits (issue #32): at a fixed 1,024
	// a flood past it made the server close and re-handshake connections
	// it had files and memory to keep. DefaultBudget still returns it
	// where neither limit is known.
	DefaultMaxConnections = 1024

	// DefaultReadHeaderTimeout bounds the time from a connection's first
	// byte of a request (or its opening) to the end of the request's
	// headers: a client that trickles headers (slowloris) is cut off.
	DefaultReadHeaderTimeout = 10 * time.Second

	// DefaultReadTimeout bounds each read of a request body (a per-read
	// deadline, extended at every read): an authorized client that
	// announces a body and stops sending it is cut off, while an upload or
	// a client stream (gRPC through an h2c upstream) lasts as long as the
	// client keeps sending. Refused requests are answered without reading
	// the body at all (see [HTTPServer]), so an unauthenticated client
	// never holds a connection with a body.
	DefaultReadTimeout = time.Minute

	// DefaultWriteTimeout bounds each write of a response to the client,
	// not the response: a client that stops reading is cut off, while a
	// long response (a large scrape, a stream, a watch) lasts as long as
	// the client keeps reading. On HTTP/2 a stream's deadline is set once
	// its response is past 4 KiB (see h2LazyDeadline), and the
	// connection's WriteByteTimeout bounds a client that stops reading
	// the connection.
	DefaultWriteTimeout = time.Minute

	// DefaultIdleTimeout bounds how long a keep-alive connection (HTTP/1)
	// or an HTTP/2 connection without streams stays open between requests:
	// longer than a typical scrape interval, so that a scraper keeps its
	// connection, and bounded, so that idle connections do not pile up.
	DefaultIdleTimeout = 2 * time.Minute

	// DefaultMaxHeaderBytes bounds a request's headers. A service-account
	// token is about 1 KiB, an OIDC token a few; 64 KiB leaves room for
	// both with cookies.
	DefaultMaxHeaderBytes = 64 << 10

	// DefaultMaxConcurrentStreams bounds the concurrent requests (streams)
	// of one HTTP/2 connection, as kube-rbac-proxy does. Go's HTTP/2 server
	// also runs at most this many handlers per connection, queueing
	// streams opened and reset faster (CVE-2023-44487, "rapid reset") and
	// closing the connection when the queue passes four times the limit.
	DefaultMaxConcurrentStreams = 100

	// DefaultShutdownTimeout bounds a graceful shutdown: requests in flight
	// get this long to finish, then they are cancelled and their
	// connections closed.
	DefaultShutdownTimeout = 10 * time.Second
)

// ServerOptions configures an [HTTPServer]. Every zero value means the
// default named on the field.
type ServerOptions struct {
	// Certificates serve TLS; nil serves plain HTTP (for a Unix socket or
	// a loopback-only metrics port).
	Certificates *Certificates

	// MaxConnections caps the open connections (see [LimitListener]). Zero
	// means [DefaultBudget], from the process's open-file and memory
	// limits; negative means no cap.
	MaxConnections int
	// Admission tunes how connections past MaxConnections make room,
	// and the timeouts under pressure (see [LimitListener]).
	Admission AdmissionOptions
	// Metrics, if not nil, counts the connections (see
	// [LimitOptions].Metrics).
	Metrics *metrics.Metrics
	// ReadHeaderTimeout, ReadTimeout (per read of a body), WriteTimeout
	// (per write of a response) and IdleTimeout: zero means
	// DefaultReadHeaderTimeout, DefaultReadTimeout, DefaultWriteTimeout
	// and DefaultIdleTimeout; negative means none.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request headers. Zero means
	// [DefaultMaxHeaderBytes].
	MaxHeaderBytes int
	// MaxConcurrentStreams bounds the streams of an HTTP/2 connection.
	// Zero means [DefaultMaxConcurrentStreams].
	MaxConcurrentStreams int
	// MaxReadFrameSize bounds an HTTP/2 frame, and the receive buffer of
	// a stream (kube-rbac-proxy's --http2-max-size). Zero means Go's
	// defaults.
	MaxReadFrameSize int
	// RapidResetLimit and RapidResetRate bound the HTTP/2 streams a
	// client resets (RST_STREAM frames, counted as the server reads them,
	// whether the stream's handler started or not) on a connection that
	// has not been answered, as [GRPCOptions] does for calls:
	// RapidResetLimit at once, then RapidResetRate a second; past them
	// admission parks the connection (reads no more from it, cancels its
	// requests): the first budget's worth outside the budget (fewer where
	// memory is short, see [ParkedMemory]), the rest within it until it
	// needs their room (see [LimitListener]). A connection that was
	// answered (a response below 400 begun) is left to Go's own bound
	// (see [DefaultMaxConcurrentStreams]). Zero means
	// [DefaultRapidResetLimit] and [DefaultRapidResetRate]; a negative
	// RapidResetLimit means no bound beyond Go's. Only with a connection
	// budget (MaxConnections not negative).
	RapidResetLimit int
	RapidResetRate  float64
	// DisableHTTP2 serves HTTP/1.1 only.
	DisableHTTP2 bool
	// UnencryptedHTTP2 serves HTTP/2 with prior knowledge (h2c) besides
	// HTTP/1.1 when Certificates is nil, for a Unix socket.
	UnencryptedHTTP2 bool

	// ShutdownTimeout bounds a graceful shutdown. Zero means
	// [DefaultShutdownTimeout].
	ShutdownTimeout time.Duration
	// CancelOnShutdown cancels the context of requests in flight as soon
	// as shutdown starts, rather than after ShutdownTimeout, for servers
	// of streams (watches) that would otherwise hold shutdown to the end.
	CancelOnShutdown bool

	// Health, if not nil, is marked ready while the server serves and not
	// ready once it starts shutting down.
	Health *Health

	// Clock paces the server's own log lines and tells the time of
	// connections' stages. Nil means the real clock.
	Clock clock.Clock
}

// HTTPServer is a net/http server hardened against clients that hold
// connections:
//
//   - at most MaxConnections connections are open ([LimitListener]); when
//     they are, a new connection makes room by closing the one that has
//     done the least for the longest (a silent one first, a connection
//     that completed a request and is in use last), logged, and only for
//     a newcomer (not for a presumed reconnection); and TLS handshakes
//     are computed at most GOMAXPROCS at once (a
//     per-address rate, HandshakeRate, only if set);
//   - headers must arrive within ReadHeaderTimeout, each read of a body
//     must complete within ReadTimeout (a per-read deadline, so that
//     uploads and client streams may last while the client sends), and
//     an idle connection is closed after IdleTimeout;
//   - each write to the client must complete within WriteTimeout (a
//     per-write deadline, extended at every write and flush, so that
//     streams and watches may last while the client reads them);
//   - a response of status 400 or more to an HTTP/1 request closes the
//     connection ("Connection: close"), and when the request announced a
//     body that was not read, the server does not wait for it: net/http
//     would otherwise try to read up to 256 KiB of it, before answering
//     or after, and a client that announces a body and never sends it
//     would hold the connection, unanswered, until ReadTimeout. So an
//     unauthenticated client can neither keep connections alive after a
//     refusal nor make the server read what it sends;
//   - HTTP/2 connections have at most MaxConcurrentStreams streams, and
//     Go's rapid-reset mitigation (see [DefaultMaxConcurrentStreams]);
//     on a connection never answered, the streams its client resets
//     (RST_STREAM frames, counted as they are read, before net/http
//     reads them: see h2Served) count against RapidResetLimit and
//     RapidResetRate, past which the connection is parked (no more
//     reads: it costs a file, no CPU, and no reconnection's handshake)
//     and its requests cancelled, the first budget's worth outside the
//     budget, the rest until admission needs their room. Under 2,313
//     rapid-reset clients from one address (budget 1,322, 2 cores),
//     closing at the bound left rbacproxy's CPU at 140% and kept-alive
//     scrapes at 60-100% within 1 s; parked, 42% and 100%. Counted in
//     the handler, resets of streams queued behind busy handlers were
//     never seen: at 0.6 of a core, 8% of new scrapes and 0% of
//     kept-alive ones within 1 s, 932 MiB; counted as read, 100% and
//     100%, 138 MiB (AMD EPYC, docs/benchmarks.md);
//   - net/http's own log lines (TLS handshake errors, accept errors) are
//     paced like httpauth's refusal log.
//
// It is safe for concurrent use; Serve may be called once per listener.
type HTTPServer struct {
	handler http.Handler
	opts    ServerOptions
	maxConn int
}

// NewHTTPServer returns a server of handler with opts.
func NewHTTPServer(handler http.Handler, opts ServerOptions) (*HTTPServer, error) {
	if handler == nil {
		return nil, errors.New("serving: nil handler")
	}
	if opts.DisableHTTP2 && opts.UnencryptedHTTP2 {
		return nil, errors.New("serving: DisableHTTP2 and UnencryptedHTTP2 contradict each other")
	}
	if opts.UnencryptedHTTP2 && opts.Certificates != nil {
		return nil, errors.New("serving: UnencryptedHTTP2 is for servers without Certificates")
	}
	def := func(d *time.Duration, v time.Duration) {
		switch {
		case *d == 0:
			*d = v
		case *d < 0:
			*d = 0
		}
	}
	def(&opts.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&opts.ReadTimeout, DefaultReadTimeout)
	def(&opts.WriteTimeout, DefaultWriteTimeout)
	def(&opts.IdleTimeout, DefaultIdleTimeout)
	def(&opts.ShutdownTimeout, DefaultShutdownTimeout)
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if opts.MaxConcurrentStreams <= 0 {
		opts.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if opts.RapidResetLimit == 0 {
		opts.RapidResetLimit = DefaultRapidResetLimit
	}
	if opts.RapidResetRate <= 0 {
		opts.RapidResetRate = DefaultRapidResetRate
	}
	maxConn := opts.MaxConnections
	if maxConn == 0 {
		maxConn = DefaultBudget()
	}
	return &HTTPServer{handler: handler, opts: opts, maxConn: maxConn}, nil
}

// testHookAdmission, set by this package's tests only, is told of each
// admission Serve starts, by the address it serves.
var testHookAdmission func(net.Addr, *admission)

// MaxConnections is the connection cap in force: the option, or
// [DefaultBudget]; zero or less for none.
func (s *HTTPServer) MaxConnections() int { return s.maxConn }

// Serve serves on ln until ctx is done, then shuts down gracefully (see
// [ServerOptions].ShutdownTimeout) and returns nil; it returns an error
// when serving fails. It closes ln. While it serves, it keeps the
// Certificates' files watched ([Certificates.Run]). Its log lines go to
// klog.FromContext(ctx), and requests' contexts carry ctx's values.
func (s *HTTPServer) Serve(ctx context.Context, ln net.Listener) error {
	logger := klog.FromContext(ctx)
	baseCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := &http.Server{
		Handler:           &guard{next: s.handler, writeTimeout: s.opts.WriteTimeout, readTimeout: s.opts.ReadTimeout, base: baseCtx},
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    s.opts.MaxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:      s.opts.MaxConcurrentStreams,
			MaxReadFrameSize:          s.opts.MaxReadFrameSize,
			MaxReceiveBufferPerStream: s.opts.MaxReadFrameSize,
			WriteByteTimeout:          s.opts.WriteTimeout,
		},
		BaseContext: func(net.Listener) context.Context { return baseCtx },
		ErrorLog:    log.New(&pacedWriter{logger: logger, limit: loglimit.New(20, time.Second, s.opts.Clock)}, "", 0),
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	switch {
	case s.opts.DisableHTTP2:
	case s.opts.Certificates != nil:
		protocols.SetHTTP2(true)
	case s.opts.UnencryptedHTTP2:
		protocols.SetUnencryptedHTTP2(true)
	}
	srv.Protocols = protocols

	if c := s.opts.Certificates; c != nil {
		protos := []string{"http/1.1"}
		if !s.opts.DisableHTTP2 {
			protos = []string{"h2", "http/1.1"}
		}
		srv.TLSConfig = c.ServerConfig(protos...)
	}
	var adm *admission
	if s.maxConn > 0 {
		ac := admissionConfig{
			LimitOptions: LimitOptions{AdmissionOptions: s.opts.Admission, Logger: logger, Clock: s.opts.Clock, Metrics: s.opts.Metrics},
			handshake:    s.opts.ReadHeaderTimeout, waiting: s.opts.ReadHeaderTimeout, idle: s.opts.IdleTimeout,
			tls: s.opts.Certificates != nil,
		}
		if s.opts.RapidResetLimit > 0 {
			ac.resetBurst, ac.resetInterval = s.opts.RapidResetLimit, time.Duration(float64(time.Second)/s.opts.RapidResetRate)
			ac.park = true
		}
		adm = newAdmission(s.maxConn, ac)
		if testHookAdmission != nil {
			testHookAdmission(ln.Addr(), adm)
		}
		ln = adm.listener(ln)
		if srv.TLSConfig != nil {
			srv.TLSConfig = admissionTLS(srv.TLSConfig)
		}
		srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
			if ac := admConnOf(c); ac != nil {
				return withConn(ctx, ac)
			}
			return ctx
		}
		srv.ConnState = func(c net.Conn, st http.ConnState) {
			if ac := admConnOf(c); ac != nil && st == http.StateHijacked {
				ac.hijacked()
			}
		}
	}
	if protocols.HTTP2() || protocols.UnencryptedHTTP2() {
		tlsConfig := srv.TLSConfig
		if err := h2Served(srv); err != nil {
			return fmt.Errorf("serving: %w", err)
		}
		if tlsConfig == nil {
			srv.TLSConfig = nil // h2c: ConfigureServer made one
		}
	}
	if c := s.opts.Certificates; c != nil {
		certCtx, stopCerts := context.WithCancel(ctx)
		certsDone := make(chan struct{})
		go func() { defer close(certsDone); c.Run(certCtx) }()
		defer func() { stopCerts(); <-certsDone }()
	}

	errc := make(chan error, 1)
	go func() {
		if s.opts.Certificates != nil {
			errc <- srv.ServeTLS(ln, "", "")
			return
		}
		errc <- srv.Serve(ln)
	}()
	if s.opts.Health != nil {
		s.opts.Health.SetReady(true)
	}
	select {
	case err := <-errc:
		if s.opts.Health != nil {
			s.opts.Health.SetReady(false)
		}
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	if s.opts.Health != nil {
		s.opts.Health.SetReady(false)
	}
	if s.opts.CancelOnShutdown {
		cancelRequests()
	}
	if adm != nil {
		adm.closeParked()
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		// Requests still running past the timeout: cancel them and drop
		// their connections.
		cancelRequests()
		_ = srv.Close()
	}
	if serveErr := <-errc; !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serving: %w", serveErr)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("serving: shutting down: %w", err)
	}
	return nil
}

// guard is the per-request part of HTTPServer's hardening: per-read and
// per-write deadlines, and "Connection: close" without reading the body on
// refusals.
type guard struct {
	next                      http.Handler
	writeTimeout, readTimeout time.Duration
	// base is the server's base context: cancelled at shutdown, when the
	// requests it cancels are not the client's resets.
	base context.Context
}

// deadliner is what net/http's HTTP/1 and HTTP/2 response writers
// implement, and what http.ResponseController calls.
type deadliner interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	gw := guardedWriter{ResponseWriter: w, timeout: g.writeTimeout, http1: r.ProtoMajor == 1}
	if ac := connFrom(r.Context()); ac != nil {
		gw.ac = ac
		if !gw.http1 {
			// A stream its client reset before its handler started, or
			// opened on a connection admission closed or parked, gets
			// no handler: the abort ends it, nothing is written. The
			// client's resets were counted as net/http read them, on a
			// connection never answered (see h2Conn): whether the reset
			// came before the handler started or while it runs, before
			// net/http cancelled the request, so that nothing the
			// handler does can outrun the count (and, past the bound,
			// the connection parked). A watch or a download its client
			// stops once answered is no such reset, and a client that
			// was answered is left to Go's own bound: clients cancel
			// requests as a matter of course (informers' watches,
			// timeouts), and closing their connection for it failed
			// draproxy's clients.
			if ac.closing() || ac.parked.Load() || r.Context().Err() != nil {
				panic(http.ErrAbortHandler)
			}
			if ac.counting() {
				// Until the connection is answered, its requests are
				// cancelled when it is parked (see cancelCalls), as its
				// client's reset, withheld from net/http, would have
				// cancelled them: a handler waiting on its request would
				// otherwise hold its goroutine as long as the connection
				// is parked.
				ctx, cancel := context.WithCancel(r.Context())
				st := &rpcState{c: ac, cancel: cancel}
				if !ac.trackCall(st) {
					cancel()
					panic(http.ErrAbortHandler)
				}
				defer ac.endCall(st)
				r = r.WithContext(ctx)
			}
		}
		// The connection's admission stage: a request in progress, then
		// one completed unless refused.
		ac.workStart()
		defer func() {
			o := httpOutcome(gw.code)
			if !gw.wroteHeader && r.Context().Err() != nil && g.base.Err() == nil {
				// The client reset the stream or went away before it was
				// answered: net/http's implicit 200 did not reach it.
				o = outcomeOther
			}
			ac.workEnd(o)
		}()
	}
	gw.d, _ = w.(deadliner)
	if gw.http1 {
		gw.extend()
	}
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody && gw.d != nil && g.readTimeout > 0 {
		r.Body = &deadlineBody{ReadCloser: r.Body, d: gw.d, timeout: g.readTimeout}
	}
	g.next.ServeHTTP(&gw, r)
	if gw.refused && r.ContentLength != 0 && gw.d != nil {
		// The connection closes after this response; make net/http's
		// final read of the unread body (up to 256 KiB, when the handler
		// returns) fail at once instead of waiting for a body that may
		// never come.
		_ = gw.d.SetReadDeadline(time.Now())
	}
}

// deadlineBody extends the read deadline before every read of a body.
type deadlineBody struct {
	io.ReadCloser
	d       deadliner
	timeout time.Duration
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	_ = b.d.SetReadDeadline(time.Now().Add(b.timeout))
	return b.ReadCloser.Read(p)
}

// guardedWriter extends the write deadline before every write and flush,
// and closes HTTP/1 connections after a refusal. It is allocated once per
// request (it escapes into the handler).
type guardedWriter struct {
	http.ResponseWriter
	d           deadliner
	timeout     time.Duration
	http1       bool
	wroteHeader bool
	// ac is the request's connection, nil without admission: its
	// answeredOnce is set with a header below 400.
	ac      *admConn
	refused bool
	code    int // the status sent; 0 before the header
	// written and extended pace an HTTP/2 stream's deadline (see
	// extendOnWrite).
	written  int
	extended time.Time
}

// h2LazyDeadline is how much of an HTTP/2 response is written before its
// stream is given a write deadline. On HTTP/2 every deadline is a message
// to the connection's serve goroutine: set at the start of every request,
// as on HTTP/1, it doubled that goroutine's work per stream, and under
// HTTP/2 rapid reset made rbacproxy close 2.4 times as many attacker
// connections as kube-rbac-proxy (issue #32). A response this small sits
// in the stream's buffer and is written when the handler returns; a
// stalled connection is cut off by its WriteByteTimeout.
const h2LazyDeadline = 4 << 10

func (g *guardedWriter) extend() {
	if g.d != nil && g.timeout > 0 {
		_ = g.d.SetWriteDeadline(time.Now().Add(g.timeout))
	}
}

// extendOnWrite extends the deadline before a write of n bytes: on
// HTTP/1 every time (a deadline on the connection); on HTTP/2 once the
// response is past h2LazyDeadline, at most once per tenth of the timeout.
func (g *guardedWriter) extendOnWrite(n int, flush bool) {
	if g.http1 {
		g.extend()
		return
	}
	g.written += n
	if !flush && g.written <= h2LazyDeadline {
		return
	}
	if now := time.Now(); g.extended.IsZero() || now.Sub(g.extended) >= g.timeout/10 {
		g.extended = now
		g.extend()
	}
}

func (g *guardedWriter) WriteHeader(code int) {
	if !g.wroteHeader && code >= 200 {
		g.wroteHeader = true
		g.code = code
		if code < 400 && g.ac != nil {
			g.ac.answeredOnce.Store(true)
		}
		if code >= 400 && g.http1 {
			// Only on HTTP/1: on HTTP/2 net/http turns this header into a
			// GOAWAY for the whole connection, whose other streams may be
			// a legitimate client's.
			g.Header().Set("Connection", "close")
			g.refused = true
		}
	}
	g.ResponseWriter.WriteHeader(code)
}

func (g *guardedWriter) Write(p []byte) (int, error) {
	if !g.wroteHeader {
		g.wroteHeader, g.code = true, http.StatusOK
		if g.ac != nil {
			g.ac.answeredOnce.Store(true)
		}
	}
	g.extendOnWrite(len(p), false)
	return g.ResponseWriter.Write(p)
}

// FlushError flushes with the deadline extended; http.ResponseController
// and httputil.ReverseProxy call it.
func (g *guardedWriter) FlushError() error {
	g.extendOnWrite(0, true)
	return http.NewResponseController(g.ResponseWriter).Flush()
}

// Flush implements http.Flusher for handlers that use it directly.
func (g *guardedWriter) Flush() { _ = g.FlushError() }

// Unwrap lets http.ResponseController reach the underlying writer (for
// Hijack, EnableFullDuplex, deadlines).
func (g *guardedWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// httpOutcome is the outcome of a request answered with code.
func httpOutcome(code int) outcome {
	switch {
	case code < 400:
		return outcomeServed
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return outcomeRefused
	}
	return outcomeOther
}

// admConnOf returns the admitted connection under c, a connection of an
// admission listener, TLS or not.
func admConnOf(c net.Conn) *admConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	ac, _ := c.(*admConn)
	return ac
}

// pacedWriter turns net/http's ErrorLog lines into paced log lines.
type pacedWriter struct {
	logger klog.Logger
	limit  *loglimit.Limiter
}

func (p *pacedWriter) Write(b []byte) (int, error) {
	kv, ok := p.limit.AllowKV(nil)
	if !ok {
		return len(b), nil
	}
	p.logger.Info("serving: net/http", append([]any{"message", strings.TrimSpace(string(b))}, kv...)...)
	return len(b), nil
}

// Health serves /healthz, /livez and /readyz: the first two say the
// process is alive, /readyz whether it is ready to serve (an [HTTPServer]
// with this Health marks it). Every other path is 404. It never needs a
// credential and reveals nothing but "ok". Safe for concurrent use; the
// zero value is alive and not ready.
type Health struct{ ready atomic.Bool }

// SetReady sets what /readyz answers.
func (h *Health) SetReady(ready bool) { h.ready.Store(ready) }

// Ready reports what /readyz answers.
func (h *Health) Ready() bool { return h.ready.Load() }

func (h *Health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	switch r.URL.Path {
	case "/healthz", "/livez":
	case "/readyz":
		if !h.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready\n"))
			return
		}
	default:
		http.NotFound(w, r)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}
