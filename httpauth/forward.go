package httpauth

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// IdentityHeaders is how a reverse proxy tells its upstream who the caller
// is: the headers it sets on every request it forwards for an
// authenticated caller. [FrontProxyHeaders] are the API server's
// front-proxy headers; kube-rbac-proxy's --auth-header-* fields and
// impersonation are others (examples/rbacproxy, examples/draproxy).
// Implementations must be safe for concurrent use.
type IdentityHeaders interface {
	// Names returns the header names Set writes: a name, or a prefix
	// ending in "*" ("X-Remote-Extra-*"). Headers of these names are
	// never taken from a client, in any spelling (case, '_' for '-'), and
	// are never dropped as hop-by-hop headers (see [Forwarder]). Names is
	// called once, by [NewForwarder].
	Names() []string
	// Set writes the identity of u into h, the header of the forwarded
	// request, which holds none of Names in any spelling.
	Set(h http.Header, u user.Info)
}

// FrontProxyHeaders returns the API server's front-proxy identity headers:
// X-Remote-User, X-Remote-Uid, X-Remote-Group and X-Remote-Extra-<key>,
// written as client-go's transport.SetAuthProxyHeaders writes them and the
// API server's requestheader authenticator reads them (the extras' keys
// %-encoded). They are the headers [Options].PropagateIdentity sets.
func FrontProxyHeaders() IdentityHeaders { return frontProxy{} }

type frontProxy struct{}

func (frontProxy) Names() []string {
	return []string{"X-Remote-User", "X-Remote-Uid", "X-Remote-Group", "X-Remote-Extra-*"}
}

func (frontProxy) Set(h http.Header, u user.Info) { setIdentityHeaders(h, u) }

// DecisionHeader is a request header the [AttributesMapper] reads to decide
// what to authorize, such as the header of kube-rbac-proxy's rewrites
// (byHttpHeader) or the Content-Type that tells a server-side apply from a
// patch. The mapper reads it under its canonical key
// (textproto.CanonicalMIMEHeaderKey(Name)); the upstream, which may read
// '_' as '-' (CGI, WSGI, nginx with underscores_in_headers), must get
// exactly the values that were authorized.
type DecisionHeader struct {
	// Name is the header's name. Required.
	Name string
	// Multiple lets the header carry several values (several header
	// lines), each of which the mapper authorizes. False: a request that
	// sends it more than once is refused with 400.
	Multiple bool
}

// ErrAmbiguousHeader is the error (wrapped, naming the header) of a request
// that sends a [DecisionHeader] in two spellings, or a single-valued one
// more than once; the middleware answers it with 400 Bad Request.
var ErrAmbiguousHeader = errors.New("httpauth: ambiguous header")

// ForwarderOptions configures [NewForwarder]. The zero value forwards no
// identity and knows no decision header.
type ForwarderOptions struct {
	// Identity tells the upstream who the caller is. Nil means no
	// identity headers are sent.
	Identity IdentityHeaders
	// DecisionHeaders are the headers the middleware's AttributesMapper
	// reads. Nil means none.
	DecisionHeaders []DecisionHeader
}

// Forwarder turns a request the middleware of [New] authorized into the
// request a reverse proxy sends its upstream, so that the upstream
// receives what was authorized: the caller's identity, and the headers the
// decision read, exactly as they were read, whatever the client put in its
// Connection header or however it spelled them. Give it to the middleware
// as [Options].Forwarder and call [Forwarder.Header] for every request the
// proxy sends. Together they do:
//
//   - in the middleware, first: client-sent headers with the identity's
//     names, in every spelling, are deleted (as the front-proxy and
//     Impersonate-* headers always are);
//   - in the middleware, once the caller is authenticated: a decision
//     header sent in two spellings (X-Namespace and X_Namespace), or a
//     single-valued one sent twice, is refused with 400 naming it
//     ([ErrAmbiguousHeader]); one sent in a variant spelling only is
//     moved to its canonical key, which the mapper reads;
//   - in the middleware, before the handler (the proxy) runs: the names of
//     the identity headers, the decision headers and Authorization are
//     removed from the client's Connection header, so that a hop-by-hop
//     pass over it (httputil.ReverseProxy's, which runs before Rewrite and
//     after Director) removes none of them. The request is not refused:
//     clients send such Connection headers by accident;
//   - in [Forwarder.Header], on the forwarded request, after the
//     hop-by-hop pass: the identity is set, and the decision headers are
//     the authorized ones.
//
// HTTP/2 forbids the Connection header (net/http's server refuses a
// request that carries one), so its tokens are an HTTP/1.1 matter.
//
// A Forwarder is immutable and safe for concurrent use; a nil *Forwarder
// is one without identity or decision headers.
type Forwarder struct {
	identity      IdentityHeaders
	identityNames []stripName
	decision      []decisionHeader
	// protected are the names kept out of the client's Connection header:
	// Authorization, the identity's and the decision headers'.
	protected []stripName
}

