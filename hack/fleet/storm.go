package main

import (
	"fmt"
	"io"
	"math"
	"time"
)

// The API server's limit on concurrent requests, and what the clients'
// retries do at a restart storm that passes it.
//
// k8s.io/apiserver v0.37.2 (pkg/server/config.go, server/options): without
// API Priority and Fairness, --max-requests-inflight (400) bounds
// non-mutating requests and --max-mutating-requests-inflight (200) mutating
// ones; reviews are creates, so 200 applies, and the request past it gets
// 429 with Retry-After: 1 at once (filters/maxinflight.go). With APF, the
// default since 1.20, the two are summed into 600 seats shared by priority
// levels in proportion to their nominal shares (bootstrap configuration,
// apis/flowcontrol/bootstrap/default.go: 245 shares in all); a node agent's
// service account is in the "service-accounts" flow schema, priority level
// workload-low (100 shares: ceil(600×100/245) = 245 seats, more when it
// borrows), and its requests wait in at most 6 queues (hand size) of 50
// for a seat (all agents of one DaemonSet share a service account, so one
// flow); past that, 429 with a Retry-After of at least 1 s.
//
// The simulation itself sends one review at a time on a fake clock, so it
// cannot show a limit at work. The model below takes the reviews it
// counted and passes them, second by second, through a server of seats
// seats that each hold a review for the assumed latency, with a queue;
// what does not fit is refused with 429 and Retry-After: 1, and comes back
// one second later as the client's retry, until the client gives up:
//
//   - reviewauth (internal/review): at most 4 retries, each after the
//     larger of its backoff (100 ms doubling, capped at 2 s) and
//     Retry-After, so 1 s each; then the caller gets 503 and retries on its
//     own schedule.
//   - k8s.io/apiserver's webhooks: client-go's rest.Request retries a 429
//     with Retry-After 10 times, sleeping as told, inside each of the
//     webhook's 5 backoff steps (500 ms × 1.5), within the token cache's
//     30 s timeout: in effect one retry a second for 30 s; then the caller
//     gets 401 (authentication) or NoOpinion (authorization).

// apiLimit is the model of the API server's limit.
type apiLimit struct {
	Seats   int           // reviews served at once
	Queue   int           // reviews waiting for a seat
	Latency time.Duration // how long a review holds a seat
}

// capacity is how many reviews the server finishes per second.
func (l apiLimit) capacity() float64 { return float64(l.Seats) / l.Latency.Seconds() }

// retryPolicy is how a client retries a review refused with 429 and
// Retry-After: 1.
type retryPolicy struct {
	name    string
	retries int // retries after the first refusal, one second apart
	gives   string
}

// retryPolicies are the two policies the report compares.
var retryPolicies = []retryPolicy{
	{name: "reviewauth", retries: 4, gives: "503 to the caller"},
	{name: "k8s.io/apiserver webhooks", retries: 30, gives: "401 (authentication) or NoOpinion (authorization) to the caller"},
}

// stormResult is what the model makes of one storm.
type stormResult struct {
	offeredPeak float64 // reviews/s sent by the agents at the busiest second, retries included
	servedPeak  float64 // reviews/s the server finished at the busiest second
	served      float64 // reviews served in all
	refused     float64 // 429 answers
	failed      float64 // reviews given up after the last retry
	maxDelay    int     // the most times a served review had been refused: seconds of retries it waited
	seconds     int     // seconds from the first arrival to the last review served or given up
}

// storm passes arrivals (fresh reviews per second) through l with the
// clients retrying as pol says. It is a fluid model: within a second,
// reviews arrive evenly, fresh ones and retries alike, so the server
// refuses the same fraction of each (it cannot tell a retry from a first
// attempt); the queue is served first; a review refused in second t comes
// back in second t+1.
func storm(arrivals []float64, l apiLimit, pol retryPolicy) stormResult {
	var r stormResult
	capacity := l.capacity()
	queue := float64(l.Queue)
	// due[0] are fresh reviews; due[k] reviews refused k times, due now.
	retrying := make([]float64, pol.retries)
	var backlog float64 // reviews waiting in the queue from the last second
	for t := 0; ; t++ {
		due := make([]float64, 1, 1+len(retrying))
		if t < len(arrivals) {
			due[0] = arrivals[t]
		}
		due = append(due, retrying...)
		total := 0.0
		for _, n := range due {
			total += n
		}
		if t >= len(arrivals) && total == 0 && backlog == 0 {
			r.seconds = t
			return r
		}
		r.offeredPeak = math.Max(r.offeredPeak, total)
		fromQueue := math.Min(backlog, capacity)
		backlog -= fromQueue
		fromDue := math.Min(total, capacity-fromQueue)
		r.servedPeak = math.Max(r.servedPeak, fromQueue+fromDue)
		r.served += fromQueue + fromDue
		left := total - fromDue
		queued := math.Min(left, queue-backlog)
		backlog += queued
		refused := left - queued
		r.refused += refused
		if fromDue > 0 {
			for k := len(due) - 1; k >= 0; k-- {
				if due[k] > 0 {
					r.maxDelay = max(r.maxDelay, k)
					break
				}
			}
		}
		// Each group loses the same fraction; the refused come back next
		// second one step further, and those out of retries give up.
		f := 0.0
		if total > 0 {
			f = refused / total
		}
		for k := range retrying {
			retrying[k] = due[k] * f
		}
		r.failed += due[len(due)-1] * f
	}
}

