// Command fleet estimates what running a node agent's delegated auth on
// every node of a fleet costs the Kubernetes API server: TokenReviews/s and
// SubjectAccessReviews/s, in steady state and at the peak after every agent
// restarts at once (a cold herd across the fleet), for reviewauth and for
// the configurations users run today.
//
// It runs the real code, not a model of it: per simulated node, one
// reviewauth Authenticator and Authorizer built as the examples build them
// (or the k8s.io/apiserver delegated authenticator and authorizer of the
// configuration compared), all against one authtest API server, on a fake
// clock the simulator advances from event to event, so that an hour of fleet
// time runs in minutes.
//
// Workload: N nodes × M callers per node. Each caller is a pod with a
// projected service-account token (pod- and node-bound, with a credential
// ID of its own, as a real API server issues them) for the agent's audience,
// valid for the token lifetime and rotated by the kubelet at 80% of it; a
// fraction of the pods is replaced each hour (new pod, new token). Each
// caller sends a request every interval (± jitter, or exponential intervals
// with -poisson): authenticate its token, then authorize get nodes/metrics
// on the node.
//
// Sampling: the fleet's nodes are independent (each agent has its own
// caches; only the API server is shared), so the simulator runs -sample
// nodes in full and scales their review counts by nodes/sample. Steady-state
// means are exact in expectation; the one-second peak is a maximum over
// sample counts, so its sampling noise is scaled up too (about
// 1/sqrt(sample × callers) relative). Reviews in flight are estimated by
// Little's law, peak reviews/s × -latency (an assumed API-server latency),
// since the simulation itself runs one request at a time on a fake clock.
//
// Usage:
//
//	go run . [-nodes 5000] [-sample 50] [-callers 10] [-interval 10s] [-png fleet.png]
//	         [-sweep 1s,5s,10s,30s,60s] [-sweep-png fleet-sweep.png]
//
// Besides the main run, the report has what revocation within 2 s costs,
// by a revoker (its watches, modelled, and its flushes, simulated) or by
// 2 s TTLs (revocation.go), a model of the restart storm against the API
// server's concurrency limit (storm.go), and a sweep of the steady state
// over request intervals (sweep.go).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
)

