package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestOwnReadFaults: every object draproxy reads for a decision (a slice
// before a write, a list as the node; a reserving pod) and
// every answer it checks before the driver sees it (a get of a slice or a
// claim) is believed only if it is the object asked for, whole. An empty
// object or body, a Status (even a 404's) or another object with 200, an
// answer that is not JSON, a dropped connection, a truncated answer: 503
// with Retry-After; an answer that never comes or never ends: 504 with
// Retry-After at the request's deadline. Nothing is forwarded on such a
// read, nothing is remembered from it, and nothing leaks: the decisions
// after the faults are the right ones, and the file descriptors do not
// grow from one round of faults to the next.
func TestOwnReadFaults(t *testing.T) {
	f := startFakeAPI(t)
	h := startProxy(t, f)
	token := f.token(driverOn("node-a"))
	f.addSlice("a-1", "node-a")
	f.addSlice("b-1", "node-b")
	f.addPod("gpu", "job-a", "uid-job-a", "node-a", "on-a")
	f.addPod("gpu", "job-b", "uid-job-b", "node-b", "on-b")
	f.addClaim("gpu", "on-a", [2]string{"job-a", "uid-job-a"})
	f.addClaim("gpu", "on-b", [2]string{"job-b", "uid-job-b"})
	own := func(r *http.Request) bool { return strings.HasSuffix(r.Header.Get("User-Agent"), "(own check)") }
	forwarded := func(r *http.Request) bool { return !own(r) }
	merge := http.Header{"Content-Type": {mediaMergePatch}}
	type target struct {
		name           string
		method, path   string
		header         http.Header
		body           string
		faulted        string                   // the path whose read fails
		by             func(*http.Request) bool // draproxy's own read, or the forwarded get
		foreign        map[string]any           // the other object of node-a
		after          int                      // the right answer, once the fault is gone
		forwardedWrite bool                     // whether a write follows the read
	}
	targets := []target{
		{name: "slice before a patch", method: http.MethodPatch, path: slicePath("b-1"), header: merge, body: `{}`, faulted: sliceCollection, by: own,
			foreign: f.get(slicePath("a-1")), after: http.StatusNotFound, forwardedWrite: true},
		{name: "slice before a delete", method: http.MethodDelete, path: slicePath("b-1"), faulted: sliceCollection, by: own,
			foreign: f.get(slicePath("a-1")), after: http.StatusNotFound, forwardedWrite: true},
		{name: "pod of a claim", method: http.MethodGet, path: claimPath("gpu", "on-a"), faulted: podPath("gpu", "job-a"), by: own,
			foreign: f.get(podPath("gpu", "job-b")), after: http.StatusOK},
		{name: "get of a slice", method: http.MethodGet, path: slicePath("b-1"), faulted: slicePath("b-1"), by: forwarded,
			foreign: f.get(slicePath("a-1")), after: http.StatusNotFound},
		{name: "get of a claim", method: http.MethodGet, path: claimPath("gpu", "on-b"), faulted: claimPath("gpu", "on-b"), by: forwarded,
			foreign: f.get(claimPath("gpu", "on-a")), after: http.StatusForbidden},
	}
	round := func(t *testing.T) {
		for _, tg := range targets {
			for _, fl := range faults(tg.foreign) {
				arrived := f.inject(fl, func(r *http.Request) bool { return r.Method == http.MethodGet && r.URL.Path == tg.faulted && tg.by(r) })
				f.seen()
				done := make(chan [3]any, 1)
				go func() {
					resp := h.send(t, tg.method, tg.path, token, []byte(tg.body), tg.header)
					defer resp.Body.Close()
					b, _ := io.ReadAll(resp.Body)
					done <- [3]any{resp.StatusCode, string(b), resp.Header.Get("Retry-After")}
				}()
				select {
				case <-arrived:
				case <-time.After(30 * time.Second):
					t.Fatalf("%s, %s: no read of %s within 30s", tg.name, fl.name, tg.faulted)
				}
				if fl.hangs {
					h.clk.Step(DefaultRequestTimeout)
				}
				res := <-done
				code, body := res[0].(int), res[1].(string)
				want := http.StatusServiceUnavailable
				if fl.hangs {
					want = http.StatusGatewayTimeout
				}
				var st metav1.Status
				if code != want || json.Unmarshal([]byte(body), &st) != nil || st.Kind != "Status" || st.Details == nil || st.Details.RetryAfterSeconds < 1 {
					t.Errorf("%s, %s: %s %s = %d %s; want a %d Status with Retry-After", tg.name, fl.name, tg.method, tg.path, code, body, want)
				}
				if ra, err := strconv.Atoi(res[2].(string)); err != nil || ra < 1 {
					t.Errorf("%s, %s: Retry-After header %q; want seconds", tg.name, fl.name, res[2])
				}
				f.fault.Store(nil)
				for _, s := range f.seen() {
					if tg.forwardedWrite && !own(r(s)) && s.Method != http.MethodGet {
						t.Errorf("%s, %s: forwarded %s %s after a read that failed", tg.name, fl.name, s.Method, s.Path)
					}
				}
				// Nothing remembered: the right answer now.
				if code, body := h.do(t, tg.method, tg.path, token, []byte(tg.body), tg.header); code != tg.after {
					t.Errorf("%s, after %s: %s %s = %d %s; want %d", tg.name, fl.name, tg.method, tg.path, code, body, tg.after)
				}
			}
		}
		if code, body := h.do(t, http.MethodGet, slicePath("a-1"), token, nil, nil); code != http.StatusOK {
			t.Errorf("after the faults, get of node-a's slice = %d %s", code, body)
		}
	}
	round(t)
	warm := openFDs(t)
	round(t)
	round(t)
	if after := openFDs(t); after > warm+4 {
		t.Errorf("open file descriptors grew from %d to %d over two rounds of faults", warm, after)
	}
	if n, _ := f.sliceNode("b-1"); n != "node-b" {
		t.Errorf("b-1 is of node %q; want node-b", n)
	}
}

// r is a request with the header of s, for own.
func r(s seen) *http.Request { return &http.Request{Header: s.Header} }
