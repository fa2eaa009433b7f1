package main

import (
	"bufio"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestWatchPathForm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string // want "" : left as it is
	}{
		{in: "/apis/resource.k8s.io/v1/watch/resourceslices?fieldSelector=spec.nodeName%3Dnode-a",
			want: "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-a&watch=true"},
		{in: "/apis/resource.k8s.io/v1/watch/resourceslices/a-1",
			want: "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=metadata.name%3Da-1&watch=true"},
		{in: "/apis/resource.k8s.io/v1/watch/resourceslices/a-1?fieldSelector=metadata.name%3Da-1%2Cspec.nodeName%3Dnode-a&resourceVersion=5",
			want: "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=metadata.name%3Da-1%2Cspec.nodeName%3Dnode-a&resourceVersion=5&watch=true"},
		{in: "/api/v1/watch/namespaces/gpu/pods/p",
			want: "/api/v1/namespaces/gpu/pods?fieldSelector=metadata.name%3Dp&watch=true"},
		{in: "/api/v1/watch/namespaces/gpu", want: "/api/v1/namespaces?fieldSelector=metadata.name%3Dgpu&watch=true"},
		{in: "/api/v1/watch/nodes?watch=false", want: "/api/v1/nodes?watch=true"},
		{in: "/apis/resource.k8s.io/v1//watch/./resourceslices", want: "/apis/resource.k8s.io/v1/resourceslices?watch=true"},
		// Left for the API server's (and draproxy's) own refusal:
		{in: "/apis/resource.k8s.io/v1/watch/resourceslices/a-1?fieldSelector=spec.nodeName%3Dnode-a"}, // not its name
		{in: "/apis/resource.k8s.io/v1/watch/resourceslices/a-1?fieldSelector=metadata.name%3Db-1"},
		{in: "/apis/resource.k8s.io/v1/watch/resourceslices/a-1?fieldSelector=%3D%3D%3D"},
		{in: "/apis/resource.k8s.io/v1/watch/resourceslices/a-1/status"},
		{in: "/apis/resource.k8s.io/v1/watch/resourceslices?a=%zz"},
		{in: "/apis/resource.k8s.io/v1/watch/resourceslices%2fa-1"},
		{in: "/apis/resource.k8s.io/v1/resourceslices/watch/x"},
		{in: "/watch/resourceslices"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := watchPathForm(u)
		switch {
		case tt.want == "" && ok:
			t.Errorf("watchPathForm(%s) = %s; want it left as it is", tt.in, got)
		case tt.want != "" && (!ok || got.RequestURI() != tt.want):
			t.Errorf("watchPathForm(%s) = %v, %v; want %s", tt.in, got, ok, tt.want)
		}
	}
}

// TestWatchForms: the deprecated /watch/ path form is served when it
// carries the node's selector; a single-object watch without it is
// refused with a message naming the selector to add.
func TestWatchForms(t *testing.T) {
	t.Parallel()
	f := startFakeAPI(t)
	h := startProxy(t, f)
	token := f.token(driverOn("node-a"))
	for _, target := range []string{
		"/apis/resource.k8s.io/v1/watch/resourceslices",
		"/apis/resource.k8s.io/v1/watch/resourceslices?fieldSelector=spec.nodeName%3Dnode-b",
		"/apis/resource.k8s.io/v1/watch/resourceslices/a-1",
		"/apis/resource.k8s.io/v1/resourceslices?watch=1&fieldSelector=metadata.name%3Da-1",
	} {
		code, body := h.do(t, http.MethodGet, target, token, nil, nil)
		if code != http.StatusForbidden || !strings.Contains(body, "requires the field selector spec.nodeName=node-a") {
			t.Errorf("GET %s = %d %s; want 403 naming the selector", target, code, body)
		}
	}
	for _, target := range []string{
		"/apis/resource.k8s.io/v1/watch/resourceslices?fieldSelector=spec.nodeName%3Dnode-a",
		"/apis/resource.k8s.io/v1/watch/resourceslices/a-1?fieldSelector=metadata.name%3Da-1%2Cspec.nodeName%3Dnode-a",
	} {
		f.seen()
		resp := h.send(t, http.MethodGet, target, token, nil, nil)
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			t.Errorf("GET %s = %d; want 200", target, resp.StatusCode)
			continue
		}
		f.addSlice("a-1", "node-a")
		line := make(chan string, 1)
		go func() {
			l, _ := bufio.NewReader(resp.Body).ReadString('\n')
			line <- l
		}()
		select {
		case l := <-line:
			if !strings.Contains(l, `"a-1"`) {
				t.Errorf("GET %s: event %s; want a-1", target, l)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("GET %s: no event within 10s", target)
		}
		resp.Body.Close()
		for _, s := range f.seen() {
			if s.Header.Get("Impersonate-User") != "" && (strings.Contains(s.Path, "/watch/") || !strings.Contains(s.RawQuery, "watch=true")) {
				t.Errorf("GET %s forwarded %s?%s; want the list form", target, s.Path, s.RawQuery)
			}
		}
	}
}
