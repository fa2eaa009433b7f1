package httpauth

import (
	"fmt"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/reviewauth/reviewauth/internal/pathmatch"
)

// AttributesMapper maps an authenticated request to the attribute sets the
// authorizer must allow, all of them, for the request to proceed. The
// middleware calls it with the cleaned path in r.URL.Path and u set in r's
// context. An error is answered with 400 Bad Request, or 405 when it matches
// [ErrMethodNotAllowed]; an empty result is answered with 403. Implementations
// must be safe for concurrent use.
type AttributesMapper interface {
	Attributes(r *http.Request, u user.Info) ([]authorizer.Attributes, error)
}

// AttributesMapperFunc adapts a function to [AttributesMapper].
type AttributesMapperFunc func(r *http.Request, u user.Info) ([]authorizer.Attributes, error)

// Attributes calls f(r, u).
func (f AttributesMapperFunc) Attributes(r *http.Request, u user.Info) ([]authorizer.Attributes, error) {
	return f(r, u)
}

// ResourceVerb returns the Kubernetes API verb for an HTTP method of a
// resource request: GET and HEAD are "get", POST "create", PUT "update",
// PATCH "patch" and DELETE "delete", as the API server's RequestInfo maps
// them. Methods are case-sensitive: "get" is not GET. Any other method is an
// error matching [ErrMethodNotAllowed]: there is no verb to authorize, so
// the request fails closed.
//
// The kubelet (v1.37.2) differs on two points, on purpose here. It maps
// HEAD to the empty verb, which only a "*" verb in an RBAC rule grants, so
// that a caller allowed to get a subresource is refused HEAD; HEAD is GET
// without a body, and this mapping lets it through where GET is allowed,
// and nowhere else. And it authorizes any other method (OPTIONS, TRACE,
// lowercase "get", ...) with the empty verb as well, so that only a "*"
// grant reaches its handlers, which then answer 405 for most of them;
// here such a request is refused with 405 before authorization, for every
// caller.
func ResourceVerb(method string) (string, error) {
	switch method {
	case http.MethodGet, http.MethodHead:
		return "get", nil
	case http.MethodPost:
		return "create", nil
	case http.MethodPut:
		return "update", nil
	case http.MethodPatch:
		return "patch", nil
	case http.MethodDelete:
		return "delete", nil
	}
	return "", fmt.Errorf("%w: %q", ErrMethodNotAllowed, method)
}

// Kubelet returns the mapper of the kubelet's node API as the kubelet
// v1.37.2 authorizes it with the KubeletFineGrainedAuthz feature gate off
// (the behaviour of kubelets before fine-grained authorization; the gate is
// GA and locked on since 1.36, see [KubeletFineGrained]). Each request maps
// to one resource attribute set on nodes (API group "", version v1) named
// nodeName, with the verb from [ResourceVerb] and the subresource from the
// cleaned path:
//
//	/stats, /stats/*           nodes/stats
//	/metrics, /metrics/*       nodes/metrics
//	/logs, /logs/*             nodes/log
//	/checkpoint, /checkpoint/* nodes/checkpoint
//	/statusz, /statusz/*       nodes/statusz
//	/flagz, /flagz/*           nodes/configz
//	anything else              nodes/proxy (/pods, /spec, /configz, /healthz, /exec, /portForward, ...)
//
// A prefix matches whole segments only, and case-sensitively, as in the
// kubelet: "/metricsx" and "/Metrics" are nodes/proxy. The kubelet reads
// the path as its mux has cleaned it (it redirects "//x" and "/a/../x");
// this mapper reads the path [CleanPath] returned, and encodings CleanPath
// refuses never reach it. The test/e2e module checks this mapper against
// the kubelet's own attributes getter for every path and method. An empty
// nodeName asks for the subresource on all nodes, which RBAC rules
// restricted by resourceNames do not grant. The mapper is safe for
// concurrent use.
func Kubelet(nodeName string) AttributesMapper {
	return kubeletMapper{node: nodeName}
}

// kubeletMapper is Kubelet's mapper, and KubeletFineGrained's with
// fineGrained.
type kubeletMapper struct {
	node        string
	fineGrained bool
}

func (k kubeletMapper) Attributes(r *http.Request, u user.Info) ([]authorizer.Attributes, error) {
	verb, err := ResourceVerb(r.Method)
	if err != nil {
		return nil, err
	}
	p := r.URL.Path
	o := &one{rec: authorizer.AttributesRecord{User: u, Verb: verb, APIVersion: "v1", Resource: "nodes",
		Subresource: kubeletSubresource(p), Name: k.node, ResourceRequest: true, Path: p}}
	o.list[0] = &o.rec
	if !k.fineGrained {
		return o.list[:], nil
	}
	var fine string
	switch {
	case isSubpath(p, "/allocatedPods"), isSubpath(p, "/pods"), isSubpath(p, "/runningpods"):
		fine = "pods"
	case isSubpath(p, "/healthz"):
		fine = "healthz"
	case isSubpath(p, "/configz"):
		fine = "configz"
	default:
		return o.list[:], nil
	}
	narrow := o.rec
	narrow.Subresource = fine
	return []authorizer.Attributes{AnyOf(&narrow, &o.rec)}, nil
}

