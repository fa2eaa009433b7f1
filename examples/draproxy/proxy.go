package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/examples/internal/cli"
	"github.com/reviewauth/reviewauth/httpauth"
	"github.com/reviewauth/reviewauth/metrics"
)

// forwardedHeaders are the only request headers forwarded, canonical
// spelling only: content negotiation and the client's name (which
// outHeader then prefixes with the driver's identity, forwardedUserAgent).
// Everything else, Authorization, Impersonate-*, X-Remote-* and Audit-ID
// included, is dropped; Content-Length is the length of the body
// forwarded. Since
// nothing else is copied, draproxy has no hop-by-hop pass over request
// headers: a header the client's Connection header names is forwarded if
// it is one of these, and dropped otherwise, like every other.
var forwardedHeaders = []string{"Accept", "Accept-Encoding", "Content-Type", "User-Agent"}

// decisionHeaders are the request headers draproxy's decisions read that
// reach the API server as the driver sent them (httpauth.DecisionHeader):
// Content-Type alone, which tells a server-side apply (checked as a
// create) from a patch, and a JSON body from one draproxy refuses. It
// takes one value: sent twice, or as Content-Type and Content_Type, it is
// 400, so that draproxy and the API server (which reads the first line)
// can never read two types; sent only as Content_Type, it is read and
// forwarded as Content-Type. The other headers a decision reads are not
// forwarded as sent, so the upstream cannot read them otherwise than
// draproxy did: Accept (a get of one object asking for as=Table or
// as=PartialObjectMetadata is refused) is replaced by draproxy's own
// application/json on every checked read, whose answer draproxy reads and
// checks itself, and is read by no decision on other requests;
// Content-Encoding (anything but identity is refused) and Upgrade (always
// refused) are never forwarded, so the API server reads the body as
// draproxy did.
var decisionHeaders = []httpauth.DecisionHeader{{Name: "Content-Type"}}

// options configures newProxy. The zero value of every optional field is
// stated on it.
type options struct {
	// NodeName is this node. Required.
	NodeName string
	// NodeUID, when set, must also match the caller's node-uid extra.
	NodeUID string
	// Drivers binds driver names to the identities that may publish them
	// (--driver). Required.
	Drivers *drivers
	// Authenticator reviews the drivers' tokens (with draproxy's audience).
	// Required.
	Authenticator authenticator.Token
	// SAR asks the API server whether the driver itself may make the
	// request (its RBAC). Required.
	SAR authorizer.UnconditionalAuthorizer
	// Upstream is the API server, with draproxy's own credentials, a
	// token of draproxy's ServiceAccount bound to its pod on NodeName:
	// every forwarded request and every read for a check impersonates
	// the node, system:node:NodeName, with them (the API server's
	// associated-node impersonation). Required.
	Upstream *rest.Config
	// Allow are allow-list entries forwarded under the SubjectAccessReview
	// alone (--allow), after the default rules.
	Allow []rule
	// RequestTimeout bounds each forwarded request but watches; zero means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxBodyBytes bounds request bodies; zero means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Clock is the clock of the requests' deadlines; nil means the real
	// clock.
	Clock clock.WithDelayedExecution
	// Metrics, if not nil, counts decisions (httpauth's).
	Metrics *metrics.Metrics
}

// proxy is draproxy's handler behind httpauth: the content checks and the
// forwarding.
type proxy struct {
	node     string
	mapper   httpauth.AttributesMapper
	policy   *policy
	objects  *objects
	drivers  *drivers
	maxBody  int64
	timeout  time.Duration
	clock    clock.WithDelayedExecution
	upstream *url.URL
	bearer   *upstreamBearer   // nil: the transport's own credentials
	rt       http.RoundTripper // impersonating the node over the API server's transport
	identity nodeImpersonation
	// forwarder is httpauth's part of turning the request the middleware
	// authorized into the one forwarded: the identity (impersonation) and
	// the decision headers (outHeader).
	forwarder *httpauth.Forwarder
}

