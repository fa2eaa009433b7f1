package main

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/authtest"
)

// audience is the node agents' audience: every caller's token is minted for
// it.
const audience = "node-agent.example"

// agent is one node agent's authentication and authorization.
type agent struct {
	authn authenticator.Token
	// audiences, when set, are put in the context of each authentication
	// (k8s.io/apiserver's token cache keys on them).
	audiences authenticator.Audiences
	authz     authorizer.UnconditionalAuthorizer
	// revoke and forgetAll are the caches' invalidation (reviewauth
	// only), which the configurations with a revoker call.
	revoke    func(uids ...types.UID)
	forgetAll func()
}

// config is one way of running a node agent's auth.
type config struct {
	name  string
	about string
	new   func(cfg *rest.Config, clk clock.Clock) (*agent, error)
	// revoker: the agent runs a revoker (revocation.go): a replaced pod's
	// UID is revoked, and RBAC changes flush every decision, twice.
	revoker bool
}

// configs are the configurations the simulator compares, reviewauth first.
var configs = []config{
	{"reviewauth", "reviewauth defaults: identity 1m (capped at exp), rejection 10s, allow 1m, deny 10s; coalesced", newReviewauthAgent, false},
	{"apiserver", "k8s.io/apiserver delegated options' defaults: token cache 10s, SAR cache 10s/10s", delegated(10*time.Second, 10*time.Second, 10*time.Second), false},
	{"kubelet", "k8s.io/apiserver delegated, the kubelet's defaults: token cache 2m, SAR cache 5m/30s", delegated(2*time.Minute, 5*time.Minute, 30*time.Second), false},
	{"controller-runtime", "k8s.io/apiserver delegated, controller-runtime's metrics filter: token cache 1m, SAR cache 5m/30s", delegated(time.Minute, 5*time.Minute, 30*time.Second), false},
	{"kube-rbac-proxy-like", "k8s.io/apiserver token cache 2m, a SAR per request (no SAR cache, no coalescing), as issue #16 describes it; kube-rbac-proxy v0.21 itself caches SARs 5m/30s and then costs what the kubelet row costs", delegated(2*time.Minute, 0, 0), false},
	{"reviewauth-2m-5m", "reviewauth with the kubelet's TTLs: identity 2m, allow 5m, deny 30s", func(cfg *rest.Config, clk clock.Clock) (*agent, error) {
		return newReviewauthAgentTTLs(cfg, clk, 2*time.Minute, 5*time.Minute, 30*time.Second)
	}, false},
	{"reviewauth-2s", "reviewauth with every TTL at 2s: revocation within 2s by the TTLs alone, without a revoker", func(cfg *rest.Config, clk clock.Clock) (*agent, error) {
		return newReviewauthAgentTTLs(cfg, clk, 2*time.Second, 2*time.Second, 2*time.Second)
	}, false},
	{"reviewauth+revoker", "reviewauth defaults with a revoker (revocation within 2s): each replaced pod's UID revoked at its deletion; -rbac-flushes-per-hour RBAC changes that flush every decision of every agent (a group subject, a relist), each flushed again 1s later", newReviewauthAgent, true},
}

func delegated(token, allowed, denied time.Duration) func(*rest.Config, clock.Clock) (*agent, error) {
	return func(cfg *rest.Config, clk clock.Clock) (*agent, error) {
		return newDelegatedAgent(cfg, clk, token, allowed, denied)
	}
}

// configNamed returns the config called name.
func configNamed(name string) (config, bool) {
	for _, c := range configs {
		if c.name == name {
			return c, true
		}
	}
	return config{}, false
}

// params describe the fleet and its workload.
type params struct {
	Nodes   int // nodes in the fleet
	Sample  int // nodes simulated in full; rates are scaled by Nodes/Sample
	Callers int // callers per node, each with its own pod and token

	Interval time.Duration // mean time between two requests of a caller
	Jitter   float64       // each interval is Interval × (1 ± Jitter), uniform
	Poisson  bool          // exponential intervals instead
	Burst    int           // concurrent identical calls per request (same token)

	TokenLifetime time.Duration // projected token lifetime
	RotateAt      float64       // the kubelet rotates a token at this fraction of its lifetime
	ChurnPerHour  float64       // fraction of pods replaced per hour (new pod, new token)

	Duration      time.Duration // simulated time
	StartSpread   time.Duration // agents first start at uniformly random times in [0, StartSpread), as in a fleet that has been running
	Warmup        time.Duration // the steady-state window starts here
	RestartAt     time.Duration // every agent restarts, cold, at this time (0: never)
	RestartSpread time.Duration // after the restart, each caller's next request is uniform in this window (0: callers keep their schedule)

	PeakWindow time.Duration // the restart peak is the busiest window of this width, per second
	Latency    time.Duration // assumed API-server latency of a review, for the in-flight estimate
	Seed       uint64

	// The revoker (revocation.go).
	RBACFlushesPerHour float64 // RBAC changes per hour that flush every decision of every agent
	Watch              watchModel
}

