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
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/examples/internal/cli"
	"github.com/reviewauth/reviewauth/httpauth"
	"github.com/reviewauth/reviewauth/internal/loglimit"
)

// headerFields are kube-rbac-proxy's --auth-header-* flags: the headers
// that tell the upstream who the caller is.
type headerFields struct {
	enabled           bool
	user, groups, sep string
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
	headers                    headerFields
	// reencodeQuery forwards the query as parsed, when a query parameter
	// decides what is authorized.
	reencodeQuery bool
}

// handler is rbacproxy's request path:
//
//  1. every client-sent X-Remote-* header, and the --auth-header-*
//     names in every spelling, are deleted (httpauth's StripHeaders, set
//     by config.handler, in both middlewares);
//  2. with --allow-paths, a cleaned path that matches none is 404;
//  3. a cleaned path that matches --ignore-paths goes to ignored, an
//     httpauth middleware whose always-allow paths are every path, for
//     the ignore methods (GET and HEAD); anything else to protected;
//  4. an authenticated caller's name and groups are set in the
//     --auth-header-* headers;
//  5. the request, with its cleaned path, is proxied.
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
	var next http.Handler = proxy
	if o.headers.enabled {
		next = h.withHeaderFields(proxy)
	}
	h.protected = protect(next)
	if ignore != nil {
		h.ignored = ignore(next)
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

// withHeaderFields sets the --auth-header-* headers from the
// authenticated identity, as kube-rbac-proxy does, never for the anonymous
// caller of an ignored path.
func (h *handler) withHeaderFields(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, ok := request.UserFrom(r.Context()); ok && u.GetName() != user.Anonymous {
			r.Header.Set(h.o.headers.user, u.GetName())
			r.Header.Set(h.o.headers.groups, strings.Join(u.GetGroups(), h.o.headers.sep))
		}
		next.ServeHTTP(w, r)
	})
}
