package serving

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"

	"golang.org/x/net/http2"
)

// h2Preface is the client connection preface (RFC 9113, section 3.4).
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// h2FrameRSTStream is the type of an RST_STREAM frame (RFC 9113, section
// 6.4).
const h2FrameRSTStream = 0x3

// frameScanner follows the frames a client sends on an HTTP/2 connection,
// fed the bytes as the server reads them, and counts its RST_STREAM
// frames: the client's resets, seen before the HTTP/2 server reads them.
// It reads frame headers only (9 bytes per frame) and skips payloads; it
// checks nothing (the HTTP/2 server, which reads the same bytes, rejects
// what is malformed). The zero value expects the preface first; after
// sawPreface, a frame.
//
// Hand-written, not http2.Framer: a Framer pulls frames from a reader, so
// it would need a goroutine (or a copy of every byte) per connection to
// see what net/http's own Framer reads; this reads the 9-byte headers in
// place as they pass (BenchmarkFrameScanner, beside a Framer over the
// same bytes).
type frameScanner struct {
	// preface is how many bytes of the preface have passed.
	preface int
	// hdr holds a frame header split across reads; nhdr bytes of it.
	hdr  [9]byte
	nhdr int
	// skip is what is left of the current frame's payload.
	skip uint32
}

// sawPreface tells s the preface was read before it was fed anything.
func (s *frameScanner) sawPreface() { s.preface = len(h2Preface) }

// scan passes p, the next bytes from the client, and returns how many
// RST_STREAM frame headers completed in it.
func (s *frameScanner) scan(p []byte) (resets int) {
	if s.preface < len(h2Preface) {
		n := min(len(h2Preface)-s.preface, len(p))
		s.preface += n
		p = p[n:]
	}
	for len(p) > 0 {
		if s.skip > 0 {
			n := uint32(len(p))
			if n > s.skip {
				n = s.skip
			}
			s.skip -= n
			p = p[n:]
			continue
		}
		if s.nhdr == 0 && len(p) >= len(s.hdr) {
			// A whole header in place: the common case.
			s.skip = uint32(p[0])<<16 | uint32(p[1])<<8 | uint32(p[2])
			if p[3] == h2FrameRSTStream {
				resets++
			}
			p = p[len(s.hdr):]
			continue
		}
		n := copy(s.hdr[s.nhdr:], p)
		s.nhdr += n
		p = p[n:]
		if s.nhdr == len(s.hdr) {
			s.nhdr = 0
			s.skip = uint32(s.hdr[0])<<16 | uint32(s.hdr[1])<<8 | uint32(s.hdr[2])
			if s.hdr[3] == h2FrameRSTStream {
				resets++
			}
		}
	}
	return resets
}

// h2Conn is an HTTP/2 connection as its server reads it (decrypted, for
// TLS), with the client's resets counted against the admission's
// rapid-reset bound as they are read (see countResets).
type h2Conn struct {
	net.Conn
	ac *admConn
	fs frameScanner
}

// Read reads from the connection and counts the RST_STREAM frames in
// what came while ac has not been answered (see admConn.answeredOnce).
// Past the bound, ac is parked (or closed): what this read returned is
// not handed on, and the read blocks as a parked connection's does.
func (c *h2Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.ac.counting() {
		if r := c.fs.scan(p[:n]); r > 0 {
			for range r {
				c.ac.reset()
			}
			if c.ac.parked.Load() {
				return 0, c.ac.parkedRead()
			}
		}
	}
	return n, err
}

// h2TLSConn is an h2Conn over TLS: it tells the HTTP/2 server the
// connection's TLS state, which handlers get as Request.TLS (client
// certificates) and which the server checks (TLS 1.2 or later, RFC
// 9113 section 9.2), as it does for a *tls.Conn.
type h2TLSConn struct {
	h2Conn
	tc *tls.Conn
}

func (c *h2TLSConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// h2Served is HTTP/2 served by golang.org/x/net/http2 rather than
// net/http's copy of it, for one reason: net/http hands an HTTP/2
// connection to its copy as the *tls.Conn it is (TLSNextProto), and
// reads its frames there, where nothing else sees them; x/net's
// ServeConn serves any net.Conn, so the connection it reads can be an
// h2Conn, which counts the client's resets as they are read. Counted in
// the handler instead (as before), a stream reset before its handler
// started was never counted: net/http queues up to four times
// MaxConcurrentStreams of them per connection and skips them, and a
// server short of CPU, whose handlers start late, read hundreds of
// streams per attacker's connection before closing it (Go's bound),
// and the closed connection came back with a TLS handshake: under
// 2,313 rapid-reset clients from one address at 0.6 of a core,
// rbacproxy answered 8% of new scrapes and 0% of kept-alive ones within
// 1 s, its RSS at 932 MiB (AMD EPYC, docs/benchmarks.md).
//
// x/net's HTTP/2 server reads the same settings from http.Server.HTTP2,
// and ConfigureServer registers it for graceful shutdown, as net/http
// does its own. ConfigureServer and ServeConn are deprecated in favour of
// http.Server.Protocols, which offers no way to serve a connection other
// than the one accepted; in Go 1.27 x/net serves through net/http's
// implementation again, behind the same API.
func h2Served(srv *http.Server) error {
	h2s := new(http2.Server)
	if err := http2.ConfigureServer(srv, h2s); err != nil {
		return err
	}
	serve := func(hs *http.Server, c net.Conn, h http.Handler, sawPreface bool) {
		var ctx context.Context
		// net/http hands the connection's context (ConnContext's) on
		// through this method of h, for its HTTP/2 server.
		if bc, ok := h.(interface{ BaseContext() context.Context }); ok {
			ctx = bc.BaseContext()
		}
		h2s.ServeConn(c, &http2.ServeConnOpts{Context: ctx, Handler: h, BaseConfig: hs, SawClientPreface: sawPreface})
	}
	srv.TLSNextProto["h2"] = func(hs *http.Server, tc *tls.Conn, h http.Handler) {
		ac := admConnOf(tc)
		if ac == nil || !ac.a.countsResets() {
			serve(hs, tc, h, false)
			return
		}
		serve(hs, &h2TLSConn{h2Conn: h2Conn{Conn: tc, ac: ac}, tc: tc}, h, false)
	}
	// HTTP/2 with prior knowledge (h2c): net/http hands the connection
	// on, its preface read, inside a *tls.Conn that is no TLS connection
	// (the "unencrypted_http2" protocol, which x/net's ConfigureServer
	// also registers).
	srv.TLSNextProto["unencrypted_http2"] = func(hs *http.Server, tc *tls.Conn, h http.Handler) {
		u, ok := tc.NetConn().(interface{ UnencryptedNetConn() net.Conn })
		if !ok {
			hs.ErrorLog.Print("serving: an HTTP/2 connection without TLS was handed on without its connection")
			_ = tc.NetConn().Close()
			return
		}
		nc := u.UnencryptedNetConn()
		ac, _ := nc.(*admConn)
		if ac == nil || !ac.a.countsResets() {
			serve(hs, nc, h, true)
			return
		}
		c := &h2Conn{Conn: nc, ac: ac}
		c.fs.sawPreface()
		serve(hs, c, h, true)
	}
	return nil
}
