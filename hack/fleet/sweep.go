package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strings"
	"time"
)

// The sweep: the steady state at several request intervals.
//
// A cache saves reviews only for callers that come back within its TTL:
// with jittered periodic requests every I, a cache of TTL T costs a review
// of each kind about every max(I, T + I/2). So the ratio of two
// configurations' steady-state costs depends on the interval: for callers
// much more frequent than both TTLs it is the ratio of the TTLs
// (reviewauth's 1m against the apiserver defaults' 10s: 1/6); it rises as
// the interval grows, and is 1 for callers that neither cache serves.

// sweepParams returns p for one interval of the sweep: the steady state
// only (no restart), sample nodes, and a steady window of at least 10
// minutes and 20 intervals after the warmup.
func sweepParams(p params, interval time.Duration, sample int) params {
	q := p
	q.Interval = interval
	q.Sample = min(sample, q.Nodes)
	q.RestartAt, q.RestartSpread = 0, 0
	q.Duration = q.Warmup + max(10*time.Minute, 20*interval)
	return q
}

// sweepRow is the steady state of every configuration at one interval.
type sweepRow struct {
	interval time.Duration
	results  []*result
}

// runSweep simulates cfgs at each interval.
func runSweep(p params, intervals []time.Duration, sample int, cfgs []config, parallel int) ([]sweepRow, error) {
	rows := make([]sweepRow, len(intervals))
	for i, iv := range intervals {
		q := sweepParams(p, iv, sample)
		if err := q.validate(); err != nil {
			return nil, fmt.Errorf("sweep at %v: %w", iv, err)
		}
		res, err := runAll(q, cfgs, parallel)
		if err != nil {
			return nil, err
		}
		rows[i] = sweepRow{interval: iv, results: res}
	}
	return rows, nil
}

// ratio returns r's steady reviews/s over the apiserver configuration's in
// the same row, or NaN without one.
func (row sweepRow) ratio(r *result) float64 {
	for _, b := range row.results {
		if b.config.name == "apiserver" {
			tr, sar := b.steady()
			rtr, rsar := r.steady()
			return (rtr + rsar) / (tr + sar)
		}
	}
	return math.NaN()
}