// decisionHeader is a DecisionHeader worked out once.
type decisionHeader struct {
	key      string // canonical key, where the mapper reads it
	name     string // lower case, '-' for '_', for equalHeaderName
	multiple bool
}

// NewForwarder validates opts and returns the Forwarder they describe. It
// reports names that are empty or have a '*' elsewhere than at the end, a
// name that is a hop-by-hop header (Connection, Keep-Alive, Te, Trailer,
// Transfer-Encoding, Upgrade, Proxy-*: never forwarded), a decision header
// that is an identity header (forwarded or always deleted) or
// Authorization, and a decision header named twice.
func NewForwarder(opts ForwarderOptions) (*Forwarder, error) {
	f := &Forwarder{identity: opts.Identity, protected: []stripName{{name: "authorization"}}}
	var errs []error
	if opts.Identity != nil {
		names, err := stripNames(opts.Identity.Names())
		if err != nil {
			errs = append(errs, fmt.Errorf("%w (identity header)", err))
		}
		for _, n := range names {
			if hopByHopName(n.name) {
				errs = append(errs, fmt.Errorf("httpauth: identity header %q is hop-by-hop: it would never reach the upstream", n.name))
			}
		}
		f.identityNames = names
		f.protected = append(f.protected, names...)
	}
	for _, d := range opts.DecisionHeaders {
		folded := strings.ReplaceAll(strings.ToLower(d.Name), "_", "-")
		switch {
		case d.Name == "" || !validMethod(d.Name):
			errs = append(errs, fmt.Errorf("httpauth: decision header %q: not a header name", d.Name))
			continue
		case hopByHopName(folded):
			errs = append(errs, fmt.Errorf("httpauth: decision header %q is hop-by-hop: it would never reach the upstream", d.Name))
		case folded == "authorization" || strippedHeader(textproto.CanonicalMIMEHeaderKey(folded)) || f.identityHeader(folded):
			errs = append(errs, fmt.Errorf("httpauth: decision header %q is an identity or credential header, which no client sets", d.Name))
		case slices.ContainsFunc(f.decision, func(o decisionHeader) bool { return o.name == folded }):
			errs = append(errs, fmt.Errorf("httpauth: decision header %q is named twice", d.Name))
		}
		f.decision = append(f.decision, decisionHeader{key: textproto.CanonicalMIMEHeaderKey(d.Name), name: folded, multiple: d.Multiple})
		f.protected = append(f.protected, stripName{name: folded})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return f, nil
}

// Header prepares out, the header of the request a proxy sends upstream
// for in, a request the middleware (with this Forwarder in its Options)
// authorized, once the request's hop-by-hop headers are gone. in is the
// request as the middleware handed it on: its context holds the
// authenticated user, its header the decision headers as they were
// authorized, its Connection header the client's without the names the
// middleware protects. Call it last, after any other change to out: with
// httputil.ReverseProxy, at the end of Rewrite, as Header(pr.Out.Header,
// pr.In); from a forwarder of your own, on the header you built for the
// upstream. It:
//
//  1. sets each decision header to in's values, which the middleware
//     checked and the mapper authorized, and deletes its other spellings:
//     the upstream reads what was authorized, or nothing when the request
//     had none;
//  2. deletes the identity headers in every spelling and, for the user the
//     middleware authenticated (request.UserFrom of in's context), sets
//     them with the Forwarder's IdentityHeaders; none for system:anonymous
//     (an always-allow path without a credential) or a request without a
//     user.
//
// It leaves the hop-by-hop pass to the caller, before it: ReverseProxy
// removes the headers in's Connection header names, and the fixed
// hop-by-hop ones, before Rewrite; a forwarder of your own that copies the
// client's headers must do the same (with in.Header["Connection"], which
// no longer names a protected header), and one that copies an allow-list
// (examples/draproxy) has nothing to remove. Header itself removes nothing
// else from out, so that no client can take away, through its Connection
// header, what the proxy sets in Rewrite (X-Forwarded-*, its own
// credentials).
//
// out may then share value slices with in.Header, which neither the
// middleware nor net/http's transports modify. A nil Forwarder leaves out
// as it is.
func (f *Forwarder) Header(out http.Header, in *http.Request) {
	if f == nil {
		return
	}
	for _, d := range f.decision {
		for k := range out {
			if k != d.key && equalHeaderName(k, d.name) {
				delete(out, k)
			}
		}
		if v, ok := in.Header[d.key]; ok {
			out[d.key] = v
		} else {
			delete(out, d.key)
		}
	}
	if f.identity == nil {
		return
	}
	for k := range out {
		if matchName(f.identityNames, k) {
			delete(out, k)
		}
	}
	if u, ok := request.UserFrom(in.Context()); ok && u != nil && u.GetName() != user.Anonymous {
		f.identity.Set(out, u)
	}
}

func (f *Forwarder) identityHeader(folded string) bool {
	return matchName(f.identityNames, folded)
}

// matchName reports whether key is one of names, compared
// case-insensitively with '_' read as '-'.
func matchName(names []stripName, key string) bool {
	for _, n := range names {
		if (n.prefix && hasHeaderPrefix(key, n.name)) || (!n.prefix && equalHeaderName(key, n.name)) {
			return true
		}
	}
	return false
}

// checkDecisionHeaders checks the decision headers of h, a request's
// header, and moves one sent in a variant spelling to its canonical key.
func checkDecisionHeaders(h http.Header, decision []decisionHeader) error {
	for _, d := range decision {
		var found []string
		for k := range h {
			if equalHeaderName(k, d.name) {
				found = append(found, k)
			}
		}
		switch {
		case len(found) == 0:
			continue
		case len(found) > 1:
			slices.Sort(found)
			return fmt.Errorf("%w: %s sent in %d spellings (%q); send it once", ErrAmbiguousHeader, d.key, len(found), found)
		case !d.multiple && len(h[found[0]]) > 1:
			return fmt.Errorf("%w: %s sent %d times; it takes one value", ErrAmbiguousHeader, d.key, len(h[found[0]]))
		case found[0] != d.key:
			h[d.key] = h[found[0]]
			delete(h, found[0])
		}
	}
	return nil
}

// keepConnected removes from h's Connection header the tokens that name a
// protected header, so that no hop-by-hop pass removes them; it leaves the
// header as it is when none does, and deletes it when nothing else is
// left.
func keepConnected(h http.Header, protected []stripName) {
	values, ok := h["Connection"]
	if !ok || !slices.ContainsFunc(values, func(v string) bool { return namesProtected(v, protected) }) {
		return
	}
	var kept []string
	for _, v := range values {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = textproto.TrimString(tok); tok != "" && !matchName(protected, tok) {
				kept = append(kept, tok)
			}
		}
	}
	if len(kept) == 0 {
		delete(h, "Connection")
		return
	}
	h["Connection"] = []string{strings.Join(kept, ", ")}
}

func namesProtected(v string, protected []stripName) bool {
	for tok := range strings.SplitSeq(v, ",") {
		if matchName(protected, textproto.TrimString(tok)) {
			return true
		}
	}
	return false
}

// hopByHopFields are the headers that are hop-by-hop whatever the
// Connection header says (RFC 9110, 7.6.1; RFC 2616, 13.5.1), as
// httputil.ReverseProxy removes them.
var hopByHopFields = []string{"connection", "proxy-connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
	"te", "trailer", "transfer-encoding", "upgrade"}

// hopByHopName is hopByHop for a folded name, reading '_' as '-' too.
func hopByHopName(folded string) bool {
	return slices.ContainsFunc(hopByHopFields, func(f string) bool { return equalHeaderName(folded, f) })
}