// restartStorm returns the fresh reviews per second of a fleet whose
// callers all send their first request after a restart within spread:
// total reviews spread evenly over spread.
func restartStorm(total float64, spread time.Duration) []float64 {
	secs := max(int(math.Ceil(spread.Seconds())), 1)
	out := make([]float64, secs)
	for i := range out {
		out[i] = total / float64(secs)
	}
	return out
}

// writeStorm reports the model for the restart of the simulated fleet: the
// reviews it cost (one TokenReview and one SAR per caller: the same for
// every configuration, since every cache is cold), spread as the callers
// spread their first requests, against the API server's limit.
func writeStorm(w io.Writer, p params, l apiLimit) {
	total := float64(p.Nodes * p.Callers * 2)
	capacity := l.capacity()
	fmt.Fprintf(w, "\n## Restart storm against the API server's limit (model)\n\n")
	fmt.Fprintf(w, "The per-node bounds (each agent's %d reviews in flight per kind, its client's 200 QPS) bound one agent, not the fleet: after a restart an agent sends one TokenReview and one SAR per caller (%d), far below them, but %d agents do it at once. What spreads the herd is when the callers send their first request after the restart: each on its own schedule (over one interval, %v here: the table above), or all within a second if they reconnect at once. Fleet peak = %d nodes × %d callers × 2 reviews / spread.\n\n",
		16, 2*p.Callers, p.Nodes, p.Interval, p.Nodes, p.Callers)
	fmt.Fprintf(w, "The API server (k8s.io/apiserver v0.37.2 defaults) limits concurrent requests: without APF, --max-requests-inflight=400 bounds non-mutating requests and --max-mutating-requests-inflight=200 mutating ones (reviews are creates: 200 applies), 429 with Retry-After: 1 past it; with APF (the default) the two make 600 seats, of which a node agent's priority level (workload-low) has %d, with 6 queues × 50 of one flow waiting (-apiserver-queue %d), and 429 with Retry-After past that. At %v per review (-latency), %d seats finish %.0f reviews/s.\n\n",
		l.Seats, l.Queue, l.Latency, l.Seats, capacity)
	fmt.Fprintf(w, "Model: reviews arrive evenly within each second; what neither a seat nor the queue takes is refused (429, Retry-After: 1) and retried one second later, until the client gives up: reviewauth after 4 retries (its backoff, 100 ms doubling, is shorter than Retry-After), k8s.io/apiserver's webhooks after about 30 (client-go retries a 429 with Retry-After 10 times inside each of the webhook's backoff steps, within the token cache's 30 s).\n\n")
	fmt.Fprintln(w, "| callers' first requests spread over | offered peak, reviews/s | served peak | 429s | given up (reviewauth: 503) | given up (apiserver webhooks: 401) | longest retry wait | seconds to drain |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	spreads := []time.Duration{time.Second, 2 * time.Second, 5 * time.Second}
	if iv := time.Duration(float64(p.Interval) * (1 - p.Jitter)); iv > 5*time.Second {
		spreads = append(spreads, iv.Round(time.Second))
	}
	for _, spread := range spreads {
		a := restartStorm(total, spread)
		ours := storm(a, l, retryPolicies[0])
		theirs := storm(a, l, retryPolicies[1])
		fmt.Fprintf(w, "| %v | %.0f | %.0f | %.0f | %.0f | %.0f | %ds | %d |\n",
			spread, ours.offeredPeak, ours.servedPeak, ours.refused, ours.failed, theirs.failed, ours.maxDelay, ours.seconds)
	}
	fmt.Fprintf(w, "\nA herd spread over at least %d reviews ÷ %.0f reviews/s = %.1f s fits; one spread over less is refused in part, and the retries, one second later, spread it over the next seconds: at most %d s of waiting with reviewauth before the caller gets 503 (a retryable answer), at most 30 s with the webhooks before it gets 401. Retries add load only while the server is full; each refused review comes back once a second, not faster.\n",
		int(total), capacity, total/capacity, retryPolicies[0].retries)
}
