package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/reviewauth/reviewauth/internal/reliability"
)

// row is what one attack on one server measured.
type row struct {
	server, attack  string
	attackers       int
	sources         int
	newConn, kept   reliability.Summary
	cpu             float64 // share of one core over the window
	peakRSS         int64
	peakFDs         int64
	baseRSS         int64
	baseFDs         int
	attackerConns   int64 // connections the attackers opened during the row
	attackerStreams int64
	attackerSent    int64
	load            string
	ramp            time.Duration
}

// perProcess bounds the attackers of one attack process (each holds a
// file per attacker, under the same open-file limit as the servers).
const perProcess = 6000

// readyTimeout bounds the wait for every attacker's first attempt.
const readyTimeout = 60 * time.Second

// measure runs one row: a fresh server process, its legitimate clients,
// then n attackers of kind k from sources addresses.
func (e *env) measure(ctx context.Context, s *server, k *kind, n, sources int) (row, error) {
	r := row{server: s.name, attack: k.title, attackers: n, sources: sources}
	p, err := s.start(e)
	if err != nil {
		return r, err
	}
	defer p.stop()
	newCall, keptCall, closeClients, err := e.clients(s, p.addr)
	if err != nil {
		return r, err
	}
	defer closeClients()
	// Both clients work before the attack.
	warm, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, call := range []func(context.Context) error{newCall, keptCall} {
		for {
			cctx, ccancel := context.WithTimeout(warm, reliability.CallTimeout)
			err := call(cctx)
			ccancel()
			if err == nil {
				break
			}
			if warm.Err() != nil {
				return r, fmt.Errorf("the legitimate client before the attack: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	pid := p.pid()
	r.baseFDs, _ = reliability.OpenFiles(pid)
	r.baseRSS, _ = reliability.ResidentBytes(pid)
	fds := reliability.Sample(func() int64 { n, _ := reliability.OpenFiles(pid); return int64(n) })
	rss := reliability.Sample(func() int64 { n, _ := reliability.ResidentBytes(pid); return n })

	// The kept-alive client calls from before the attack to the window's
	// end; only the window's calls count.
	keptCtx, keptStop := context.WithCancel(ctx)
	keptDone := make(chan *reliability.Tries, 1)
	go func() { keptDone <- reliability.Every(keptCtx, e.p.interval, reliability.CallTimeout, keptCall) }()

	start := time.Now()
	var attackers []*reliability.Attacker
	finish := func() {
		for _, a := range attackers {
			res, err := a.Finish()
			if err != nil {
				fmt.Fprintf(os.Stderr, "flood: %s/%s: %v\n", s.name, k.name, err)
			}
			r.attackerConns += res.Conns
			r.attackerStreams += res.Streams
			r.attackerSent += res.Sent
		}
		attackers = nil
	}
	defer finish()
	spec := e.spec(s, k, p.addr)
	spec.Sources = sources
	for left := n; left > 0; left -= perProcess {
		spec.N = min(left, perProcess)
		a, err := reliability.Spawn(spec)
		if err != nil {
			keptStop()
			<-keptDone
			return r, err
		}
		attackers = append(attackers, a)
	}
	deadline := time.After(readyTimeout)
	for _, a := range attackers {
		select {
		case <-a.Ready():
		case <-deadline:
		case <-ctx.Done():
		}
	}
	// The attackers made their first attempts: let the server settle into
	// the attack, past its timeouts.
	time.Sleep(e.p.settle)
	r.ramp = time.Since(start).Round(100 * time.Millisecond)

	windowStart := time.Now()
	cpu0 := cpuTicks(pid)
	wctx, wcancel := context.WithTimeout(ctx, e.p.window)
	newTries := reliability.Every(wctx, e.p.interval, reliability.CallTimeout, newCall)
	wcancel()
	cpu1 := cpuTicks(pid)
	elapsed := time.Since(windowStart)
	keptStop()
	kept := <-keptDone
	kept.Since(windowStart)
	r.load = loadavg()
	finish()
	r.peakFDs, r.peakRSS = fds.Stop(), rss.Stop()
	r.newConn, r.kept = newTries.Summary(reliability.Bound), kept.Summary(reliability.Bound)
	r.cpu = float64(cpu1-cpu0) / clockTicks / elapsed.Seconds()
	if e.p.verbose {
		fmt.Fprintf(os.Stderr, "flood: %s, %s, %d attackers from %d sources (ramp %v):\n  new: %v\n  kept: %v\n  attackers: %d conns, %d streams, %d sent\n",
			s.name, k.title, n, sources, r.ramp, r.newConn, r.kept, r.attackerConns, r.attackerStreams, r.attackerSent)
	}
	return r, nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times.
const clockTicks = 100

// cpuTicks is the user and system time of pid, in clock ticks.
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return utime + stime
}

// tableHeader starts the table.
func tableHeader(e *env, budget int) string {
	var b strings.Builder
	limit := fileLimit()
	if e.p.nofile > 0 {
		limit = fmt.Sprintf("%d/%d for every server, peers included (-nofile); %s for the attackers", e.p.nofile, e.p.nofile, limit)
	}
	cpus := ""
	if e.p.cpus > 0 {
		cpus = fmt.Sprintf("; every server limited to %v of a core, each in a cgroup of its own (-cpus)", e.p.cpus)
	}
	fmt.Fprintf(&b, "\nflood: %s; load average %s at start; default connection budget %d (open-file limit %s)%s; certificate %s; window %v after %v of attack, a call every %v per client\n\n",
		machine(), loadavg(), budget, limit, cpus, e.p.key, e.p.window, e.p.settle, e.p.interval)
	b.WriteString("| server | attack | attackers | sources | new within 1 s | new p50 / p95 | kept-alive within 1 s | kept p50 / p95 | server CPU | RSS peak (before) | fds peak (before) | attacker conns | load |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	return b.String()
}

func (r row) markdown() string {
	src := "same"
	if r.sources > 1 {
		src = strconv.Itoa(r.sources)
	}
	return fmt.Sprintf("| %s | %s | %d | %s | %s | %s | %s | %s | %.0f%% | %d MiB (%d) | %d (%d) | %d | %s |\n",
		r.server, r.attack, r.attackers, src, share(r.newConn), pct(r.newConn), share(r.kept), pct(r.kept),
		100*r.cpu, r.peakRSS>>20, r.baseRSS>>20, r.peakFDs, r.baseFDs, r.attackerConns, r.load)
}

func share(s reliability.Summary) string {
	return fmt.Sprintf("%.0f%% (%d/%d)", 100*s.Fraction(), s.Within, s.Tries)
}

func pct(s reliability.Summary) string {
	return fmt.Sprintf("%s / %s", ms(s.P50), ms(s.P95))
}

func ms(d time.Duration) string {
	if d >= time.Hour {
		return "failed"
	}
	if d >= time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

// tableFooter says which rows miss the goals.
func tableFooter(rows []row) string {
	var b strings.Builder
	b.WriteString("\n")
	for _, r := range rows {
		if r.server != "rbacproxy" && r.server != "snapshotmetadata" {
			continue
		}
		var miss []string
		if r.newConn.Fraction() < reliability.NewGoal {
			miss = append(miss, "new "+share(r.newConn))
		}
		if r.kept.Fraction() < reliability.ExistingGoal {
			miss = append(miss, "kept-alive "+share(r.kept))
		}
		if len(miss) > 0 {
			fmt.Fprintf(&b, "goal missed: %s, %s, %d attackers, sources %d: %s\n", r.server, r.attack, r.attackers, r.sources, strings.Join(miss, ", "))
		}
	}
	return b.String()
}

// fileLimit is this process's open-file limit, soft/hard.
func fileLimit() string {
	b, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Max open files") {
			f := strings.Fields(line)
			if len(f) >= 5 {
				return f[3] + "/" + f[4]
			}
		}
	}
	return "?"
}
