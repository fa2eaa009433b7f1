package main

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/httpauth"
)

// BenchmarkDRAProxy measures what draproxy adds to a driver's requests,
// with warm caches (identity, SubjectAccessReview, the slice's node), in
// one run:
//
//   - middleware: BenchmarkMiddleware/reviewauth of package httpauth (the
//     library's own cost: httpauth.New over authn, authz and the
//     RequestInfo mapper, over a bare handler, through
//     httptest.NewRecorder); added-ns/op is its ns/op minus the bare
//     handler's, measured alternately.
//   - get: client-go's ResourceSlices().Get, once directly to the fake API
//     server (TLS, HTTP/2) and once through draproxy (HTTP/1.1 on
//     loopback, then the same TLS HTTP/2 connection pool), alternately;
//     ns/op is the proxied get, added-ns/op the difference, which includes
//     the extra hop.
//   - get-handler: the same get without the network: draproxy's handler
//     through httptest.NewRecorder in front of the fake API server's
//     handler called in process, against that handler alone; added-ns/op
//     is draproxy's own work per request (two header maps, the
//     impersonation, the reverse proxy's copy), comparable with the
//     middleware's.
//   - watch-event: the delay from the fake API server writing a watch
//     event to client-go's watch delivering it, directly and through
//     draproxy, alternately.
//
// x-middleware is added-ns/op divided by the middleware's added-ns/op of
// the same run. The in-process variants (middleware, get-handler) also
// report added-cpu-ns/op, the difference in the CPU time of the thread
// they run on, which other load on the machine does not inflate.
// x-middleware-cpu is get-handler's added-cpu-ns/op over the middleware
// sub-benchmark's, the ratio. get-handler also measures the
// middleware over the bare handler in its own loop, alternately with
// draproxy and the upstream (middleware-added-cpu-ns/op), and reports
// x-middleware-cpu-interleaved, draproxy's added CPU time over the
// middleware's measured so, both under the same load and the same cache
// pressure (four handlers in turn: each costs about twice what it costs
// alone).
func BenchmarkDRAProxy(b *testing.B) {
	f := startFakeAPI(b)
	f.noRecord.Store(true)
	f.addSlice("a-1", "node-a")
	token := f.token(driverOn("node-a"))
	h := startProxy(b, f)

	direct := func() *kubernetes.Clientset {
		cfg := f.config()
		cfg.QPS = -1
		cfg.ContentType = "application/json"
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return cs
	}()
	proxied := h.client(b, token)

	var middlewareAdded, middlewareAddedCPU float64
	b.Run("middleware", func(b *testing.B) {
		an, err := authn.NewForConfig(f.config(), authn.Options{Audiences: []string{testAudience}})
		if err != nil {
			b.Fatal(err)
		}
		sar, err := authz.NewForConfig(f.config(), authz.Options{})
		if err != nil {
			b.Fatal(err)
		}
		bare := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
		mw, err := httpauth.New(httpauth.Options{Authenticator: an, Authorizer: sar, Attributes: httpauth.RequestInfo()})
		if err != nil {
			b.Fatal(err)
		}
		ours := mw(bare)
		r := httptest.NewRequest(http.MethodGet, "/apis/resource.k8s.io/v1/resourceslices/a-1", nil)
		auth := []string{"Bearer " + token}
		serve := func(h http.Handler) (time.Duration, time.Duration) {
			r.Header["Authorization"] = auth
			w := httptest.NewRecorder()
			start, cpu := time.Now(), threadCPU()
			h.ServeHTTP(w, r)
			d, c := time.Since(start), threadCPU()-cpu
			if w.Code != http.StatusOK {
				b.Fatalf("code %d (%s); want 200", w.Code, w.Body)
			}
			return d, c
		}
		runtime.LockOSThread() // the handlers run on this thread: its CPU time is theirs
		defer runtime.UnlockOSThread()
		serve(ours) // warm
		var with, without, withCPU, withoutCPU time.Duration
		b.ReportAllocs()
		for b.Loop() {
			d, c := serve(ours)
			with, withCPU = with+d, withCPU+c
			d, c = serve(bare)
			without, withoutCPU = without+d, withoutCPU+c
		}
		middlewareAdded = float64(with-without) / float64(b.N)
		middlewareAddedCPU = float64(withCPU-withoutCPU) / float64(b.N)
		b.ReportMetric(float64(with)/float64(b.N), "reviewauth-ns/op")
		b.ReportMetric(middlewareAdded, "added-ns/op")
		b.ReportMetric(middlewareAddedCPU, "added-cpu-ns/op")
	})

	report := func(b *testing.B, direct, proxied time.Duration) {
		added := float64(proxied-direct) / float64(b.N)
		b.ReportMetric(float64(direct)/float64(b.N), "direct-ns/op")
		b.ReportMetric(float64(proxied)/float64(b.N), "proxy-ns/op")
		b.ReportMetric(added, "added-ns/op")
		if middlewareAdded > 0 {
			b.ReportMetric(added/middlewareAdded, "x-middleware")
		}
	}

	b.Run("get", func(b *testing.B) {
		get := func(cs *kubernetes.Clientset) time.Duration {
			start := time.Now()
			if _, err := cs.ResourceV1().ResourceSlices().Get(b.Context(), "a-1", metav1.GetOptions{}); err != nil {
				b.Fatal(err)
			}
			return time.Since(start)
		}
		get(direct) // warm: connections, reviews, the slice's node
		get(proxied)
		var d, p time.Duration
		for b.Loop() {
			d += get(direct)
			p += get(proxied)
		}
		report(b, d, p)
	})

	b.Run("get-handler", func(b *testing.B) {
		upstream := f.srv.Config.Handler
		handler, err := newProxy(options{
			NodeName: "node-a", Authenticator: must(authn.NewForConfig(f.config(), authn.Options{Audiences: []string{testAudience}})),
			SAR:      must(authz.NewForConfig(f.config(), authz.Options{})),
			Upstream: &rest.Config{Host: "https://fake.invalid", BearerToken: f.proxyToken, Transport: handlerTransport{upstream}},
			Clock:    h.clk,
		})
		if err != nil {
			b.Fatal(err)
		}
		serve := func(h http.Handler, auth string) (time.Duration, time.Duration) {
			r := httptest.NewRequest(http.MethodGet, "/apis/resource.k8s.io/v1/resourceslices/a-1", nil)
			r.Header.Set("Authorization", auth)
			w := httptest.NewRecorder()
			start, cpu := time.Now(), threadCPU()
			h.ServeHTTP(w, r)
			d, c := time.Since(start), threadCPU()-cpu
			if w.Code != http.StatusOK {
				b.Fatalf("code %d (%s); want 200", w.Code, w.Body)
			}
			return d, c
		}
		// The middleware over a bare handler, as in the middleware
		// sub-benchmark, measured in the same loop: the ratio of what
		// draproxy and the middleware add then compares work done under
		// the same load.
		mw, err := httpauth.New(httpauth.Options{
			Authenticator: must(authn.NewForConfig(f.config(), authn.Options{Audiences: []string{testAudience}})),
			Authorizer:    must(authz.NewForConfig(f.config(), authz.Options{})),
			Attributes:    httpauth.RequestInfo(),
		})
		if err != nil {
			b.Fatal(err)
		}
		bare := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
		ours := mw(bare)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		serve(handler, "Bearer "+token)
		serve(ours, "Bearer "+token)
		var d, p, dCPU, pCPU, mCPU, bCPU time.Duration
		b.ReportAllocs()
		for b.Loop() {
			wall, cpu := serve(upstream, "Bearer "+f.proxyToken)
			d, dCPU = d+wall, dCPU+cpu
			wall, cpu = serve(handler, "Bearer "+token)
			p, pCPU = p+wall, pCPU+cpu
			_, cpu = serve(ours, "Bearer "+token)
			mCPU += cpu
			_, cpu = serve(bare, "Bearer "+token)
			bCPU += cpu
		}
		report(b, d, p)
		addedCPU := float64(pCPU-dCPU) / float64(b.N)
		b.ReportMetric(addedCPU, "added-cpu-ns/op")
		if middlewareAddedCPU > 0 {
			b.ReportMetric(addedCPU/middlewareAddedCPU, "x-middleware-cpu")
		}
		mwCPU := float64(mCPU-bCPU) / float64(b.N)
		b.ReportMetric(mwCPU, "middleware-added-cpu-ns/op")
		if mwCPU > 0 {
			b.ReportMetric(addedCPU/mwCPU, "x-middleware-cpu-interleaved")
		}
	})

	b.Run("watch-event", func(b *testing.B) {
		open := func(cs *kubernetes.Clientset) watch.Interface {
			w, err := cs.ResourceV1().ResourceSlices().Watch(b.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(w.Stop)
			return w
		}
		wd, wp := open(direct), open(proxied)
		// One event, to both watches: the time from writing it to each
		// watch delivering it.
		event := func() (time.Duration, time.Duration) {
			start := time.Now()
			f.addSlice("bench", "node-a")
			var d, p time.Duration
			for got := 0; got < 2; got++ {
				select {
				case <-wd.ResultChan():
					d = time.Since(start)
				case <-wp.ResultChan():
					p = time.Since(start)
				case <-time.After(10 * time.Second):
					b.Fatal("no watch event within 10s")
				}
			}
			return d, p
		}
		event()
		var d, p time.Duration
		for b.Loop() {
			ed, ep := event()
			d += ed
			p += ep
		}
		report(b, d, p)
	})
}

// threadCPU is the CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID):
// with the goroutine locked to its thread, the work of a synchronous
// handler, whatever else the machine runs.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// handlerTransport serves requests with a handler in process. A request
// without a body gets http.NoBody, as a server's handler would, on a
// shallow copy: a deep clone (every header value) would charge draproxy
// with work that no real transport does.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil {
		rr := *r
		rr.Body = http.NoBody
		r = &rr
	}
	w := httptest.NewRecorder()
	t.h.ServeHTTP(w, r)
	resp := w.Result()
	resp.Request = r
	return resp, nil
}
