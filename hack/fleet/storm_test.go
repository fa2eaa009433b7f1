package main

import (
	"math"
	"testing"
	"time"
)

// TestStorm: the model serves what fits, refuses the rest with a retry one
// second later, gives up after the policy's retries, and loses nothing.
func TestStorm(t *testing.T) {
	t.Parallel()
	l := apiLimit{Seats: 10, Queue: 0, Latency: 10 * time.Millisecond} // 1000 reviews/s
	few := retryPolicy{name: "few", retries: 2}
	many := retryPolicy{name: "many", retries: 30}
	tests := []struct {
		name     string
		arrivals []float64
		queue    int
		want     stormResult
	}{
		{name: "below the limit", arrivals: []float64{500, 500},
			want: stormResult{offeredPeak: 500, servedPeak: 500, served: 1000, seconds: 2}},
		{name: "at the limit", arrivals: []float64{1000},
			want: stormResult{offeredPeak: 1000, servedPeak: 1000, served: 1000, seconds: 1}},
		{name: "limit+1", arrivals: []float64{1001},
			want: stormResult{offeredPeak: 1001, servedPeak: 1000, served: 1001, refused: 1, maxDelay: 1, seconds: 2}},
		{name: "three times the limit in a second", arrivals: []float64{3000},
			want: stormResult{offeredPeak: 3000, servedPeak: 1000, served: 3000, refused: 3000, maxDelay: 2, seconds: 3}},
		{name: "four times: the last retry gives up", arrivals: []float64{4000},
			want: stormResult{offeredPeak: 4000, servedPeak: 1000, served: 3000, refused: 6000, failed: 1000, maxDelay: 2, seconds: 3}},
		{name: "the queue takes the excess", arrivals: []float64{1200}, queue: 200,
			want: stormResult{offeredPeak: 1200, servedPeak: 1000, served: 1200, seconds: 2}},
		{name: "queue+1 is refused", arrivals: []float64{1201}, queue: 200,
			want: stormResult{offeredPeak: 1201, servedPeak: 1000, served: 1201, refused: 1, maxDelay: 1, seconds: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := l
			l.Queue = tt.queue
			got := storm(tt.arrivals, l, few)
			if got != tt.want {
				t.Errorf("storm(%v) = %+v; want %+v", tt.arrivals, got, tt.want)
			}
		})
	}
	// Sustained overload: four seconds at twice the limit. With two
	// retries some give up; with thirty every review is served, late.
	a := []float64{2000, 2000, 2000, 2000}
	if r := storm(a, l, few); r.failed <= 0 || math.Abs(r.served+r.failed-8000) > 1e-6 || r.maxDelay != 2 {
		t.Errorf("storm(%v, 2 retries) = %+v; want some given up, served+failed = 8000, waits of 2s", a, r)
	}
	if r := storm(a, l, many); r.failed > 1e-6 || math.Abs(r.served-8000) > 1e-6 || r.seconds != 8 {
		t.Errorf("storm(%v, 30 retries) = %+v; want all 8000 served within 8s", a, r)
	}
}

// TestStormConserves: at the defaults, every review of a restart herd is
// served or given up, and the server never serves more than its capacity.
func TestStormConserves(t *testing.T) {
	t.Parallel()
	l := apiLimit{Seats: 245, Queue: 300, Latency: 5 * time.Millisecond}
	for _, spread := range []time.Duration{time.Second, 2 * time.Second, 9 * time.Second} {
		a := restartStorm(100000, spread)
		var sum float64
		for _, x := range a {
			sum += x
		}
		if math.Abs(sum-100000) > 1e-6 {
			t.Errorf("restartStorm(100000, %v) sums to %v", spread, sum)
		}
		for _, pol := range retryPolicies {
			r := storm(a, l, pol)
			if math.Abs(r.served+r.failed-sum) > 1e-6 || r.servedPeak > l.capacity()+1e-6 {
				t.Errorf("%v, %s: %+v; want served+failed = %v and served peak <= capacity %v", spread, pol.name, r, sum, l.capacity())
			}
		}
	}
}
