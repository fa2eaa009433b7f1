package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/httpauth"
	"github.com/reviewauth/reviewauth/serving"
)

// watchEvents is how many watch events direct and proxy each time, after
// their get loop.
const watchEvents = 200

// BenchmarkDRAProxy measures what draproxy adds to a driver's requests,
// with warm caches (identity, SubjectAccessReview), in one run. The get
// is a checked read: draproxy asks the API server for the slice as JSON,
// reads the whole answer and checks it (kind, name, UID, spec.nodeName)
// before it answers; nothing about the slice is remembered. The figures are proxy's: x-middleware-cpu (goal ≤ 5)
// and watch-event-added-ns (goal ≤ 1 ms). Its sub-benchmarks, in this
// order:
//
//   - middleware: BenchmarkMiddleware/reviewauth of package httpauth, the
//     library's own cost: httpauth.New over authn, authz and the
//     RequestInfo mapper, over a bare handler, through
//     httptest.NewRecorder, and the bare handler alone, alternately.
//     added-ns/op is the difference of their wall times, added-cpu-ns/op
//     of their thread CPU times.
//   - direct: client-go (kubernetes.Clientset, JSON) ResourceSlices().Get
//     of a slice of this node straight to the fake API server's handler,
//     through an in-process transport (rest.Config's Transport is a
//     handlerTransport, which calls the handler: no socket). ns/op is one
//     get, cpu-ns/op its thread CPU time. Then watch-event-ns: the mean
//     delay, over watchEvents events, from the fake API server storing a
//     slice to client-go's watch delivering its event, over real sockets
//     (client-go → TLS, HTTP/2 → the fake API server).
//   - proxy: the same client-go get through draproxy's handler, in
//     process the same way (client-go → handlerTransport → draproxy →
//     handlerTransport → the fake API server's handler), so that
//     client-go's cost, the fake API server's and the one in-process
//     exchange of direct are the same in both and cancel. added-ns/op is
//     its ns/op minus direct's, added-cpu-ns/op its cpu-ns/op minus
//     direct's: draproxy's own work per warm request, its in-process
//     upstream exchange included (a response recorder, its header and
//     body, where a real transport reads a response), but no socket,
//     which any proxy pays (see hop). added-allocs/op and added-B/op are
//     its allocations minus direct's. x-middleware is added-ns/op over the
//     middleware's added-ns/op, x-middleware-cpu added-cpu-ns/op over the
//     middleware's added-cpu-ns/op: the ratio, read by CPU time,
//     which other load on the machine does not inflate. With -count N,
//     middleware and direct each run N times before proxy does, and proxy
//     uses the median of their runs. Then, through real sockets, the
//     watch: client-go → draproxy's Unix socket (HTTP/1.1) → draproxy,
//     served as main serves it → TLS, HTTP/2 → the fake API server, its
//     events stored in turn with those of a direct watch of another node
//     (so that drift in the machine's load affects both alike):
//     watch-event-ns is the proxied watch's mean delay,
//     watch-event-direct-ns the direct one's, watch-event-added-ns the
//     difference.
//   - hop: the get over real sockets, client-go directly to the fake API
//     server (TLS, HTTP/2) and through draproxy's Unix socket (HTTP/1.1,
//     then a TLS HTTP/2 connection to the fake API server), alternately.
//     ns/op is the pair; added-ns/op is the proxied get minus the direct
//     one, the second HTTP exchange included, which any proxy pays and
//     which dominates: what a driver sees, not draproxy's own work.
//   - interleaved: draproxy's handler (in process, as in proxy) and the
//     fake API server's handler alone, the middleware and the bare
//     handler, called in turn in one loop through httptest.NewRecorder.
//     added-cpu-ns/op is draproxy's (its handler minus the upstream's
//     alone), middleware-added-cpu-ns/op the middleware's,
//     x-middleware-cpu-interleaved their ratio: both under the same load,
//     the same cache pressure and the same garbage collector, where proxy
//     and middleware run their loops apart (each with its own garbage
//     rate), which is why their ratio moves more from run to run.
//
// Thread CPU times are CLOCK_THREAD_CPUTIME_ID with the goroutine locked
// to its thread: everything in process here runs synchronously on it (the
// garbage collector's background workers excepted; its assists count).
func BenchmarkDRAProxy(b *testing.B) {
	f := startFakeAPI(b)
	f.noRecord.Store(true)
	f.noNodeAuthz.Store(true)
	f.addSlice("a-1", "node-a")
	token := f.token(driverOn("node-a"))
	upstream := f.srv.Config.Handler

	newHandler := func(up *rest.Config) http.Handler {
		h, err := newProxy(options{
			NodeName:      "node-a",
			Drivers:       testDrivers(),
			Authenticator: must(authn.NewForConfig(f.config(), authn.Options{Audiences: []string{testAudience}})),
			SAR:           must(authz.NewForConfig(f.config(), authz.Options{})),
			Upstream:      up, // the real clock: each request's deadline, as in production
		})
		if err != nil {
			b.Fatal(err)
		}
		return h
	}
	// draproxy in process, its upstream the fake API server's handler.
	inProcess := newHandler(&rest.Config{Host: "https://fake.invalid", BearerToken: f.proxyToken, Transport: handlerTransport{upstream}})
	// draproxy on a Unix socket, as main serves it, its upstream the fake
	// API server over TLS.
	sock := filepath.Join(shortDir(b), "d.sock")
	serveUnix(b, newHandler(f.config()), sock)

	clientset := func(cfg *rest.Config) *kubernetes.Clientset {
		cfg.QPS = -1
		cfg.Timeout = 0
		cfg.ContentType = "application/json"
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return cs
	}
	directInProcess := clientset(&rest.Config{Host: "https://fake.invalid", BearerToken: f.proxyToken, Transport: handlerTransport{upstream}})
	proxyInProcess := clientset(&rest.Config{Host: "http://localhost", BearerToken: token, Transport: handlerTransport{inProcess}})
	directSocket := clientset(f.config())
	proxySocket := clientset(unixConfig(sock, token))

	get := func(b *testing.B, cs *kubernetes.Clientset) {
		s, err := cs.ResourceV1().ResourceSlices().Get(b.Context(), "a-1", metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if s.Name != "a-1" || s.Spec.NodeName == nil || *s.Spec.NodeName != "node-a" {
			b.Fatalf("got slice %q of node %v; want a-1 of node-a", s.Name, s.Spec.NodeName)
		}
	}

	// watchEvent is the mean delay from storing a slice of node to cs's
	// watch of node's slices delivering its event, over watchEvents
	// events; with also (another client's watch of another node), the
	// same for also's watch, its events stored in turn with cs's, so that
	// drift in the machine's load affects both alike.
	watchEvent := func(b *testing.B, cs *kubernetes.Clientset, node string, also *kubernetes.Clientset, alsoNode string) (mean, alsoMean float64) {
		open := func(cs *kubernetes.Clientset, node string) watch.Interface {
			w, err := cs.ResourceV1().ResourceSlices().Watch(b.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
			if err != nil {
				b.Fatal(err)
			}
			return w
		}
		event := func(w watch.Interface, node string) time.Duration {
			start := time.Now()
			f.addSlice("bench-"+node, node)
			select {
			case ev, ok := <-w.ResultChan():
				d := time.Since(start)
				if s, isSlice := ev.Object.(*resourcev1.ResourceSlice); !ok || ev.Type != watch.Added || !isSlice || s.Name != "bench-"+node {
					b.Fatalf("watch event %v %v; want ADDED of slice bench-%s", ev.Type, ev.Object, node)
				}
				return d
			case <-time.After(10 * time.Second):
				b.Fatal("no watch event within 10s")
			}
			return 0
		}
		w := open(cs, node)
		defer w.Stop()
		event(w, node) // warm
		var aw watch.Interface
		if also != nil {
			aw = open(also, alsoNode)
			defer aw.Stop()
			event(aw, alsoNode)
		}
		var total, alsoTotal time.Duration
		for range watchEvents {
			total += event(w, node)
			if aw != nil {
				alsoTotal += event(aw, alsoNode)
			}
		}
		return float64(total) / watchEvents, float64(alsoTotal) / watchEvents
	}

	var middleware []figures // one per run of middleware (-count): what it adds
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
		added := figures{ns: float64(with-without) / float64(b.N), cpu: float64(withCPU-withoutCPU) / float64(b.N)}
		middleware = append(middleware, added)
		b.ReportMetric(float64(with)/float64(b.N), "reviewauth-ns/op")
		b.ReportMetric(added.ns, "added-ns/op")
		b.ReportMetric(added.cpu, "added-cpu-ns/op")
	})

	// getLoop runs the benchmark loop of cs's gets on a locked thread and
	// returns one get's wall time, thread CPU time, allocations and bytes.
	getLoop := func(b *testing.B, cs *kubernetes.Clientset) (wall, cpu, allocs, bytes float64) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		get(b, cs) // warm: the reviews, the slice's node
		get(b, cs)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		b.ReportAllocs()
		c := threadCPU()
		for b.Loop() {
			get(b, cs)
		}
		c = threadCPU() - c
		runtime.ReadMemStats(&after)
		n := float64(b.N)
		wall, cpu = float64(b.Elapsed())/n, float64(c)/n
		allocs, bytes = float64(after.Mallocs-before.Mallocs)/n, float64(after.TotalAlloc-before.TotalAlloc)/n
		b.ReportMetric(cpu, "cpu-ns/op")
		return wall, cpu, allocs, bytes
	}

	var direct []figures // one per run of direct (-count)
	b.Run("direct", func(b *testing.B) {
		var d figures
		d.ns, d.cpu, d.allocs, d.bytes = getLoop(b, directInProcess)
		direct = append(direct, d)
		directWatch, _ := watchEvent(b, directSocket, "node-a", nil, "")
		b.ReportMetric(directWatch, "watch-event-ns")
	})

	b.Run("proxy", func(b *testing.B) {
		// Once warm, once recorded: the get reaches the fake API server
		// as the node, impersonated with draproxy's own token.
		get(b, proxyInProcess)
		f.noRecord.Store(false)
		f.seen()
		get(b, proxyInProcess)
		f.noRecord.Store(true)
		if s := f.seen(); len(s) != 1 || s[0].Header.Get("Impersonate-User") != "system:node:node-a" || s[0].Header.Get("Authorization") != "Bearer "+f.proxyToken {
			b.Fatalf("the fake API server saw %+v; want one get impersonating system:node:node-a with draproxy's token", s)
		}
		ns, cpu, allocs, bytes := getLoop(b, proxyInProcess)
		if len(direct) > 0 { // not with -bench 'DRAProxy/proxy$' alone
			d := medianOf(direct)
			added, addedCPU := ns-d.ns, cpu-d.cpu
			b.ReportMetric(added, "added-ns/op")
			b.ReportMetric(addedCPU, "added-cpu-ns/op")
			b.ReportMetric(allocs-d.allocs, "added-allocs/op")
			b.ReportMetric(bytes-d.bytes, "added-B/op")
			if len(middleware) > 0 {
				m := medianOf(middleware)
				b.ReportMetric(added/m.ns, "x-middleware")
				b.ReportMetric(addedCPU/m.cpu, "x-middleware-cpu")
			}
		}
		// The proxied watch of node-a's slices and a direct watch of
		// node-b's, their events in turn.
		w, dw := watchEvent(b, proxySocket, "node-a", directSocket, "node-b")
		b.ReportMetric(w, "watch-event-ns")
		b.ReportMetric(dw, "watch-event-direct-ns")
		b.ReportMetric(w-dw, "watch-event-added-ns")
	})

	b.Run("hop", func(b *testing.B) {
		timed := func(cs *kubernetes.Clientset) time.Duration {
			start := time.Now()
			get(b, cs)
			return time.Since(start)
		}
		timed(directSocket) // warm: connections
		timed(proxySocket)
		var d, p time.Duration
		for b.Loop() {
			d += timed(directSocket)
			p += timed(proxySocket)
		}
		n := float64(b.N)
		b.ReportMetric(float64(d)/n, "direct-ns/op")
		b.ReportMetric(float64(p)/n, "proxy-ns/op")
		b.ReportMetric(float64(p-d)/n, "added-ns/op")
	})

	b.Run("interleaved", func(b *testing.B) {
		serve := func(h http.Handler, auth string) time.Duration {
			r := httptest.NewRequest(http.MethodGet, "/apis/resource.k8s.io/v1/resourceslices/a-1", nil)
			r.Header.Set("Authorization", auth)
			w := httptest.NewRecorder()
			cpu := threadCPU()
			h.ServeHTTP(w, r)
			c := threadCPU() - cpu
			if w.Code != http.StatusOK {
				b.Fatalf("code %d (%s); want 200", w.Code, w.Body)
			}
			return c
		}
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
		serve(inProcess, "Bearer "+token)
		serve(ours, "Bearer "+token)
		var dCPU, pCPU, mCPU, bCPU time.Duration
		b.ReportAllocs()
		for b.Loop() {
			dCPU += serve(upstream, "Bearer "+f.proxyToken)
			pCPU += serve(inProcess, "Bearer "+token)
			mCPU += serve(ours, "Bearer "+token)
			bCPU += serve(bare, "Bearer "+token)
		}
		n := float64(b.N)
		addedCPU := float64(pCPU-dCPU) / n
		mwCPU := float64(mCPU-bCPU) / n
		b.ReportMetric(addedCPU, "added-cpu-ns/op")
		b.ReportMetric(mwCPU, "middleware-added-cpu-ns/op")
		if mwCPU > 0 {
			b.ReportMetric(addedCPU/mwCPU, "x-middleware-cpu-interleaved")
		}
	})
}

// figures are one run's per-operation figures.
type figures struct{ ns, cpu, allocs, bytes float64 }

// medianOf is the median of each figure over runs, not empty.
func medianOf(runs []figures) figures {
	median := func(get func(figures) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = get(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return figures{
		ns:     median(func(f figures) float64 { return f.ns }),
		cpu:    median(func(f figures) float64 { return f.cpu }),
		allocs: median(func(f figures) float64 { return f.allocs }),
		bytes:  median(func(f figures) float64 { return f.bytes }),
	}
}

// serveUnix serves handler on a Unix socket at path as main does (h2c and
// HTTP/1.1) until the benchmark ends.
func serveUnix(b testing.TB, handler http.Handler, path string) {
	ln, remove, err := listenUnix(path, -1)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := serving.NewHTTPServer(handler, serving.ServerOptions{UnencryptedHTTP2: true, CancelOnShutdown: true})
	if err != nil {
		ln.Close()
		remove()
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
		remove()
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
// with a nil Body (client-go's gets, in direct and in proxy alike) gets
// http.NoBody, as a server's handler would, on a shallow copy: a deep
// clone (every header value) would charge the caller with work that no
// real transport does. draproxy forwards http.NoBody itself, which real
// transports treat as nil.
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
