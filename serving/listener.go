package serving

import (
	"net"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth/internal/loglimit"
)

// LimitOptions configures [LimitListener].
type LimitOptions struct {
	// Logger receives the line that says the limit is reached, at most
	// one per ten seconds. Its zero value discards it.
	Logger klog.Logger
	// Clock paces that line. Nil means the real clock.
	Clock clock.PassiveClock
}

// limitLogInterval paces the "limit reached" line.
const limitLogInterval = 10 * time.Second

// LimitListener returns a listener that keeps at most max connections from
// ln open at once. When max are open, Accept waits for one to close before
// it takes the next from the kernel's queue, and logs (at most once per ten
// seconds) that the limit is reached: a connection over the limit is
// delayed, not refused, so that a legitimate client that connects while an
// attacker holds every slot is served as soon as the server's idle, header
// and body timeouts free one, ahead of any connection made after it. It is
// golang.org/x/net/netutil.LimitListener's algorithm, written here because
// that one cannot say when it is full. A max of zero or less means no
// limit, and ln is returned as is.
func LimitListener(ln net.Listener, max int, opts LimitOptions) net.Listener {
	if max <= 0 {
		return ln
	}
	return &limitListener{
		Listener: ln,
		sem:      make(chan struct{}, max),
		done:     make(chan struct{}),
		max:      max,
		logger:   opts.Logger,
		log:      loglimit.New(1, limitLogInterval, opts.Clock),
	}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	max       int
	logger    klog.Logger
	log       *loglimit.Limiter
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	default:
		if ok, suppressed := l.log.Allow(); ok {
			kv := []any{"address", l.Addr().String(), "limit", l.max}
			if suppressed > 0 {
				kv = append(kv, "timesSinceLastLine", suppressed+1)
			}
			l.logger.Info("serving: connection limit reached; new connections wait until one closes", kv...)
		}
		select {
		case l.sem <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, l: l}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.l.sem })
	return err
}

// CloseWrite half-closes the connection when it can, as net/http does
// before closing a connection whose request body it did not read, so that
// the client reads the answer rather than a reset.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// MaxConnectionsFor returns max capped to half of the process's open-file
// limit less 64 (and at least 1): each connection a proxy serves may need a
// second one to its upstream, and the process needs files for the API
// server, its certificates and its logs. (Go raises the soft limit to the
// hard limit at start; this reads the limit in force.) Where the limit is
// unknown, max is returned.
func MaxConnectionsFor(max int) int {
	limit := openFileLimit()
	if limit == 0 || max <= 0 {
		return max
	}
	budget := int64(0)
	if limit > 64 {
		budget = int64(limit-64) / 2
	}
	if budget < 1 {
		budget = 1
	}
	if int64(max) > budget {
		return int(budget)
	}
	return max
}