// newProxy returns draproxy's handler: httpauth (the driver's token, then
// authz.All of NodeLocal, the allow-list, NodeScope and the driver's
// SubjectAccessReview, on the attributes the API server itself would
// compute) in front of the content checks and the forwarding.
func newProxy(o options) (http.Handler, error) {
	p, err := buildProxy(o)
	if err != nil {
		return nil, err
	}
	scope, err := authz.NodeScope(authz.NodeScopeOptions{}) // resourceslices by spec.nodeName
	if err != nil {
		return nil, err
	}
	protect, err := httpauth.New(httpauth.Options{
		Authenticator: o.Authenticator,
		// Cheapest first: a refusal by a local check costs no review.
		Authorizer: authz.All(authz.NodeLocal(authz.NodeLocalOptions{NodeName: o.NodeName, NodeUID: o.NodeUID}), p.policy, scope, o.SAR),
		Attributes: httpauth.AttributesMapperFunc(p.mapAttributes),
		Forwarder:  p.forwarder,
		Metrics:    o.Metrics,
	})
	if err != nil {
		return nil, err
	}
	inner := protect(http.HandlerFunc(p.serve))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(&mappedContext{Context: r.Context()})
		if u, ok := watchPathForm(r.URL); ok {
			r.URL, r.RequestURI = u, u.RequestURI() // r is this request's own copy
		}
		inner.ServeHTTP(w, r)
	}), nil
}