func main() {
	if err := mainErr(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func mainErr(args []string, out io.Writer) error {
	p := defaultParams()
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.IntVar(&p.Nodes, "nodes", p.Nodes, "nodes in the fleet")
	fs.IntVar(&p.Sample, "sample", p.Sample, "nodes simulated in full; their counts are scaled by nodes/sample")
	fs.IntVar(&p.Callers, "callers", p.Callers, "callers per node, each with its own pod and token")
	fs.DurationVar(&p.Interval, "interval", p.Interval, "mean time between two requests of one caller (scrape or RPC)")
	fs.Float64Var(&p.Jitter, "jitter", p.Jitter, "each interval is interval × (1 ± jitter), uniform")
	fs.BoolVar(&p.Poisson, "poisson", p.Poisson, "exponential intervals (Poisson arrivals) instead of jittered periodic ones")
	fs.IntVar(&p.Burst, "burst", p.Burst, "concurrent identical calls per request, with the same token")
	fs.DurationVar(&p.TokenLifetime, "token-lifetime", p.TokenLifetime, "projected token lifetime")
	fs.Float64Var(&p.ChurnPerHour, "churn", p.ChurnPerHour, "fraction of pods replaced per hour")
	fs.DurationVar(&p.Duration, "duration", p.Duration, "simulated time")
	fs.DurationVar(&p.StartSpread, "start-spread", p.StartSpread, "agents first start at uniformly random times in [0, start-spread), as in a fleet that has been running")
	fs.DurationVar(&p.Warmup, "warmup", p.Warmup, "the steady-state window starts here")
	fs.DurationVar(&p.RestartAt, "restart-at", p.RestartAt, "every agent restarts, cold, at this time (0: never); the steady-state window ends here")
	fs.DurationVar(&p.RestartSpread, "restart-spread", p.RestartSpread, "after the restart each caller's next request is uniform in this window, e.g. 1s for clients that reconnect at once (0: callers keep their schedule)")
	fs.DurationVar(&p.PeakWindow, "peak-window", p.PeakWindow, "the restart peak is the busiest window of this width after the restart, per second (at most the shortest interval)")
	fs.DurationVar(&p.Latency, "latency", p.Latency, "assumed API-server latency of one review, for the in-flight estimate")
	fs.Uint64Var(&p.Seed, "seed", p.Seed, "random seed of the workload")
	fs.Float64Var(&p.RBACFlushesPerHour, "rbac-flushes-per-hour", p.RBACFlushesPerHour, "with a revoker: RBAC changes per hour that flush every cached decision of every agent (twice, 1s apart)")
	revokerWatch := fs.String("revoker-watch", strings.Join(p.Watch.Resources, ","), "the revoker's --revocation-watch, for the watch model")
	fs.IntVar(&p.Watch.PodsPerNode, "pods-per-node", p.Watch.PodsPerNode, "watch model: pods on a node, replaced at -churn")
	fs.Float64Var(&p.Watch.PodEvents, "pod-events", p.Watch.PodEvents, "watch model: events of one pod's life on a spec.nodeName watch")
	fs.Float64Var(&p.Watch.NodeEventsPerHour, "node-events-per-hour", p.Watch.NodeEventsPerHour, "watch model: updates of a Node object per hour")
	fs.IntVar(&p.Watch.RBACObjects, "rbac-objects", p.Watch.RBACObjects, "watch model: RBAC objects the revoker lists at a start")
	fs.Float64Var(&p.Watch.RBACChangesPerHour, "rbac-changes-per-hour", p.Watch.RBACChangesPerHour, "watch model: changes to those RBAC objects per hour")
	names := fs.String("configs", "", "comma-separated configurations to run (default all): "+configNames())
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "configurations simulated at once")
	png := fs.String("png", "", "write a plot of fleet reviews/s over time to this PNG file")
	sweep := fs.String("sweep", "1s,5s,10s,30s,60s", "comma-separated request intervals at which to run the steady state again (no restart), for the ratio by interval; empty: none")
	sweepSample := fs.Int("sweep-sample", 10, "nodes simulated in full in each run of the sweep")
	sweepNames := fs.String("sweep-configs", "reviewauth,apiserver,kubelet", "configurations of the sweep")
	sweepPNG := fs.String("sweep-png", "", "write a plot of the sweep's ratios to this PNG file")
	limit := apiLimit{Latency: p.Latency}
	fs.IntVar(&limit.Seats, "apiserver-seats", 245, "the API server's seats for the agents' reviews (APF: workload-low's share of 600), for the restart storm model")
	fs.IntVar(&limit.Queue, "apiserver-queue", 300, "reviews the API server queues for a seat (APF: 6 queues × 50 of one flow), for the restart storm model")
	if err := fs.Parse(args); err != nil {
		return err
	}
	limit.Latency = p.Latency
	p.Watch.Resources = strings.Split(*revokerWatch, ",")
	cfgs, err := parseConfigs(*names)
	if err != nil {
		return err
	}
	sweepCfgs, err := parseConfigs(*sweepNames)
	if err != nil {
		return err
	}
	intervals, err := parseIntervals(*sweep)
	if err != nil {
		return err
	}
	if err := p.validate(); err != nil {
		return err
	}
	if limit.Seats < 1 || limit.Queue < 0 {
		return fmt.Errorf("need -apiserver-seats >= 1 and -apiserver-queue >= 0")
	}
	start := time.Now()
	results, err := runAll(p, cfgs, *parallel)
	if err != nil {
		return err
	}
	writeReport(out, p, results, time.Since(start))
	if *png != "" {
		if err := writePlot(*png, p, results); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nplot: %s\n", *png)
	}
	writeRevocation(out, p, results)
	if p.RestartAt > 0 {
		writeStorm(out, p, limit)
	}
	if len(intervals) > 0 {
		start := time.Now()
		rows, err := runSweep(p, intervals, *sweepSample, sweepCfgs, *parallel)
		if err != nil {
			return err
		}
		writeSweep(out, p, rows, *sweepSample)
		fmt.Fprintf(out, "\nSweep wall time %v.\n", time.Since(start).Round(time.Second))
		if *sweepPNG != "" {
			if err := writeSweepPlot(*sweepPNG, rows); err != nil {
				return err
			}
			fmt.Fprintf(out, "\nplot: %s\n", *sweepPNG)
		}
	}
	return nil
}

// parseConfigs returns the configurations named in a comma-separated list,
// or all of them for "".
func parseConfigs(names string) ([]config, error) {
	if names == "" {
		return configs, nil
	}
	var cfgs []config
	for _, n := range strings.Split(names, ",") {
		c, ok := configNamed(strings.TrimSpace(n))
		if !ok {
			return nil, fmt.Errorf("unknown configuration %q (known: %s)", n, configNames())
		}
		cfgs = append(cfgs, c)
	}
	return cfgs, nil
}

// parseIntervals parses the sweep's comma-separated intervals, in
// increasing order.
func parseIntervals(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < time.Second {
			return nil, fmt.Errorf("-sweep: %q is not an interval of at least 1s", f)
		}
		if len(out) > 0 && d <= out[len(out)-1] {
			return nil, fmt.Errorf("-sweep: intervals must increase (%v after %v)", d, out[len(out)-1])
		}
		out = append(out, d)
	}
	return out, nil
}