// AnyOf returns an attribute set that is allowed when any of alts is: the
// middleware asks about them in order and the first Allow wins, as the
// kubelet asks about nodes/pods before nodes/proxy. When every alternative
// is denied, the request is denied with the last one's reason; when one
// cannot be checked, the request is answered 503 at once, without asking
// the rest. Given to an authorizer directly, an AnyOf is its first
// alternative, the narrowest. AnyOf panics with no alternatives.
func AnyOf(alts ...authorizer.Attributes) authorizer.Attributes {
	if len(alts) == 0 {
		panic("httpauth: AnyOf with no alternatives")
	}
	return &anyOf{Attributes: alts[0], alts: alts}
}

type anyOf struct {
	authorizer.Attributes
	alts []authorizer.Attributes
}

// KubeletFineGrained returns the mapper of the kubelet's node API with
// fine-grained authorization (KEP-2862; the KubeletFineGrainedAuthz gate is
// GA and locked on since Kubernetes 1.36), as the kubelet v1.37.2 authorizes
// it. It maps like [Kubelet], and a few paths first try a narrower
// subresource:
//
//	/pods, /pods/*                   nodes/pods, else nodes/proxy
//	/allocatedPods, /allocatedPods/* nodes/pods, else nodes/proxy
//	/runningpods, /runningpods/*     nodes/pods, else nodes/proxy
//	/healthz, /healthz/*             nodes/healthz, else nodes/proxy
//	/configz, /configz/*             nodes/configz, else nodes/proxy
//
// For these, a caller allowed either the fine-grained subresource or
// nodes/proxy is allowed ([AnyOf]), as the kubelet does, so existing
// nodes/proxy grants keep working while new ones can be narrower. /spec is
// nodes/proxy, as in the kubelet (nodes/spec is not a kubelet
// subresource). Methods, path cleaning and case follow [Kubelet]; the
// test/e2e module checks this mapper against the kubelet's own attributes
// getter. The mapper is safe for concurrent use.
func KubeletFineGrained(nodeName string) AttributesMapper {
	return kubeletMapper{node: nodeName, fineGrained: true}
}

// one holds a single attribute set and the slice that returns it, so that a
// mapper allocates once per request.
type one struct {
	rec  authorizer.AttributesRecord
	list [1]authorizer.Attributes
}

func single(rec authorizer.AttributesRecord) []authorizer.Attributes {
	o := &one{rec: rec}
	o.list[0] = &o.rec
	return o.list[:]
}

// nonResourceVerb is the API server's verb for a non-resource request: the
// lowercase method, without allocating for the common ones.
func nonResourceVerb(method string) string {
	switch method {
	case http.MethodGet:
		return "get"
	case http.MethodHead:
		return "head"
	case http.MethodPost:
		return "post"
	case http.MethodPut:
		return "put"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	case http.MethodOptions:
		return "options"
	}
	return strings.ToLower(method)
}

// kubeletSubresources are the kubelet's subresources by path, in the
// kubelet's order (pkg/kubelet/server/auth.go); any other path is
// nodes/proxy.
var kubeletSubresources = []struct{ path, subresource string }{
	{"/stats", "stats"}, {"/metrics", "metrics"}, {"/logs", "log"},
	{"/checkpoint", "checkpoint"}, {"/statusz", "statusz"}, {"/flagz", "configz"},
}

// kubeletSubresource is the kubelet's subresource for a path.
func kubeletSubresource(p string) string {
	for _, e := range kubeletSubresources {
		if isSubpath(p, e.path) {
			return e.subresource
		}
	}
	return "proxy"
}

// isSubpath reports whether p is prefix or below it, on segment boundaries.
func isSubpath(p, prefix string) bool {
	return p == prefix || (strings.HasPrefix(p, prefix) && p[len(prefix)] == '/')
}

// RequestInfo returns the mapper for Kubernetes REST paths, for proxies in
// front of an API server or an aggregated API. It parses the path with
// k8s.io/apiserver's RequestInfoFactory (API prefixes "api" and "apis", "api"
// without a group) and builds the attributes exactly as the API server's
// authorization filter does: resource requests such as
// "GET /api/v1/namespaces/ns/pods/p/log" are "get pods/log p in ns", lists
// and watches carry their field and label selectors, and other paths are
// non-resource requests with the lowercase method as verb. The mapper is safe
// for concurrent use.
func RequestInfo() AttributesMapper {
	return requestInfoMapper{factory: &request.RequestInfoFactory{
		APIPrefixes:          sets.NewString("api", "apis"),
		GrouplessAPIPrefixes: sets.NewString("api"),
	}}
}

type requestInfoMapper struct{ factory *request.RequestInfoFactory }