// buildProxy validates o and returns the proxy it describes, without the
// middleware in front of it.
func buildProxy(o options) (*proxy, error) {
	switch {
	case o.NodeName == "":
		return nil, errors.New("draproxy: the node name is required")
	case o.Authenticator == nil || o.SAR == nil:
		return nil, errors.New("draproxy: an authenticator and a SubjectAccessReview authorizer are required")
	case o.Upstream == nil:
		return nil, errors.New("draproxy: the API server's configuration is required")
	case o.Drivers == nil || len(o.Drivers.ids) == 0:
		return nil, errors.New("draproxy: the driver names' bindings to ServiceAccounts (--driver) are required")
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	host, _, err := rest.DefaultServerUrlFor(o.Upstream)
	if err != nil {
		return nil, fmt.Errorf("draproxy: the API server's URL: %w", err)
	}
	base, err := rest.TransportFor(o.Upstream)
	if err != nil {
		return nil, fmt.Errorf("draproxy: the API server's transport: %w", err)
	}
	bearer, err := newUpstreamBearer(o.Upstream)
	if err != nil {
		return nil, fmt.Errorf("draproxy: the API server's credentials: %w", err)
	}
	identity := newNodeImpersonation(o.NodeName)
	forwarder, err := httpauth.NewForwarder(httpauth.ForwarderOptions{Identity: identity, DecisionHeaders: decisionHeaders})
	if err != nil {
		return nil, fmt.Errorf("draproxy: %w", err)
	}
	return &proxy{
		node:     o.NodeName,
		mapper:   httpauth.RequestInfo(),
		policy:   &policy{node: o.NodeName, rules: append(defaultRules(), o.Allow...)},
		objects:  newObjects(&http.Client{Transport: base}, host, identity),
		drivers:  o.Drivers,
		maxBody:  o.MaxBodyBytes,
		timeout:  o.RequestTimeout,
		clock:    o.Clock,
		upstream: host,
		bearer:   bearer,
		rt:       impersonating{base: base, node: identity},
		identity: identity,

		forwarder: forwarder,
	}, nil
}

// mapped carries the attributes the middleware authorized to the handler
// behind it, which checks and forwards the request they describe. One per
// request, created before the middleware runs. It also holds the URL of
// the request forward sends, which so costs no allocation of its own.
type mapped struct {
	attrs authorizer.Attributes
	url   url.URL
}

type mappedKey struct{}

// mappedContext is a request's context with its mapped (the value of
// mappedKey{}): one allocation where context.WithValue and new(mapped)
// are two.
type mappedContext struct {
	context.Context
	m mapped
}

func (c *mappedContext) Value(key any) any {
	if _, ok := key.(mappedKey); ok {
		return &c.m
	}
	return c.Context.Value(key)
}

// mapAttributes maps r with httpauth's RequestInfo mapper, as the API
// server would, and keeps the result for serve.
func (p *proxy) mapAttributes(r *http.Request, u user.Info) ([]authorizer.Attributes, error) {
	attrs, err := p.mapper.Attributes(r, u)
	if m, ok := r.Context().Value(mappedKey{}).(*mapped); ok && err == nil && len(attrs) == 1 {
		m.attrs = attrs[0]
	}
	return attrs, err
}

// serve runs after authentication and authorization: it checks what the
// attributes cannot tell (request bodies, objects as they are now, the
// objects the API server returns) and forwards exactly the request it
// checked, within the request's deadline (but watches).
func (p *proxy) serve(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	u, ok := request.UserFrom(ctx)
	if !ok {
		writeStatus(w, apierrors.NewInternalError(errors.New("draproxy: no authenticated user")))
		return
	}
	// The attributes the middleware authorized.
	m, ok := ctx.Value(mappedKey{}).(*mapped)
	if !ok || m.attrs == nil { // unreachable: one holder per request, filled before authorization; fail closed
		writeStatus(w, apierrors.NewInternalError(errors.New("draproxy: no authorized attributes")))
		return
	}
	a := m.attrs
	rl, ok := p.policy.match(a)
	if !ok { // authorized, so unreachable; fail closed
		writeStatus(w, responsewriters.ForbiddenStatusError(a, "not on draproxy's allow-list"))
		return
	}

	// Forward exactly what the API server will read: a query that parses
	// (re-encoded from the parse RequestInfo used) and the body read here.
	var query url.Values
	if r.URL.RawQuery != "" {
		var err error
		if query, err = url.ParseQuery(r.URL.RawQuery); err != nil {
			writeStatus(w, apierrors.NewBadRequest("draproxy: the query does not parse: "+err.Error()))
			return
		}
	}
	if r.Header.Get("Upgrade") != "" {
		writeStatus(w, apierrors.NewBadRequest("draproxy does not forward protocol upgrades (exec, attach, port-forward, websocket watches)"))
		return
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		writeStatus(w, unsupportedMediaType(fmt.Sprintf("draproxy: request bodies with Content-Encoding %q are not accepted", ce)))
		return
	}
	body, status := p.readBody(r)
	if status != nil {
		writeStatus(w, status)
		return
	}
	if a.GetVerb() != "watch" {
		var stop func()
		ctx, stop = withDeadline(ctx, p.clock, p.timeout)
		defer stop()
	}
	pl := plan{body: body}
	if status, err := p.check(ctx, r, u, a, rl, query, &pl); status != nil {
		logger := klog.FromContext(ctx)
		if err != nil {
			logger.Error(err, "draproxy: could not check the request", "user", u.GetName(), "verb", a.GetVerb(), "resource", a.GetResource(), "namespace", a.GetNamespace(), "name", a.GetName())
		} else {
			logger.V(2).Info("draproxy: request refused", "user", u.GetName(), "verb", a.GetVerb(), "resource", a.GetResource(), "namespace", a.GetNamespace(), "name", a.GetName(), "code", status.ErrStatus.Code, "reason", status.ErrStatus.Message)
		}
		writeStatus(w, status)
		return
	}

	p.forward(ctx, w, r, u, m, query, &pl)
}

// forward sends the request serve checked to the API server and copies
// the answer to w. It does what httputil.ReverseProxy did here, with
// rewrite, modifyResponse and ErrorHandler as its hooks, and builds the URL
// with the same httputil.ProxyRequest.SetURL, but skips what draproxy does
// not need and ReverseProxy pays for on every request: two more copies of
// the request (Clone, then WithContext for its 1xx relay's ClientTrace:
// no Expect or Upgrade is forwarded, so no 1xx comes but 100 Continue,
// which the transport handles), the hop-by-hop cleaning of request
// headers that come from an allow-list, a copy of every answer header
// value (Add) where sharing them is safe, a media type parse per answer,
// and the Te: trailers hint (the API server sends no trailers).
// In BenchmarkDRAProxy/proxy (2-core Intel Xeon, medians of 5) that is 17
// of the 44 allocations (one the benchmark transport's copy of a request
// with a nil Body) and 1.7 of the 6.5 KB draproxy adds per get, and
// its added CPU time went from 9.9 to 7.7 µs: 4.8× the middleware's
// (4.4-5.1 over the five runs, at the 5×) to 3.6×; measured in
// one loop with the middleware (interleaved), from 9.5 to 7.4 µs.
func (p *proxy) forward(ctx context.Context, w http.ResponseWriter, r *http.Request, u user.Info, m *mapped, query url.Values, pl *plan) {
	out := r.WithContext(ctx) // the one copy of the request
	m.url = *r.URL
	if query != nil { // a query that parsed: forward its re-encoding
		m.url.RawQuery = query.Encode()
	}
	out.URL = &m.url
	pr := httputil.ProxyRequest{In: r, Out: out}
	pr.SetURL(p.upstream) // scheme, host, joined path; Host ""
	out.RequestURI = ""
	out.Close = false
	out.Header = p.outHeader(r, u, pl)
	// The request body was read whole: its length is known and it has no
	// trailers to forward.
	body := pl.body
	out.Trailer, out.TransferEncoding = nil, nil
	out.Body, out.ContentLength, out.GetBody = http.NoBody, int64(len(body)), nil
	if len(body) > 0 {
		out.Body = io.NopCloser(bytes.NewReader(body))
	}
	if pl.read != noRead {
		p.checkedRead(ctx, w, r, out, pl)
		return
	}

	res := p.roundTrip(ctx, w, out)
	if mutation(m.attrs.GetVerb()) {
		p.logMutation(ctx, u, m.attrs, pl, res)
	}
	if res == nil {
		return
	}
	h := w.Header()
	copyHeader(h, res.Header)
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		h.Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(res.StatusCode)

	if err := copyBody(w, res); err != nil {
		res.Body.Close()
		switch {
		case pastDeadline(ctx):
			klog.FromContext(ctx).Info("draproxy: the API server's answer did not end within the request's deadline; cut off", "method", r.Method, "path", r.URL.Path, "timeout", p.timeout)
		case !errors.Is(err, context.Canceled) && ctx.Err() == nil:
			klog.FromContext(ctx).V(2).Info("draproxy: copying the API server's answer failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		if ctx.Value(http.ServerContextKey) != nil {
			// Only a truncated answer, never a complete-looking one:
			// the server resets the stream or closes the connection.
			panic(http.ErrAbortHandler)
		}
		return
	}
	res.Body.Close() // now, to populate res.Trailer
	if len(res.Trailer) > 0 {
		// Chunked, so that the trailers can follow.
		_ = http.NewResponseController(w).Flush()
	}
	for k, v := range res.Trailer {
		if len(res.Trailer) != announced {
			k = http.TrailerPrefix + k
		}
		h[k] = append(h[k], v...)
	}
}

// checkedRead sends out, a get whose answer draproxy checks before the
// driver sees it (pl.read): the whole answer is read (at most
// maxObjectBytes), a 200 is passed on only once checked (checkAnswer), a
// 404 or 403 becomes readRefusal, any other answer of the API server's is
// passed on as it is. An answer that does not arrive whole is draproxy's 503 (504 past the
// deadline): nothing of it reaches the driver.
func (p *proxy) checkedRead(ctx context.Context, w http.ResponseWriter, r, out *http.Request, pl *plan) {
	out.Method = http.MethodGet // a HEAD is answered from the GET's checked answer
	res := p.roundTrip(ctx, w, out)
	if res == nil {
		return
	}
	if res.StatusCode == http.StatusNotFound || res.StatusCode == http.StatusForbidden {
		// To the node, a slice or claim it may not see is 403 (the Node
		// authorizer: no path from it to the node, which is also what a
		// missing one is); draproxy answers both as it answers one it
		// refuses itself. (Its own permission to act as the node for
		// this read was checked at start.)
		if res.StatusCode == http.StatusForbidden {
			klog.FromContext(ctx).V(2).Info("draproxy: the API server refused the node this read", "path", r.URL.Path)
		}
		res.Body.Close()
		writeStatus(w, p.readRefusal(pl))
		return
	}
	buf := cli.ProxyBuffers.Get() // the usual answer fits: no allocation
	defer cli.ProxyBuffers.Put(buf)
	data, err := readAnswer(res, buf)
	res.Body.Close()
	if err != nil {
		p.upstreamError(ctx, w, out, fmt.Errorf("draproxy: reading the API server's answer: %w", err))
		return
	}
	if res.StatusCode == http.StatusOK {
		if st, err := p.checkAnswer(ctx, pl, data); st != nil {
			logger := klog.FromContext(ctx)
			if err != nil {
				logger.Error(err, "draproxy: could not check the API server's answer", "path", r.URL.Path)
			} else {
				logger.V(2).Info("draproxy: answer refused", "path", r.URL.Path, "code", st.ErrStatus.Code, "reason", st.ErrStatus.Message)
			}
			writeStatus(w, st)
			return
		}
	}
	h := w.Header()
	copyHeader(h, res.Header)
	if res.ContentLength != int64(len(data)) || len(res.Header["Content-Length"]) != 1 {
		// The transport decompressed it, or it came without a length.
		h["Content-Length"] = []string{strconv.Itoa(len(data))}
	}
	w.WriteHeader(res.StatusCode)
	if r.Method != http.MethodHead {
		_, _ = w.Write(data)
	}
}

// roundTrip sends out and returns the API server's answer, or answers w
// itself (upstreamError) and returns nil when there is none to pass on.
func (p *proxy) roundTrip(ctx context.Context, w http.ResponseWriter, out *http.Request) *http.Response {
	res, err := p.rt.RoundTrip(out)
	if err == nil {
		if err = checkResponse(res); err != nil {
			res.Body.Close()
		}
	}
	if err != nil {
		p.upstreamError(ctx, w, out, err)
		return nil
	}
	return res
}

// copyHeader adds the end-to-end headers of an answer (from) to the
// driver's (h), as httputil.ReverseProxy copies them: not the hop-by-hop
// ones (hopByHop). The values are shared: from is this request's alone.
func copyHeader(h, from http.Header) {
	conn := from["Connection"]
	for k, v := range from {
		if hopByHop(k, conn) {
			continue
		}
		if prev, ok := h[k]; ok {
			h[k] = append(prev, v...)
		} else {
			h[k] = v
		}
	}
}

// copyBody copies res's body to w through a pooled buffer. An answer
// without a Content-Length (every watch) or an event stream is flushed at
// once, headers first, then after each write, as httputil.ReverseProxy
// does for them.
func copyBody(w http.ResponseWriter, res *http.Response) error {
	var flush func() error
	if res.ContentLength == -1 || isEventStream(res.Header.Get("Content-Type")) {
		flush = http.NewResponseController(w).Flush
		_ = flush()
	}
	buf := cli.ProxyBuffers.Get()
	defer cli.ProxyBuffers.Put(buf)
	for {
		n, rerr := res.Body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
			if flush != nil {
				_ = flush()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// isEventStream reports whether a Content-Type is text/event-stream, as
// httputil.ReverseProxy decides it, parsing only one that may be.
func isEventStream(ct string) bool {
	const es = "text/event-stream"
	if len(ct) < len(es) || !strings.EqualFold(ct[:len(es)], es) {
		return false
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == es
}

// hopByHop reports whether an answer's header k is hop-by-hop, and so not
// copied, as httputil.ReverseProxy decides: one of RFC 2616's (section
// 13.5.1) or one its Connection header (conn) names (RFC 7230, section
// 6.1). k is canonical, as the transports spell the keys they parse.
func hopByHop(k string, conn []string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	for _, f := range conn {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" && http.CanonicalHeaderKey(sf) == k {
				return true
			}
		}
	}
	return false
}

// readBody reads the whole request body, at most p.maxBody bytes. A bigger
// body is 413 and is never forwarded, in part or at all.
func (p *proxy) readBody(r *http.Request) ([]byte, *apierrors.StatusError) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > p.maxBody {
		return nil, tooLarge(p.maxBody)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, p.maxBody+1))
	if err != nil {
		return nil, apierrors.NewBadRequest("draproxy: reading the request body: " + err.Error())
	}
	if int64(len(body)) > p.maxBody {
		return nil, tooLarge(p.maxBody)
	}
	return body, nil
}

// outHeader is the header of the request to the API server for r, the
// request the middleware authorized: only the forwarded headers of r,
// then what httpauth's Forwarder sets (the impersonation of the
// authenticated driver, from r's context, and Content-Type as it was
// authorized), then what draproxy itself decided, and draproxy's own
// bearer token (or, with other credentials, none: the transport adds
// them). pl (nil: none) may replace two headers after the Forwarder: the
// Content-Type of a body draproxy rewrote (YAML converted to JSON,
// DeleteOptions made from the query), which names the encoding of the
// body draproxy checked and wrote, not something the driver said; and, for
// a checked read, the Accept (JSON, which draproxy reads, whatever the
// driver accepts: client-go decodes an answer by its Content-Type) and
// the Accept-Encoding (none: the transport asks for gzip itself and
// decompresses what draproxy reads). No client-sent header is set after
// the Forwarder. There is no hop-by-hop pass to come before it: only the
// allow-list is copied.
func (p *proxy) outHeader(r *http.Request, u user.Info, pl *plan) http.Header {
	h := make(http.Header, len(forwardedHeaders)+3)
	for _, k := range forwardedHeaders {
		if v, ok := r.Header[k]; ok {
			// Shared, not copied: header values are read, never
			// written, by the transports.
			h[k] = v
		}
	}
	p.forwarder.Header(h, r)
	h["User-Agent"] = []string{forwardedUserAgent(p.node, u, r.Header["User-Agent"])}
	if pl != nil {
		if pl.contentType != "" {
			h["Content-Type"] = []string{pl.contentType}
		}
		if pl.read != noRead {
			h["Accept"] = acceptJSON
			delete(h, "Accept-Encoding")
		}
	}
	if p.bearer != nil {
		h["Authorization"] = p.bearer.header()
	}
	return h
}

// upstreamBearer is the Authorization header of draproxy's own bearer token,
// which outHeader sets on every forwarded request, computed as client-go's
// bearer round tripper (transport.NewBearerAuthWithRefreshRoundTripper)
// computes it from the same rest.Config: the contents of BearerTokenFile,
// re-read at most once a minute through the same token source
// (transport.NewCachedFileTokenSource), so that a rotated token is picked
// up, or BearerToken (or the file's first contents) while the file cannot
// be read, or BearerToken without a file. Set in outHeader, the header makes
// that round tripper pass the request through instead of cloning it (the
// request and every header value) to set it: a tenth of draproxy's own
// work per request when it was measured (BenchmarkDRAProxy/get-handler,
// now interleaved). The object lookups still get their credentials from
// the transport.
type upstreamBearer struct {
	bearer string                          // BearerToken, or the file's first contents
	source transport.ResettableTokenSource // the file's; nil without a file
	last   atomic.Pointer[bearerHeader]
}

// bearerHeader is the header value of one token, built once.
type bearerHeader struct {
	token string
	value []string
}

// newUpstreamBearer returns the bearer token of c, nil when c has none
// (client certificates, basic authentication, an exec or auth provider:
// the transport handles them). As client-go, it reads the token file at
// once when c has no BearerToken, and fails if it cannot.
func newUpstreamBearer(c *rest.Config) (*upstreamBearer, error) {
	if c.BearerToken == "" && c.BearerTokenFile == "" {
		return nil, nil
	}
	b := &upstreamBearer{bearer: c.BearerToken}
	if c.BearerTokenFile != "" {
		b.source = transport.NewCachedFileTokenSource(c.BearerTokenFile)
		if b.bearer == "" {
			tok, err := b.source.Token()
			if err != nil {
				return nil, err
			}
			b.bearer = tok.AccessToken
		}
	}
	return b, nil
}

// header returns the Authorization header value of the current token. It
// is shared: the transports read header values and never write them.
func (b *upstreamBearer) header() []string {
	token := b.bearer
	if b.source != nil {
		if tok, err := b.source.Token(); err == nil {
			token = tok.AccessToken
		}
	}
	if l := b.last.Load(); l != nil && l.token == token {
		return l.value
	}
	l := &bearerHeader{token: token, value: []string{"Bearer " + token}}
	b.last.Store(l)
	return l.value
}

// acceptJSON is the Accept of a checked read, shared: the transports read
// header values and never write them.
var acceptJSON = []string{mediaJSON}

// checkResponse turns a rejection of the proxy's own credentials into an
// error (503): it says nothing about the driver's token. So is a switch of
// protocols, which draproxy never asks for (httputil.ReverseProxy refused
// it through the same upstreamError).
func checkResponse(resp *http.Response) error {
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		return errUpstreamUnauthorized
	case http.StatusSwitchingProtocols:
		return errUpstreamSwitched
	}
	return nil
}

var errUpstreamSwitched = errors.New("draproxy: the API server switched protocols, which draproxy never asks for")

var errUpstreamUnauthorized = errors.New("draproxy: the API server rejected draproxy's own credentials")

// upstreamError answers a request the API server did not answer (or not
// whole, for a checked read): 504 once the request's deadline has passed,
// 503 otherwise, each with Retry-After.
func (p *proxy) upstreamError(ctx context.Context, w http.ResponseWriter, r *http.Request, err error) {
	if pastDeadline(ctx) {
		klog.FromContext(ctx).Error(err, "draproxy: the API server did not answer within the request's deadline", "method", r.Method, "path", r.URL.Path, "timeout", p.timeout)
		writeStatus(w, apierrors.NewTimeoutError(fmt.Sprintf("draproxy: the API server did not answer within %v; retry later", p.timeout), 1))
		return
	}
	if ctx.Err() != nil {
		return // the driver went away
	}
	klog.FromContext(ctx).Error(err, "draproxy: forwarding failed", "method", r.Method, "path", r.URL.Path)
	writeUnavailable(w, "draproxy: the API server is unavailable", time.Second)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func tooLarge(limit int64) *apierrors.StatusError {
	return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("draproxy accepts request bodies of at most %d bytes", limit))
}

func unsupportedMediaType(msg string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType,
		Reason: metav1.StatusReasonUnsupportedMediaType, Message: msg,
	}}
}

// writeStatus writes st as the API server writes errors: a metav1.Status
// in JSON, which client-go turns into the error its caller sees.
func writeStatus(w http.ResponseWriter, st *apierrors.StatusError) {
	status := st.ErrStatus
	status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	status.Status = metav1.StatusFailure
	body, _ := json.Marshal(&status)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if status.Details != nil && status.Details.RetryAfterSeconds > 0 {
		h.Set("Retry-After", strconv.Itoa(int(status.Details.RetryAfterSeconds)))
	}
	w.WriteHeader(int(status.Code))
	_, _ = w.Write(append(body, '\n'))
}

func writeUnavailable(w http.ResponseWriter, msg string, retry time.Duration) {
	st := apierrors.NewServiceUnavailable(msg)
	st.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(max(retry/time.Second, 1))}
	writeStatus(w, st)
}