func configNames() string {
	var n []string
	for _, c := range configs {
		n = append(n, c.name)
	}
	return strings.Join(n, ", ")
}

// runAll simulates every configuration, parallel at a time, and returns the
// results in the order of cfgs.
func runAll(p params, cfgs []config, parallel int) ([]*result, error) {
	results := make([]*result, len(cfgs))
	errs := make([]error, len(cfgs))
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = run(p, c)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return results, nil
}

// writeReport prints the parameters and the table.
func writeReport(w io.Writer, p params, results []*result, wall time.Duration) {
	fmt.Fprintf(w, "Fleet: %d nodes × %d callers; %d nodes simulated in full, counts scaled ×%.0f.\n", p.Nodes, p.Callers, p.Sample, p.scale())
	arrivals := fmt.Sprintf("every %v ± %.0f%%", p.Interval, p.Jitter*100)
	if p.Poisson {
		arrivals = fmt.Sprintf("Poisson, mean interval %v", p.Interval)
	}
	fmt.Fprintf(w, "Workload: each caller requests %s (burst %d); tokens live %v, rotated at %.0f%%; %.0f%% of pods replaced per hour.\n",
		arrivals, p.Burst, p.TokenLifetime, p.RotateAt*100, p.ChurnPerHour*100)
	fmt.Fprintf(w, "Simulated %v: agents first start at random times in [0, %v); steady state is the mean over [%v, %v)", p.Duration, p.StartSpread, p.Warmup, p.steadyEnd())
	if p.RestartAt > 0 {
		spread := "callers keep their schedule"
		if p.RestartSpread > 0 {
			spread = fmt.Sprintf("callers' next requests spread over %v", p.RestartSpread)
		}
		fmt.Fprintf(w, "; every agent restarts cold at %v (%s); peak = the busiest %ds after it, per second", p.RestartAt, spread, p.peakWindow())
	}
	fmt.Fprintf(w, ".\nIn flight at the peak: peak reviews/s × %v assumed API-server latency (Little's law), to compare with the API server's limit (see the storm model below). Wall time %v.\n\n", p.Latency, wall.Round(time.Second))

	var base float64
	for _, r := range results {
		if r.config.name == "apiserver" {
			tr, sar := r.steady()
			base = tr + sar
		}
	}
	fmt.Fprintln(w, "| configuration | TokenReviews/s per node | SARs/s per node | reviews/s per node | fleet reviews/s | vs apiserver | restart peak, fleet TokenReviews/s | SARs/s | in flight at peak |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		tr, sar := r.steady()
		ptr, psar, _ := r.peak()
		ratio := "n/a"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f×", (tr+sar)/base)
		}
		fmt.Fprintf(w, "| %s | %.3g | %.3g | %.3g | %.0f | %s | %.0f | %.0f | %.0f |\n",
			r.config.name, tr, sar, tr+sar, (tr+sar)*float64(p.Nodes), ratio, ptr, psar, r.inFlight())
	}
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "- %s: %s. %d requests simulated, %d refused, %v.\n", r.config.name, r.config.about, r.requests, r.refused, r.wall.Round(time.Second))
	}
}