// defaultParams are the simulator's defaults.
func defaultParams() params {
	return params{
		Nodes: 5000, Sample: 50, Callers: 10,
		Interval: 10 * time.Second, Jitter: 0.1, Burst: 1,
		TokenLifetime: time.Hour, RotateAt: 0.8, ChurnPerHour: 0.1,
		Duration: time.Hour, StartSpread: 10 * time.Minute, Warmup: 15 * time.Minute, RestartAt: 40 * time.Minute,
		PeakWindow: 5 * time.Second, Latency: 5 * time.Millisecond, Seed: 1,
		RBACFlushesPerHour: 12, Watch: defaultWatchModel(),
	}
}

// peakWindow is the width in seconds of the window the restart peak is
// averaged over: PeakWindow, but no more than the shortest interval between
// two requests of a caller, within which every caller of a cold fleet
// misses once (so a wider window would dilute the peak).
func (p params) peakWindow() int {
	w := p.PeakWindow
	if !p.Poisson {
		w = min(w, time.Duration(float64(p.Interval)*(1-p.Jitter)))
	}
	return max(int(w/time.Second), 1)
}

// scale is how many fleet nodes each simulated node stands for.
func (p params) scale() float64 { return float64(p.Nodes) / float64(p.Sample) }

func (p params) validate() error {
	switch {
	case p.Nodes < 1 || p.Sample < 1 || p.Sample > p.Nodes:
		return fmt.Errorf("need 1 <= sample (%d) <= nodes (%d)", p.Sample, p.Nodes)
	case p.Callers < 1 || p.Burst < 1:
		return fmt.Errorf("need at least one caller and a burst of at least 1")
	case p.Interval <= 0 || p.Jitter < 0 || p.Jitter >= 1:
		return fmt.Errorf("need interval > 0 and 0 <= jitter < 1")
	case p.TokenLifetime <= 0 || p.RotateAt <= 0 || p.RotateAt > 1:
		return fmt.Errorf("need a positive token lifetime and 0 < rotate-at <= 1")
	case p.Duration < time.Second || p.Warmup < 0 || p.Warmup >= p.steadyEnd():
		return fmt.Errorf("need warmup (%v) before the restart or the end (%v)", p.Warmup, p.steadyEnd())
	case p.StartSpread < 0 || p.StartSpread > p.Warmup:
		return fmt.Errorf("need 0 <= start-spread (%v) <= warmup (%v)", p.StartSpread, p.Warmup)
	case p.PeakWindow < time.Second:
		return fmt.Errorf("need a peak window of at least 1s")
	case p.RestartAt < 0 || p.RestartAt >= p.Duration:
		return fmt.Errorf("need 0 <= restart-at < duration")
	case p.RBACFlushesPerHour < 0:
		return fmt.Errorf("need -rbac-flushes-per-hour >= 0")
	}
	return p.Watch.validate()
}

// steadyEnd is where the steady-state window ends.
func (p params) steadyEnd() time.Duration {
	if p.RestartAt > 0 {
		return p.RestartAt
	}
	return p.Duration
}

// result is what one configuration cost the API server, in the sampled
// nodes, per simulated second.
type result struct {
	config   config
	p        params
	tr, sar  []int // reviews received by the API server in each second
	requests int   // requests the sampled agents answered
	refused  int   // requests not authenticated or not allowed (0 expected)
	wall     time.Duration
}

// Summary figures. Fleet figures are sample figures scaled by Nodes/Sample.

