package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// smallParams is a fleet small enough for a unit test: 2 nodes of 5
// callers, 6 simulated minutes, no churn.
func smallParams() params {
	p := defaultParams()
	p.Sample, p.Callers = 2, 5
	p.ChurnPerHour = 0
	p.Duration, p.StartSpread, p.Warmup, p.RestartAt = 6*time.Minute, 30*time.Second, 90*time.Second, 4*time.Minute
	return p
}

func mustRun(t testing.TB, p params, name string) *result {
	t.Helper()
	c, ok := configNamed(name)
	if !ok {
		t.Fatalf("no configuration %q", name)
	}
	r, err := run(p, c)
	if err != nil {
		t.Fatalf("run(%s) = %v", name, err)
	}
	if r.refused != 0 || r.requests == 0 {
		t.Fatalf("%s: %d of %d requests refused; want all allowed", name, r.refused, r.requests)
	}
	return r
}

// TestSteadyStateFollowsTTLs: in steady state each caller costs one review
// of each kind per cache lifetime, plus the wait for its next request: the
// count reflects the configuration's TTLs, so the simulator runs each
// configuration's own caches on the simulated clock.
func TestSteadyStateFollowsTTLs(t *testing.T) {
	t.Parallel()
	p := smallParams()
	callers := float64(p.Callers)
	minI := p.Interval.Seconds() * (1 - p.Jitter)
	maxI := p.Interval.Seconds() * (1 + p.Jitter)
	tests := []struct {
		config             string
		tokenTTL, allowTTL float64 // seconds
	}{
		{"reviewauth", 60, 60},
		{"apiserver", 10, 10},
		{"kubelet", 120, 300},
	}
	for _, tt := range tests {
		t.Run(tt.config, func(t *testing.T) {
			t.Parallel()
			r := mustRun(t, p, tt.config)
			tr, sar := r.steady()
			check := func(kind string, got, ttl float64) {
				// A review, then hits until the first request at or after
				// the TTL: one review per TTL rounded up to whole intervals.
				lo, hi := callers/(ttl+maxI), callers/max(ttl, minI)
				if ttl > p.Warmup.Seconds()-p.StartSpread.Seconds() {
					lo = 0 // the window is shorter than the TTL: nothing to bound from below
				}
				if got < lo*0.8 || got > hi*1.2 {
					t.Errorf("%s: %s/s per node = %.3f; want within [%.3f, %.3f] (TTL %vs, intervals %.0f-%.0fs)", tt.config, kind, got, lo, hi, ttl, minI, maxI)
				}
			}
			check("TokenReviews", tr, tt.tokenTTL)
			check("SARs", sar, tt.allowTTL)
		})
	}
}

// TestRestartCostsOneReviewPerCaller: when every agent restarts cold and
// callers keep their schedule, each caller's next request misses both
// caches once: one TokenReview and one SAR per caller within one interval,
// and the peak and in-flight figures follow from it.
func TestRestartCostsOneReviewPerCaller(t *testing.T) {
	t.Parallel()
	p := smallParams()
	r := mustRun(t, p, "reviewauth")
	from := int(p.RestartAt / time.Second)
	to := from + int(p.Interval.Seconds()*(1+p.Jitter)) + 1
	var tr, sar int
	for s := from; s < to; s++ {
		tr += r.tr[s]
		sar += r.sar[s]
	}
	callers := p.Sample * p.Callers
	if tr < callers || tr > callers+1 || sar < callers || sar > callers+1 {
		t.Errorf("reviews in the %ds after the restart = %d TokenReviews, %d SARs; want %d of each (one per caller, +1 for a rotation)", to-from, tr, sar, callers)
	}
	ptr, psar, both := r.peak()
	if ptr <= 0 || psar <= 0 || both < ptr || both < psar {
		t.Errorf("peak() = (%v, %v, %v); want positive, and both at least each", ptr, psar, both)
	}
	if got, want := r.inFlight(), both*p.Latency.Seconds(); got != want {
		t.Errorf("inFlight() = %v; want peak × latency = %v", got, want)
	}
}

// TestRestartSpreadSynchronizesTheHerd: with -restart-spread, every caller
// sends its next request within that window, so the peak is higher.
func TestRestartSpreadSynchronizesTheHerd(t *testing.T) {
	t.Parallel()
	p := smallParams()
	p.PeakWindow = time.Second
	spread := p
	spread.RestartSpread = time.Second
	_, _, kept := mustRun(t, p, "reviewauth").peak()
	_, _, synced := mustRun(t, spread, "reviewauth").peak()
	callers := float64(p.Sample*p.Callers) * p.scale()
	if synced < 2*callers*0.99 {
		t.Errorf("peak with a 1s restart spread = %.0f reviews/s; want every caller's TokenReview and SAR in one second (%.0f)", synced, 2*callers)
	}
	if synced <= kept {
		t.Errorf("peak with a 1s restart spread = %.0f; want above the peak with kept schedules (%.0f)", synced, kept)
	}
}

