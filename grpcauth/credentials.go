package grpcauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"golang.org/x/oauth2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// A CredentialsOption configures [PerRPCCredentials] and [RoundTripper].
type CredentialsOption func(*credentialsOptions)

type credentialsOptions struct {
	onlyTo bool // OnlyTo was given: hosts is the whole list
	hosts  []hostPort
}

// OnlyTo binds the credentials to the servers named by hosts, each "host" or
// "host:port" (no scheme; an IPv6 address in brackets). The token is sent
// only to those: a request or call for any other server is sent without it
// ([RoundTripper]) or fails before anything is sent ([PerRPCCredentials]).
// Host names compare without regard to case; an entry without a port
// stands for the scheme's default port (443 for https and for gRPC, 80 for
// http), and so does a target without one. A subdomain is another host.
// An entry that is not a valid host[:port] matches nothing, and OnlyTo()
// with no hosts sends the token nowhere.
//
// Without OnlyTo, [PerRPCCredentials] binds itself to the first server it
// sends a token to, and [RoundTripper] keeps each token to the host of the
// request the caller made, refusing it to the targets of redirects on other
// hosts; see each for details.
func OnlyTo(hosts ...string) CredentialsOption {
	return func(o *credentialsOptions) {
		o.onlyTo = true
		for _, h := range hosts {
			if hp, ok := parseHostPort(h); ok {
				o.hosts = append(o.hosts, hp)
			}
		}
	}
}

// hostPort is a lower-case host name or IP address, and a port ("" for the
// scheme's default).
type hostPort struct{ host, port string }

func parseHostPort(s string) (hostPort, bool) {
	if s == "" || strings.ContainsAny(s, "/?#@ ") {
		return hostPort{}, false
	}
	u := url.URL{Host: s}
	h := u.Hostname()
	if h == "" || strings.ContainsAny(h, "[]:") && !strings.HasPrefix(s, "[") {
		return hostPort{}, false
	}
	return hostPort{host: strings.ToLower(h), port: u.Port()}, true
}

func defaultPort(scheme string) string {
	switch strings.ToLower(scheme) {
	case "https", "wss":
		return "443"
	case "http", "ws":
		return "80"
	}
	return ""
}

// target returns the host and the effective port of a URL host under scheme.
func target(scheme, host string) hostPort {
	hp, _ := parseHostPort(host)
	if hp.port == "" {
		hp.port = defaultPort(scheme)
	}
	return hp
}

// allows reports whether the token may go to host under scheme.
func (o *credentialsOptions) allows(scheme, host string) bool {
	t := target(scheme, host)
	if t.host == "" {
		return false
	}
	for _, e := range o.hosts {
		if e.port == "" {
			e.port = defaultPort(scheme)
		}
		if e == t {
			return true
		}
	}
	return false
}

func newCredentialsOptions(opts []CredentialsOption) *credentialsOptions {
	o := &credentialsOptions{}
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
	return o
}

// PerRPCCredentials returns gRPC call credentials that send a token from
// src in the "authorization: Bearer <token>" metadata of every call, for
// servers whose [Rule] reads the token with [FromMetadata]. src is any
// oauth2.TokenSource: a [FileTokenSource], a [TokenRequestSource], or
// another; one that is a [ContextTokenSource] is asked with the call's
// context. The header is the token's type (oauth2.Token.Type, "Bearer" for
// the sources of this package) and its access token; a token source that
// returns a nil token or an empty access token fails the call.
//
// grpc's google.golang.org/grpc/credentials/oauth.TokenSource{TokenSource:
// src} sends the same header from the same sources and also requires
// transport security; these credentials add the binding to one server
// described below, and the call's context.
//
// The credentials require transport security: gRPC refuses to send them
// over a connection with less than privacy and integrity. TLS qualifies,
// and so do grpc's local credentials (google.golang.org/grpc/credentials/local)
// over a Unix socket, so a node-local client does not need TLS; insecure
// credentials and local credentials over TCP do not (in tests over
// bufconn, use authtest.TransportCredentials). A token source error
// fails the call with codes.Unavailable (or the code of a status error
// returned by src).
//
// The token is only ever sent to one server, so that a credentials value
// reused for a connection to another server (another audience) cannot hand
// that server a token it could replay. With [OnlyTo], the call's authority
// (the :authority gRPC sends and TLS verifies the server certificate
// against) must be one of the hosts named. Without it, the credentials bind
// themselves to the first server they send a token to: its authority, and,
// for local credentials, whose authority is "localhost" for every Unix
// socket, also the socket's address. A call to any other server fails with
// codes.Unauthenticated before anything is sent, and the token source is
// not asked. Use one credentials value per server.
//
// The credentials are safe for concurrent use if src is. A nil src fails
// every call that would carry a token with codes.Unavailable.
func PerRPCCredentials(src oauth2.TokenSource, opts ...CredentialsOption) credentials.PerRPCCredentials {
	return &perRPC{src: src, opts: newCredentialsOptions(opts)}
}

type perRPC struct {
	src   oauth2.TokenSource
	opts  *credentialsOptions
	bound atomic.Pointer[string] // the first server, without OnlyTo
}

func (p *perRPC) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	ri, _ := credentials.RequestInfoFromContext(ctx)
	if err := credentials.CheckSecurityLevel(ri.AuthInfo, credentials.PrivacyAndIntegrity); err != nil {
		return nil, fmt.Errorf("grpcauth: refusing to send a bearer token over an insecure connection: %w", err)
	}
	if err := p.checkServer(ctx, ri, uri); err != nil {
		return nil, err
	}
	if p.src == nil {
		return nil, errors.New("grpcauth: PerRPCCredentials has no token source")
	}
	tok, err := tokenFrom(ctx, p.src)
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		return nil, status.Error(codes.Unavailable, "grpcauth: getting a token: "+err.Error())
	}
	return map[string]string{authorizationKey: tok.Type() + " " + tok.AccessToken}, nil
}