// steady returns the mean TokenReviews/s and SARs/s per node in the
// steady-state window.
func (r *result) steady() (tr, sar float64) {
	from, to := int(r.p.Warmup/time.Second), int(r.p.steadyEnd()/time.Second)
	var a, b int
	for s := from; s < to; s++ {
		a += r.tr[s]
		b += r.sar[s]
	}
	d := float64(to-from) * float64(r.p.Sample)
	return float64(a) / d, float64(b) / d
}

// restartWindow returns the seconds [from, to) after the restart in which
// the peak is looked for: until every caller has sent two requests.
func (r *result) restartWindow() (from, to int) {
	if r.p.RestartAt <= 0 {
		return 0, 0
	}
	from = int(r.p.RestartAt / time.Second)
	w := max(2*r.p.Interval, r.p.RestartSpread+r.p.Interval, time.Minute)
	return from, min(from+int(w/time.Second)+1, len(r.tr))
}

// peak returns the fleet's TokenReviews/s, SARs/s and reviews/s (both) in
// the busiest peakWindow after the restart (busiest for each figure). A
// fleet's own second-to-second noise is small (it sums thousands of
// independent nodes), but a sample's is not: averaging over a few seconds
// keeps the sample's noise from being scaled up into the peak.
func (r *result) peak() (tr, sar, both float64) {
	from, to := r.restartWindow()
	w := r.p.peakWindow()
	var a, b, c int
	for s := from; s+w <= to; s++ {
		var x, y int
		for i := s; i < s+w; i++ {
			x += r.tr[i]
			y += r.sar[i]
		}
		a, b, c = max(a, x), max(b, y), max(c, x+y)
	}
	k := r.p.scale() / float64(w)
	return float64(a) * k, float64(b) * k, float64(c) * k
}

// inFlight estimates the reviews in flight at the API server at the peak,
// fleet-wide, by Little's law: arrival rate × latency.
func (r *result) inFlight() float64 {
	_, _, both := r.peak()
	return both * r.p.Latency.Seconds()
}

// series returns the fleet's reviews/s (both kinds) averaged over buckets
// of the given width, for plotting.
func (r *result) series(bucket time.Duration) []float64 {
	w := max(int(bucket/time.Second), 1)
	var out []float64
	for s := 0; s+w <= len(r.tr); s += w {
		var n int
		for i := s; i < s+w; i++ {
			n += r.tr[i] + r.sar[i]
		}
		out = append(out, float64(n)/float64(w)*r.p.scale())
	}
	return out
}

// The simulation.

// caller is one client of a node agent: a pod with a projected token.
type caller struct {
	node, idx int
	pod       int // generation of the pod (churn replaces it)
	tok       int // generation of the token
	token     string
	user      *user.DefaultInfo
	reqGen    int // generation of the scheduled request; a restart can reschedule it
}

type eventKind int

const (
	evRequest eventKind = iota
	evRotate
	evChurn
	evRestart
	evFlush       // an RBAC change: every agent's revoker flushes every decision
	evSecondFlush // and again, a second later
)

type event struct {
	at     time.Duration
	seq    uint64 // ties are broken in scheduling order: deterministic
	kind   eventKind
	caller int
	gen    int
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// epoch is the simulation's time zero.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type sim struct {
	p       params
	cfg     config
	clk     *clocktesting.FakeClock
	srv     *authtest.Server
	rng     *rand.Rand
	agents  []*agent
	started []time.Duration // when each agent first starts
	callers []*caller
	queue   events
	seq     uint64
	now     time.Duration
	res     *result

	lastTR, lastSAR int
}