// TestReport runs the command on a tiny fleet and checks the table and the
// plot it writes.
func TestReport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pngPath := filepath.Join(dir, "fleet.png")
	sweepPath := filepath.Join(dir, "fleet-sweep.png")
	var out bytes.Buffer
	err := mainErr([]string{"-sample", "1", "-callers", "3", "-duration", "3m", "-start-spread", "10s", "-warmup", "1m", "-restart-at", "2m",
		"-configs", "reviewauth,apiserver", "-png", pngPath,
		"-sweep", "1s,10s", "-sweep-sample", "1", "-sweep-configs", "reviewauth,apiserver", "-sweep-png", sweepPath}, &out)
	if err != nil {
		t.Fatalf("mainErr() = %v\n%s", err, out.String())
	}
	for _, want := range []string{"| configuration |", "| reviewauth |", "| apiserver |", "counts scaled ×5000", "1.00×",
		// The storm model, with the API server's limits as k8s.io/apiserver
		// v0.37.2 sets them: 400 non-mutating, 200 mutating (reviews).
		"## Restart storm", "--max-requests-inflight=400 bounds non-mutating requests", "--max-mutating-requests-inflight=200 mutating ones (reviews are creates: 200 applies)",
		"| 1s | 30000 | 30000 | 0 | 0 | 0 | 0s | 1 |",
		"## Steady state by request interval", "| 10s |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	for _, path := range []string{pngPath, sweepPath} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("png.Decode(%s) = %v", path, err)
		}
		if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 400 {
			t.Errorf("plot %s is %v; want at least 800×400", path, b)
		}
	}
}

func TestParamsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*params)
		ok   bool
	}{
		{"defaults", func(*params) {}, true},
		{"sample = nodes", func(p *params) { p.Sample = p.Nodes }, true},
		{"sample > nodes", func(p *params) { p.Sample = p.Nodes + 1 }, false},
		{"no callers", func(p *params) { p.Callers = 0 }, false},
		{"jitter 1", func(p *params) { p.Jitter = 1 }, false},
		{"warmup after restart", func(p *params) { p.Warmup = p.RestartAt }, false},
		{"start spread after warmup", func(p *params) { p.StartSpread = p.Warmup + time.Second }, false},
		{"restart at the end", func(p *params) { p.RestartAt = p.Duration }, false},
		{"peak window under 1s", func(p *params) { p.PeakWindow = time.Second - 1 }, false},
	}
	for _, tt := range tests {
		p := defaultParams()
		tt.edit(&p)
		if err := p.validate(); (err == nil) != tt.ok {
			t.Errorf("%s: validate() = %v; want ok %v", tt.name, err, tt.ok)
		}
	}
}

// benchParams is the shortened run of the default simulation that
// BenchmarkFleet measures: 5 of 5,000 nodes, 8 simulated minutes, no
// restart, steady state over the last 5.
func benchParams() params {
	p := defaultParams()
	p.Sample = 5
	p.Duration, p.StartSpread, p.Warmup, p.RestartAt = 8*time.Minute, 2*time.Minute, 3*time.Minute, 0
	return p
}

// BenchmarkFleet reports what one node costs the API server in steady
// state, in reviews (TokenReviews plus SubjectAccessReviews) per second, for
// reviewauth and for k8s.io/apiserver's delegated defaults, from a
// shortened run of the fleet simulation (benchParams). ns/op is the wall
// time of one run.
func BenchmarkFleet(b *testing.B) {
	p := benchParams()
	for _, name := range []string{"reviewauth", "apiserver"} {
		b.Run(name, func(b *testing.B) {
			var r *result
			for b.Loop() {
				r = mustRun(b, p, name)
			}
			tr, sar := r.steady()
			b.ReportMetric(tr+sar, "reviews/node/s")
			b.ReportMetric(tr, "tokenreviews/node/s")
			b.ReportMetric(sar, "sars/node/s")
		})
	}
}

// TestPeakWindow: the restart peak is averaged over PeakWindow, but never
// over more than the shortest interval, within which a cold fleet's callers
// all miss once.
func TestPeakWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		interval, window time.Duration
		jitter           float64
		poisson          bool
		want             int
	}{
		{10 * time.Second, 5 * time.Second, 0.1, false, 5},
		{5 * time.Second, 5 * time.Second, 0.1, false, 4},
		{5 * time.Second, 5 * time.Second, 0, false, 5},
		{time.Second, 5 * time.Second, 0.1, false, 1},
		{time.Second, 5 * time.Second, 0.1, true, 5},
	}
	for _, tt := range tests {
		p := defaultParams()
		p.Interval, p.PeakWindow, p.Jitter, p.Poisson = tt.interval, tt.window, tt.jitter, tt.poisson
		if got := p.peakWindow(); got != tt.want {
			t.Errorf("peakWindow(interval %v ± %v, window %v, poisson %v) = %ds; want %ds", tt.interval, tt.jitter, tt.window, tt.poisson, got, tt.want)
		}
	}
}
