package main

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/examples/internal/cli"
	"github.com/reviewauth/reviewauth/httpauth"
	"github.com/reviewauth/reviewauth/internal/loglimit"
)

// headerFields are kube-rbac-proxy's --auth-header-* flags: the headers
// that tell the upstream who the caller is. With enabled, they are the
// proxy's httpauth.IdentityHeaders.
type headerFields struct {
	enabled           bool
	user, groups, sep string
}

// Names are the user and groups headers.
func (f headerFields) Names() []string { return []string{f.user, f.groups} }

// Set writes the caller's name, and its groups joined by sep (an empty
// value without groups), as kube-rbac-proxy does.
func (f headerFields) Set(h http.Header, u user.Info) {
	h.Set(f.user, u.GetName())
	h.Set(f.groups, strings.Join(u.GetGroups(), f.sep))
}

// proxyOptions configure the handler.
type proxyOptions struct {
	upstream  *url.URL
	transport http.RoundTripper
	// allowPaths: only requests whose cleaned path matches one of these
	// path.Match patterns are served; others are 404. Empty: all.
	allowPaths []string
	// ignorePaths: requests whose cleaned path matches one of these are
	// served without authentication or authorization, for the methods in
	// ignoreMethods (GET and HEAD when empty).
	ignorePaths, ignoreMethods []string
	// forwarder makes each forwarded request carry what was authorized:
	// the --auth-header-* identity and the rewrites' header (see
	// httpauth.Forwarder); the middlewares have it in their Options.
	forwarder *httpauth.Forwarder
	// reencodeQuery forwards the query as parsed, when a query parameter
	// decides what is authorized.
	reencodeQuery bool
}

// handler is rbacproxy's request path:
//
//  1. every client-sent X-Remote-* header, and the --auth-header-*
//     names in every spelling, are deleted (httpauth's StripHeaders and
//     Forwarder, set by config.handler, in both middlewares);
//  2. with --allow-paths, a cleaned path that matches none is 404;
//  3. a cleaned path that matches --ignore-paths goes to ignored, an
//     httpauth middleware whose always-allow paths are every path, for
//     the ignore methods (GET and HEAD); anything else to protected;
//     either refuses the rewrites' header in two spellings or keeps it
//     and the identity headers out of the client's Connection header;
//  4. the request, with its cleaned path, is proxied: at the end of
//     Rewrite, after httputil.ReverseProxy's hop-by-hop pass, the
//     forwarder sets an authenticated caller's name and groups in the
//     --auth-header-* headers and the rewrites' header to the values
//     that were authorized.
type handler struct {
	o                  proxyOptions
	protected, ignored http.Handler
	log                *loglimit.Limiter
}

// newHandler builds the handler. protect is the middleware of every
// request; ignore, when --ignore-paths is set, that of ignored paths.
func newHandler(o proxyOptions, protect, ignore func(http.Handler) http.Handler) (*handler, error) {
	for _, p := range append(append([]string(nil), o.allowPaths...), o.ignorePaths...) {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("path pattern %q: %w", p, err)
		}
	}
	h := &handler{o: o, log: loglimit.New(20, time.Second, nil)}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// pr.In.URL.Path is the cleaned path that was authorized;
			// SetURL joins it to the upstream's path.
			pr.SetURL(o.upstream)
			pr.SetXForwarded()
			if o.reencodeQuery {
				// The upstream reads the query parameter as it was read
				// here, whatever its own parser would make of the raw
				// form.
				pr.Out.URL.RawQuery = pr.In.URL.Query().Encode()
			}
			o.forwarder.Header(pr.Out.Header, pr.In)
		},
		Transport:  o.transport,
		BufferPool: cli.ProxyBuffers,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if ok, suppressed := h.log.Allow(); ok {
				klog.FromContext(r.Context()).Error(err, "Upstream request failed", "path", r.URL.Path, "suppressed", suppressed)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	h.protected = protect(proxy)
	if ignore != nil {
		h.ignored = ignore(proxy)
	}
	return h, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(h.o.allowPaths) > 0 || h.ignored != nil {
		// A path that does not clean is left to httpauth, which answers 400.
		if clean, err := httpauth.CleanPath(r.URL.EscapedPath()); err == nil && r.URL.Opaque == "" {
			if len(h.o.allowPaths) > 0 && !matchAny(h.o.allowPaths, clean) {
				http.NotFound(w, r)
				return
			}
			if h.ignored != nil && matchAny(h.o.ignorePaths, clean) {
				h.ignored.ServeHTTP(w, r)
				return
			}
		}
	}
	h.protected.ServeHTTP(w, r)
}

func matchAny(patterns []string, p string) bool {
	for _, pat := range patterns {
		if ok, _ := path.Match(pat, p); ok {
			return true
		}
	}
	return false
}