// checkServer refuses a call to a server the credentials are not bound to.
// gRPC passes the call's audience, "https://<authority>/<service>", as the
// first uri.
func (p *perRPC) checkServer(ctx context.Context, ri credentials.RequestInfo, uri []string) error {
	authority := ""
	if len(uri) > 0 {
		if u, err := url.Parse(uri[0]); err == nil {
			authority = u.Host
		}
	}
	if authority == "" {
		return errors.New("grpcauth: refusing to send a bearer token: gRPC named no server authority")
	}
	if p.opts.onlyTo {
		if !p.opts.allows("https", authority) {
			return fmt.Errorf("grpcauth: refusing to send the bearer token to %q: the credentials are bound to other servers (OnlyTo)", authority)
		}
		return nil
	}
	server := target("https", authority)
	id := server.host + ":" + server.port
	if ri.AuthInfo != nil && ri.AuthInfo.AuthType() == "local" {
		// Every Unix socket has the authority "localhost": tell them
		// apart by their address.
		if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
			id += " (" + pr.Addr.Network() + " " + pr.Addr.String() + ")"
		}
	}
	if p.bound.CompareAndSwap(nil, &id) {
		return nil
	}
	if b := p.bound.Load(); *b != id {
		return fmt.Errorf("grpcauth: refusing to send the bearer token to %s: these credentials are bound to %s, the first server they were used with; use one PerRPCCredentials per server", id, *b)
	}
	return nil
}

func (*perRPC) RequireTransportSecurity() bool { return true }

// maxRedirectChain bounds how many redirects [RoundTripper] follows back to
// find the request the caller made; http.Client itself stops after 10.
const maxRedirectChain = 100

// RoundTripper returns an http.RoundTripper that sets the Authorization
// header of a request to "Bearer <token>", with a token from src (asked
// with the request's context when it is a [ContextTokenSource]; the header
// is written as oauth2.Token.SetAuthHeader writes it), and sends it with
// base (http.DefaultTransport when nil). A request that
// already has an Authorization header is sent unchanged (http.Client
// itself drops that header on redirects to other hosts). The request given
// to RoundTrip is not modified: a clone carries the header. A token source
// error is returned by RoundTrip and nothing is sent.
//
// The token goes only to the host it was meant for. http.Client follows
// redirects above the RoundTripper, which sees each redirected request
// separately; it finds the request the caller made through the chain of
// Request.Response (up to 100 redirects; a longer chain, or a response
// without its request, gets no token), and a redirected request gets the
// token only if it is for the same host and port as that first request
// (stricter than http.Client's rule for its own Authorization header,
// which also lets subdomains and other ports have it: an audience-bound
// token is meant for one server), and is not a downgrade from https to
// another scheme. With [OnlyTo], every request, the first included, gets
// the token only if its host is one of those named, and redirects from
// https never downgrade. A request not allowed the token is sent without
// one, as http.Client does.
//
// Unlike [PerRPCCredentials], it does not require https; send it to https
// URLs only. The RoundTripper is safe for concurrent use if src and base
// are. A nil src makes RoundTrip fail every request that would carry a
// token.
//
// For a client-go client, set rest.Config.WrapTransport to
//
//	func(rt http.RoundTripper) http.RoundTripper { return grpcauth.RoundTripper(src, rt) }
//
// client-go's own transport.TokenSourceWrapTransport(src) takes the same
// sources (they are oauth2.TokenSources) through x/oauth2's Transport,
// which sets the token on every request it sends, whatever its host,
// redirects included, and asks src without the request's context.
func RoundTripper(src oauth2.TokenSource, base http.RoundTripper, opts ...CredentialsOption) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &roundTripper{src: src, base: base, opts: newCredentialsOptions(opts)}
}

type roundTripper struct {
	src  oauth2.TokenSource
	base http.RoundTripper
	opts *credentialsOptions
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") != "" || !rt.mayHaveToken(req) {
		return rt.base.RoundTrip(req)
	}
	if rt.src == nil {
		closeBody(req)
		return nil, errors.New("grpcauth: RoundTripper has no token source")
	}
	tok, err := tokenFrom(req.Context(), rt.src)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	r := req.Clone(req.Context())
	tok.SetAuthHeader(r)
	return rt.base.RoundTrip(r)
}

// mayHaveToken reports whether req may carry the token: see RoundTripper.
func (rt *roundTripper) mayHaveToken(req *http.Request) bool {
	if req.URL == nil {
		return false
	}
	first := req
	for i := 0; first.Response != nil; i++ {
		if i == maxRedirectChain || first.Response.Request == nil || first.Response.Request.URL == nil {
			return false
		}
		first = first.Response.Request
	}
	if first != req && strings.EqualFold(first.URL.Scheme, "https") && !strings.EqualFold(req.URL.Scheme, "https") {
		return false
	}
	if rt.opts.onlyTo {
		return rt.opts.allows(req.URL.Scheme, req.URL.Host)
	}
	if first == req {
		return true
	}
	to := target(req.URL.Scheme, req.URL.Host)
	return to.host != "" && to == target(first.URL.Scheme, first.URL.Host)
}

// closeBody honours the RoundTripper contract of closing the body even on
// errors.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// WrappedRoundTripper returns the base RoundTripper, so that client-go's
// utilnet helpers can see through the wrapper.
func (rt *roundTripper) WrappedRoundTripper() http.RoundTripper { return rt.base }