// run simulates p with cfg and returns what it cost the API server.
func run(p params, cfg config) (*result, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	clk := clocktesting.NewFakeClock(epoch)
	srv := authtest.NewServer(authtest.WithClock(clk))
	defer srv.Close()
	srv.SetPolicy(authtest.Rules(authtest.Rule{
		Groups: []string{"system:serviceaccounts"}, Verbs: []string{"get"},
		APIGroups: []string{""}, Resources: []string{"nodes"}, Subresources: []string{"metrics"},
	}))
	secs := int(p.Duration / time.Second)
	s := &sim{
		p: p, cfg: cfg, clk: clk, srv: srv,
		rng: rand.New(rand.NewPCG(p.Seed, 0x5eed)),
		res: &result{config: cfg, p: p, tr: make([]int, secs), sar: make([]int, secs)},
	}
	if err := s.startAgents(); err != nil {
		return nil, err
	}
	s.started = make([]time.Duration, p.Sample)
	for n := range s.started {
		s.started[n] = time.Duration(s.rng.Float64() * float64(p.StartSpread))
	}
	for n := range p.Sample {
		for i := range p.Callers {
			c := &caller{node: n, idx: i}
			s.callers = append(s.callers, c)
			ci := len(s.callers) - 1
			// Tokens were issued at random times in the past, so that
			// rotations are spread over the rotation period.
			age := time.Duration(s.rng.Float64() * p.RotateAt * float64(p.TokenLifetime))
			s.newPod(c)
			s.newToken(c, -age)
			s.schedule(-age+time.Duration(p.RotateAt*float64(p.TokenLifetime)), evRotate, ci, 0)
			s.scheduleChurn(ci)
			s.schedule(time.Duration(s.rng.Float64()*float64(p.Interval)), evRequest, ci, 0)
		}
	}
	if p.RestartAt > 0 {
		s.schedule(p.RestartAt, evRestart, -1, 0)
	}
	if cfg.revoker {
		s.scheduleFlush()
	}
	for s.queue.Len() > 0 {
		ev := heap.Pop(&s.queue).(event)
		if ev.at >= p.Duration {
			break
		}
		if ev.at > s.now {
			s.now = ev.at
			clk.SetTime(epoch.Add(s.now))
		}
		if err := s.handle(ev); err != nil {
			return nil, err
		}
		s.count()
	}
	s.res.wall = time.Since(start)
	return s.res, nil
}

func (s *sim) schedule(at time.Duration, kind eventKind, c, gen int) {
	s.seq++
	heap.Push(&s.queue, event{at: at, seq: s.seq, kind: kind, caller: c, gen: gen})
}

func (s *sim) scheduleChurn(c int) {
	if s.p.ChurnPerHour <= 0 {
		return
	}
	mean := float64(time.Hour) / s.p.ChurnPerHour
	s.schedule(s.now+time.Duration(s.rng.ExpFloat64()*mean), evChurn, c, 0)
}

// scheduleFlush schedules the next RBAC change that flushes every decision
// (Poisson arrivals at RBACFlushesPerHour).
func (s *sim) scheduleFlush() {
	if s.p.RBACFlushesPerHour <= 0 {
		return
	}
	mean := float64(time.Hour) / s.p.RBACFlushesPerHour
	s.schedule(s.now+time.Duration(s.rng.ExpFloat64()*mean), evFlush, -1, 0)
}

// nextInterval draws the time to a caller's next request.
func (s *sim) nextInterval() time.Duration {
	if s.p.Poisson {
		return time.Duration(s.rng.ExpFloat64() * float64(s.p.Interval))
	}
	return time.Duration(float64(s.p.Interval) * (1 + s.p.Jitter*(2*s.rng.Float64()-1)))
}

func (s *sim) startAgents() error {
	s.agents = make([]*agent, s.p.Sample)
	for n := range s.agents {
		a, err := s.cfg.new(s.srv.Config(), s.clk)
		if err != nil {
			return fmt.Errorf("%s: %w", s.cfg.name, err)
		}
		s.agents[n] = a
	}
	return nil
}

func nodeName(n int) string { return fmt.Sprintf("node-%05d", n) }

// newPod gives c a new pod (name, UID) on its node.
func (s *sim) newPod(c *caller) {
	c.pod++
	sa := fmt.Sprintf("client-%d", c.idx)
	c.user = &user.DefaultInfo{
		Name:   "system:serviceaccount:team-" + fmt.Sprint(c.idx) + ":" + sa,
		UID:    fmt.Sprintf("sa-uid-%d", c.idx),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:team-" + fmt.Sprint(c.idx), "system:authenticated"},
	}
}

// podName is the name of c's pod now.
func podName(c *caller) string { return fmt.Sprintf("client-%d-%s-%d", c.idx, nodeName(c.node), c.pod) }

// newToken mints c a token issued at the given time (relative to the
// simulation's start) for the node agent's audience, bound to c's pod and
// node, with a credential ID of its own, as a real API server does.
func (s *sim) newToken(c *caller, issued time.Duration) {
	c.tok++
	u := *c.user
	pod := podName(c)
	u.Extra = map[string][]string{
		"authentication.kubernetes.io/pod-name":      {pod},
		"authentication.kubernetes.io/pod-uid":       {pod + "-uid"},
		"authentication.kubernetes.io/node-name":     {nodeName(c.node)},
		"authentication.kubernetes.io/node-uid":      {nodeName(c.node) + "-uid"},
		"authentication.kubernetes.io/credential-id": {fmt.Sprintf("JTI=%s-%d", pod, c.tok)},
	}
	c.user = &u
	c.token = s.srv.MintToken(&u, []string{audience}, epoch.Add(issued+s.p.TokenLifetime))
}

