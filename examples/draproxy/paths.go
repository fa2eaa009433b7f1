package main

import (
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/fields"

	"github.com/reviewauth/reviewauth/httpauth"
)

// watchPathForm rewrites a request in the API server's deprecated watch
// path form, /api/v1/watch/... or /apis/GROUP/VERSION/watch/..., into the
// list form the API server serves it as, with watch=true:
//
//	/apis/G/V/watch/RESOURCE?Q            -> /apis/G/V/RESOURCE?Q&watch=true
//	/apis/G/V/watch/RESOURCE/NAME?Q       -> /apis/G/V/RESOURCE?Q&watch=true&fieldSelector=metadata.name=NAME
//	(and the same under namespaces/NS/)
//
// so that the field selector it carries is the one authorized (the API
// server's RequestInfo, and so draproxy's, records no selector for the
// path form) and the request forwarded is the one authorized. A
// single-object watch whose query has its own field selector keeps it
// only if the selector requires metadata.name=NAME, as the API server
// requires; any other request is left as it is (and, for ResourceSlices,
// refused for want of a node selector). ok is false when there is nothing
// to rewrite.
func watchPathForm(u *url.URL) (*url.URL, bool) {
	if !strings.Contains(u.Path, "/watch/") {
		return nil, false
	}
	clean, err := httpauth.CleanPath(u.EscapedPath())
	if err != nil {
		return nil, false // refused by httpauth
	}
	parts := strings.Split(strings.Trim(clean, "/"), "/")
	var i int // the index of "watch"
	switch {
	case len(parts) > 3 && parts[0] == "api" && parts[2] == "watch":
		i = 2
	case len(parts) > 4 && parts[0] == "apis" && parts[3] == "watch":
		i = 3
	default:
		return nil, false
	}
	rest := parts[i+1:]
	var collection []string
	var name string
	switch n := len(rest); {
	case rest[0] == "namespaces" && n <= 4:
		// namespaces[/NS] (the namespaces) or namespaces/NS/RESOURCE[/NAME].
		if n <= 2 {
			collection = rest[:1]
			if n == 2 {
				name = rest[1]
			}
		} else {
			collection = rest[:3]
			if n == 4 {
				name = rest[3]
			}
		}
	case rest[0] != "namespaces" && n <= 2:
		collection = rest[:1]
		if n == 2 {
			name = rest[1]
		}
	default:
		return nil, false // a subresource: no watch form
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, false
	}
	if name != "" {
		if fs := q.Get("fieldSelector"); fs != "" {
			sel, err := fields.ParseSelector(fs)
			if err != nil {
				return nil, false
			}
			if v, ok := sel.RequiresExactMatch("metadata.name"); !ok || v != name {
				return nil, false
			}
		} else {
			q.Set("fieldSelector", fields.OneTermEqualSelector("metadata.name", name).String())
		}
	}
	q.Set("watch", "true")
	out := *u
	out.Path = "/" + strings.Join(append(append([]string{}, parts[:i]...), collection...), "/")
	out.RawPath = "" // the clean path's segments: EscapedPath escapes them again
	out.RawQuery = q.Encode()
	return &out, true
}