func (m requestInfoMapper) Attributes(r *http.Request, u user.Info) ([]authorizer.Attributes, error) {
	if p := r.URL.Path; !strings.HasPrefix(p, "/api/") && !strings.HasPrefix(p, "/apis/") {
		// What RequestInfoFactory answers for a path outside the API
		// prefixes, without its allocations.
		return single(authorizer.AttributesRecord{User: u, Verb: nonResourceVerb(r.Method), Path: p}), nil
	}
	info, err := m.factory.NewRequestInfo(r)
	if err != nil {
		return nil, fmt.Errorf("httpauth: parsing request path: %w", err)
	}
	o := &one{rec: authorizer.AttributesRecord{
		User:            u,
		Verb:            info.Verb,
		Namespace:       info.Namespace,
		APIGroup:        info.APIGroup,
		APIVersion:      info.APIVersion,
		Resource:        info.Resource,
		Subresource:     info.Subresource,
		Name:            info.Name,
		ResourceRequest: info.IsResourceRequest,
		Path:            info.Path,
	}}
	a := &o.rec
	o.list[0] = a
	// As the API server's GetAuthorizerAttributes: a selector that does not
	// parse is recorded as a parsing error for the authorizer to see.
	if info.FieldSelector != "" {
		if s, err := fields.ParseSelector(info.FieldSelector); err != nil {
			a.FieldSelectorParsingErr = err
		} else if req := s.Requirements(); len(req) > 0 {
			a.FieldSelectorRequirements = req
		}
	}
	if info.LabelSelector != "" {
		if s, err := labels.Parse(info.LabelSelector); err != nil {
			a.LabelSelectorParsingErr = err
		} else if req, _ := s.Requirements(); len(req) > 0 {
			a.LabelSelectorRequirements = req
		}
	}
	return o.list[:], nil
}

// NonResource returns the mapper of non-resource requests, as the API server
// builds them: the cleaned path and the lowercase method as verb ("get",
// "post", "put", "patch", "delete", "head", ...), so that RBAC
// nonResourceURLs rules apply. The mapper is safe for concurrent use.
func NonResource() AttributesMapper {
	return AttributesMapperFunc(func(r *http.Request, u user.Info) ([]authorizer.Attributes, error) {
		return single(authorizer.AttributesRecord{User: u, Verb: nonResourceVerb(r.Method), Path: r.URL.Path}), nil
	})
}

// Route is one entry of a [StaticRoutes] table.
type Route struct {
	// Path matches the cleaned request path exactly or, with a trailing
	// "*", as a prefix. It must be a clean absolute path.
	Path string

	// Methods restricts the route to these HTTP methods. Nil or empty
	// means every method.
	Methods []string

	// Attributes are the attribute sets to authorize, all of them, as
	// templates: User is always set to the authenticated user; an empty
	// Verb becomes [ResourceVerb] of the method for a resource request and
	// the lowercase method otherwise; an empty Path becomes the cleaned
	// request path. At least one is required.
	Attributes []authorizer.AttributesRecord
}

// StaticRoutes returns a mapper that looks the request up in routes, in
// order, and uses the first route whose path and method match. A request that
// matches no route maps to no attributes, and the middleware answers 403. It
// reports an error for a malformed route. The mapper is safe for concurrent
// use; it keeps its own copy of routes.
func StaticRoutes(routes ...Route) (AttributesMapper, error) {
	m := staticRoutes{routes: make([]staticRoute, 0, len(routes))}
	for i, rt := range routes {
		match, err := pathmatch.New("path", []string{rt.Path})
		if err != nil {
			return nil, fmt.Errorf("httpauth: route %d: %w", i, err)
		}
		if len(rt.Attributes) == 0 {
			return nil, fmt.Errorf("httpauth: route %d (%s): no attributes", i, rt.Path)
		}
		sr := staticRoute{match: match, attrs: append([]authorizer.AttributesRecord(nil), rt.Attributes...)}
		for _, method := range rt.Methods {
			if method == "" {
				return nil, fmt.Errorf("httpauth: route %d (%s): empty method", i, rt.Path)
			}
			if sr.methods == nil {
				sr.methods = map[string]struct{}{}
			}
			sr.methods[strings.ToUpper(method)] = struct{}{}
		}
		m.routes = append(m.routes, sr)
	}
	return m, nil
}

type staticRoute struct {
	match   *pathmatch.Matcher
	methods map[string]struct{}
	attrs   []authorizer.AttributesRecord
}

type staticRoutes struct{ routes []staticRoute }

func (m staticRoutes) Attributes(r *http.Request, u user.Info) ([]authorizer.Attributes, error) {
	for _, rt := range m.routes {
		if !rt.match.Match(r.URL.Path) {
			continue
		}
		if rt.methods != nil {
			if _, ok := rt.methods[r.Method]; !ok {
				continue
			}
		}
		out := make([]authorizer.Attributes, 0, len(rt.attrs))
		for _, tmpl := range rt.attrs {
			a := tmpl
			a.User = u
			if a.Verb == "" {
				if a.ResourceRequest {
					verb, err := ResourceVerb(r.Method)
					if err != nil {
						return nil, err
					}
					a.Verb = verb
				} else {
					a.Verb = nonResourceVerb(r.Method)
				}
			}
			if a.Path == "" {
				a.Path = r.URL.Path
			}
			out = append(out, &a)
		}
		return out, nil
	}
	return nil, nil
}