// writeSweep prints the sweep's table.
func writeSweep(w io.Writer, p params, rows []sweepRow, sample int) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Steady state by request interval\n\n")
	fmt.Fprintf(w, "Each row is a steady-state run (no restart) of %d sampled nodes × %d callers, requests every interval ± %.0f%%, steady window of max(10m, 20 intervals) after %v; reviews/s per node (TokenReviews + SARs), and the ratio to the apiserver defaults (TTLs 10s/10s).\n\n",
		min(sample, p.Nodes), p.Callers, p.Jitter*100, p.Warmup)
	var head, sep strings.Builder
	head.WriteString("| interval |")
	sep.WriteString("|---|")
	for _, r := range rows[0].results {
		fmt.Fprintf(&head, " %s |", r.config.name)
		sep.WriteString("---|")
		if r.config.name != "apiserver" {
			fmt.Fprintf(&head, " %s vs apiserver |", r.config.name)
			sep.WriteString("---|")
		}
	}
	fmt.Fprintln(w, head.String())
	fmt.Fprintln(w, sep.String())
	for _, row := range rows {
		fmt.Fprintf(w, "| %v |", row.interval)
		for _, r := range row.results {
			tr, sar := r.steady()
			fmt.Fprintf(w, " %.3g |", tr+sar)
			if r.config.name != "apiserver" {
				fmt.Fprintf(w, " %.2f× |", row.ratio(r))
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\nWhy: after a miss, a cache of TTL T answers a caller until T has passed, and the caller's next request after that misses: with requests every I (jittered), reviews come about max(I, T + I/2) apart. So the ratio of reviewauth's defaults (T = 1m) to the apiserver defaults' (T = 10s) is about max(I, 10s + I/2) / max(I, 1m + I/2): 1/6 for callers much more frequent than 10s, 0.2 at I = 5s, 0.23 at 10s, 0.4 at 30s, 0.67 at 1m, and 1 for callers rarer than about 2m, whom neither cache serves. The simulated rows follow it (rotations and churn add a little).\n")
}

// writeSweepPlot draws each configuration's ratio to the apiserver defaults
// against the interval (log scale), with the 0.2× and 1/6 lines, and writes
// it as a PNG to path.
func writeSweepPlot(path string, rows []sweepRow) error {
	const (
		width, height = 900, 520
		left, right   = 80, 220
		top, bottom   = 40, 60
	)
	img, text := newCanvas(width, height)
	ink := color.RGBA{0x30, 0x30, 0x30, 0xff}
	grid := color.RGBA{0xe4, 0xe4, 0xe4, 0xff}

	lo, hi := math.Log10(rows[0].interval.Seconds()), math.Log10(rows[len(rows)-1].interval.Seconds())
	if hi <= lo {
		hi = lo + 1
	}
	ymax := 1.0
	for _, row := range rows {
		for _, r := range row.results {
			if v := row.ratio(r); !math.IsNaN(v) {
				ymax = math.Max(ymax, v)
			}
		}
	}
	ymax, ystep := niceScale(ymax)
	x0, y0, x1, y1 := left, height-bottom, width-right, top
	px := func(d time.Duration) int {
		return x0 + int(math.Round((math.Log10(d.Seconds())-lo)/(hi-lo)*float64(x1-x0)))
	}
	py := func(v float64) int { return y0 - int(math.Round(v/ymax*float64(y0-y1))) }
	for v := 0.0; v <= ymax+ystep/2; v += ystep {
		y := py(v)
		line(img, x0, y, x1, y, grid, 1)
		l := fmt.Sprintf("%g", math.Round(v*100)/100)
		text(x0-8-textWidth(l), y+4, l, ink)
	}
	for _, row := range rows {
		x := px(row.interval)
		line(img, x, y0, x, y1, grid, 1)
		l := row.interval.String()
		text(x-textWidth(l)/2, y0+16, l, ink)
	}
	line(img, x0, y0, x1, y0, ink, 1)
	line(img, x0, y0, x0, y1, ink, 1)
	for _, ref := range []struct {
		v     float64
		label string
		dy    int // the labels are close: one above its line, one below
	}{{0.2, "0.2x", -3}, {1.0 / 6, "1/6 (TTLs 10s/1m)", 12}} {
		y := py(ref.v)
		for x := x0; x < x1; x += 8 {
			line(img, x, y, min(x+4, x1), y, ink, 1)
		}
		text(x1+4, y+ref.dy, ref.label, ink)
	}
	title := "Steady-state reviews vs the apiserver defaults, by request interval"
	text((width-textWidth(title))/2, 22, title, ink)
	xl := "interval between a caller's requests (log scale)"
	text((x0+x1-textWidth(xl))/2, height-22, xl, ink)
	text(8, y1-12, "x apiserver", ink)

	legend := 0
	for i, r := range rows[0].results {
		if r.config.name == "apiserver" {
			continue
		}
		st := styleOf(i)
		var step int
		prevX, prevY := -1, -1
		for _, row := range rows {
			v := row.ratio(row.results[i])
			x, y := px(row.interval), py(v)
			if prevX >= 0 {
				dashedLine(img, prevX, prevY, x, y, st, &step)
			}
			for dx := -3; dx <= 3; dx++ {
				for dy := -3; dy <= 3; dy++ {
					img.Set(x+dx, y+dy, st.c)
				}
			}
			prevX, prevY = x, y
		}
		ly := y1 + 40 + legend*18
		step = 0
		dashedLine(img, x1+20, ly-4, x1+48, ly-4, st, &step)
		text(x1+56, ly, r.config.name, ink)
		legend++
	}

	return writePNG(path, img)
}