func (s *sim) handle(ev event) error {
	switch ev.kind {
	case evRequest:
		c := s.callers[ev.caller]
		if ev.gen != c.reqGen {
			return nil // rescheduled by a restart
		}
		s.request(c)
		s.schedule(s.now+s.nextInterval(), evRequest, ev.caller, c.reqGen)
	case evRotate:
		c := s.callers[ev.caller]
		if ev.gen != c.pod-1 {
			return nil // the pod was replaced; its new token has its own rotation
		}
		s.newToken(c, s.now)
		s.schedule(s.now+time.Duration(s.p.RotateAt*float64(s.p.TokenLifetime)), evRotate, ev.caller, c.pod-1)
	case evChurn:
		c := s.callers[ev.caller]
		if s.cfg.revoker {
			// The old pod is deleted: its agent's revoker revokes its UID.
			s.agents[c.node].revoke(types.UID(podName(c) + "-uid"))
		}
		s.newPod(c)
		s.newToken(c, s.now)
		s.schedule(s.now+time.Duration(s.p.RotateAt*float64(s.p.TokenLifetime)), evRotate, ev.caller, c.pod-1)
		s.scheduleChurn(ev.caller)
		// The new pod starts calling at a random point of its interval.
		c.reqGen++
		s.schedule(s.now+time.Duration(s.rng.Float64()*float64(s.p.Interval)), evRequest, ev.caller, c.reqGen)
	case evFlush, evSecondFlush:
		for _, a := range s.agents {
			a.forgetAll()
		}
		if ev.kind == evFlush {
			s.schedule(s.now+time.Second, evSecondFlush, -1, 0)
			s.scheduleFlush()
		}
	case evRestart:
		if err := s.startAgents(); err != nil {
			return err
		}
		if s.p.RestartSpread > 0 {
			for i, c := range s.callers {
				c.reqGen++
				s.schedule(s.now+time.Duration(s.rng.Float64()*float64(s.p.RestartSpread)), evRequest, i, c.reqGen)
			}
		}
	}
	return nil
}

// request is one call of c to its node agent: authenticate the token, then
// authorize get nodes/metrics on the node, as the kubelet's path table maps
// a scrape of /metrics. With a burst, that many identical calls run at once.
func (s *sim) request(c *caller) {
	if s.now < s.started[c.node] {
		return // the agent is not running yet
	}
	a := s.agents[c.node]
	ctx := context.Background()
	if a.audiences != nil {
		ctx = authenticator.WithAudiences(ctx, a.audiences)
	}
	one := func() bool {
		resp, ok, err := a.authn.AuthenticateToken(ctx, c.token)
		if err != nil || !ok {
			return false
		}
		d, _, err := a.authz.Authorize(ctx, authorizer.AttributesRecord{
			User: resp.User, Verb: "get", APIVersion: "v1", Resource: "nodes", Subresource: "metrics",
			Name: nodeName(c.node), ResourceRequest: true,
		})
		return err == nil && d == authorizer.DecisionAllow
	}
	s.res.requests += s.p.Burst
	if s.p.Burst == 1 {
		if !one() {
			s.res.refused++
		}
		return
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range s.p.Burst {
		wg.Go(func() {
			if !one() {
				mu.Lock()
				s.res.refused++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// count attributes the reviews the API server received since the last
// event to the current second, and now and then makes the fake API server
// forget the reviews it recorded.
func (s *sim) count() {
	tr, sar := s.srv.Count(authtest.TokenReviews), s.srv.Count(authtest.SubjectAccessReviews)
	sec := int(s.now / time.Second)
	if sec >= 0 && sec < len(s.res.tr) {
		s.res.tr[sec] += tr - s.lastTR
		s.res.sar[sec] += sar - s.lastSAR
	}
	s.lastTR, s.lastSAR = tr, sar
	if tr+sar > 20000 {
		s.srv.Reset()
		s.lastTR, s.lastSAR = 0, 0
	}
}
