package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestSweepParams: a sweep run is the steady state only, with a window of
// at least 10 minutes and 20 intervals.
func TestSweepParams(t *testing.T) {
	t.Parallel()
	p := defaultParams()
	for _, tt := range []struct {
		interval, window time.Duration
	}{
		{time.Second, 10 * time.Minute},
		{30 * time.Second, 10 * time.Minute},
		{31 * time.Second, 20 * 31 * time.Second},
		{time.Minute, 20 * time.Minute},
	} {
		q := sweepParams(p, tt.interval, 10)
		if q.RestartAt != 0 || q.Interval != tt.interval || q.Sample != 10 || q.Duration-q.Warmup != tt.window {
			t.Errorf("sweepParams(%v) = restart %v, interval %v, sample %d, window %v; want 0, %v, 10, %v",
				tt.interval, q.RestartAt, q.Interval, q.Sample, q.Duration-q.Warmup, tt.interval, tt.window)
		}
		if err := q.validate(); err != nil {
			t.Errorf("sweepParams(%v).validate() = %v", tt.interval, err)
		}
	}
}

// TestSweepRatio: callers much more frequent than both TTLs cost the ratio
// of the TTLs (10s/1m); callers at the longer TTL cost far more than that.
func TestSweepRatio(t *testing.T) {
	t.Parallel()
	p := smallParams()
	cfgs := []config{must(configNamed("reviewauth")), must(configNamed("apiserver"))}
	rows, err := runSweep(p, []time.Duration{time.Second, time.Minute}, 2, cfgs, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := rows[0].ratio(rows[0].results[0]); got < 0.14 || got > 0.19 {
		t.Errorf("ratio at 1s = %.3f; want about 1/6 (10s/1m)", got)
	}
	if got := rows[1].ratio(rows[1].results[0]); got < 0.5 {
		t.Errorf("ratio at 1m = %.3f; want at least 0.5: a 1m cache misses about every other request of a caller every 1m ± 10%%", got)
	}
	var out bytes.Buffer
	writeSweep(&out, p, rows, 2)
	for _, want := range []string{"| interval | reviewauth | reviewauth vs apiserver | apiserver |", "| 1s |", "| 1m0s |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("sweep table lacks %q:\n%s", want, out.String())
		}
	}
}

// TestParseIntervals: the sweep's intervals are at least 1s and increase.
func TestParseIntervals(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want []time.Duration
		ok   bool
	}{
		{"", nil, true},
		{"1s, 5s,1m", []time.Duration{time.Second, 5 * time.Second, time.Minute}, true},
		{"1s", []time.Duration{time.Second}, true},
		{"999ms", nil, false},
		{"5s,1s", nil, false},
		{"5s,5s", nil, false},
		{"soon", nil, false},
	} {
		got, err := parseIntervals(tt.in)
		if (err == nil) != tt.ok || len(got) != len(tt.want) {
			t.Errorf("parseIntervals(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("parseIntervals(%q) = %v; want %v", tt.in, got, tt.want)
			}
		}
	}
}

func must[T any](v T, ok bool) T {
	if !ok {
		panic("not found")
	}
	return v
}
