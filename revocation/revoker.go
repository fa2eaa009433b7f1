package revocation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	rbacv1client "k8s.io/client-go/kubernetes/typed/rbac/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth/internal/observe"
	"github.com/reviewauth/reviewauth/metrics"
)

// IdentityRevoker forgets cached identities bound to UIDs, and refuses
// them for a while when a review returns them again (the API server's own
// token cache may still accept a token for seconds after its pod is gone).
// An identity is bound to a UID when its user UID (a ServiceAccount's) or
// its authentication.kubernetes.io/pod-uid or node-uid extra is that UID.
// cache.TokenAuthenticator and authn.Authenticator implement it. It must be
// safe for concurrent use.
type IdentityRevoker interface {
	Revoke(uids ...types.UID)
}

// DecisionForgetter forgets cached authorization decisions: those about
// one user, or all of them, including decisions in flight. cache.Authorizer
// and authz.Authorizer implement it. It must be safe for concurrent use.
type DecisionForgetter interface {
	ForgetUser(name string)
	ForgetAll()
}

// Resource is a kind of object a [Revoker] watches.
type Resource string

// The resources a Revoker can watch: see the package documentation.
const (
	// Pods are this node's pods (spec.nodeName=NodeName), metadata only.
	Pods Resource = "pods"
	// Node is this node's Node object (metadata.name=NodeName), metadata
	// only.
	Node Resource = "node"
	// ServiceAccounts are ServiceAccounts, metadata only.
	ServiceAccounts Resource = "serviceaccounts"
	// ClusterRoles are ClusterRoles and ClusterRoleBindings.
	ClusterRoles Resource = "clusterroles"
	// Roles are Roles and RoleBindings.
	Roles Resource = "roles"
)

// Resources lists every [Resource].
var Resources = []Resource{Pods, Node, ServiceAccounts, ClusterRoles, Roles}

// Defaults of [Options], and the API server's rule the revoker follows.
const (
	// DefaultSecondFlush is how long after an RBAC change its decisions are
	// flushed again. The API server's RBAC authorizer reads its own
	// informer, which may see a change after our watch does; a decision
	// asked for in between would keep the old answer for its TTL. One
	// second is far more than that informer's usual lag (milliseconds)
	// and keeps a revoked permission's end within 2 s.
	DefaultSecondFlush = time.Second

	// DefaultStallTimeout is how long a watch may deliver nothing at all
	// before the revoker stops counting itself in sync and restarts it.
	// The API server sends a bookmark on every watch about once a minute
	// (k8s.io/apiserver's cacher: bookmarkFrequency), so a healthy watch
	// is never silent for longer; 90 s leaves room for its bucketing.
	DefaultStallTimeout = 90 * time.Second

	// DeletionLeeway is how long after an object's deletionTimestamp the
	// API server starts refusing the tokens bound to it (kube-apiserver
	// pkg/serviceaccount/claims.go: go-jose's jwt.DefaultLeeway). The
	// revoker revokes them at the same moment, unless the object is gone
	// before.
	DeletionLeeway = time.Minute
)

const (
	// listTimeout bounds one list, so that a list the API server never
	// answers is retried rather than waited for.
	listTimeout = time.Minute
	// maxUsersPerFlush: a change that can affect more users flushes all.
	maxUsersPerFlush = 64
	// maxPendingFlushes bounds the second flushes waiting; past it they
	// merge into one flush of everything.
	maxPendingFlushes = 64
)

// retryBackoff is how the watches retry after an error: client-go's
// reflector backoff (800 ms doubling, jitter up to +100%), capped at 5 s
// instead of 30 s, so that after an API server outage the revoker is in
// sync again within 5-10 s of its return rather than 30-60 s. While the API
// server is down each watch tries about every 7.5 s: for a node agent's
// three or four watches, about 0.5 attempts a second per node.
var retryBackoff = wait.Backoff{Duration: 800 * time.Millisecond, Factor: 2, Jitter: 1, Steps: 7, Cap: 5 * time.Second}

// Options configures a [Revoker]. [New] reads it once.
type Options struct {
	// Watch lists what to watch (at least one): [Pods] and [Node] need
	// NodeName; [Pods], [Node] and [ServiceAccounts] need Identities and
	// Metadata; [ClusterRoles] and [Roles] need Decisions and RBAC.
	Watch []Resource
	// NodeName is this node's name, for [Pods] and [Node].
	NodeName string
	// Namespaces, if not empty, limits [ServiceAccounts] and [Roles] to
	// these namespaces (one watch per namespace and resource); empty means
	// every namespace (one watch per resource). It needs one of them.
	Namespaces []string

	// Metadata reads pods, the node and ServiceAccounts, as metadata only.
	Metadata metadata.Interface
	// NodeMetadata, if not nil, reads this node's pods and Node instead of
	// Metadata: a client acting as the node (system:node:NodeName), whom
	// the API server's Node authorizer lets list and watch only this
	// node's pods and its own Node, as it confines the kubelet.
	NodeMetadata metadata.Interface
	// RBAC reads Roles, ClusterRoles and their bindings.
	RBAC rbacv1client.RbacV1Interface

	// Identities revokes cached identities.
	Identities IdentityRevoker
	// Decisions forgets cached authorization decisions.
	Decisions DecisionForgetter

	// SecondFlush is how long after an RBAC change its decisions are
	// flushed again. Zero means [DefaultSecondFlush]; negative means no
	// second flush.
	SecondFlush time.Duration
	// StallTimeout is how long a watch may deliver nothing (no event, no
	// bookmark) before it is restarted and the revoker is out of sync
	// until it has caught up. Zero means [DefaultStallTimeout]; it must
	// not be negative.
	StallTimeout time.Duration

	// Clock tells the time for second flushes, deletion deadlines, stall
	// timeouts and the watches' retries. Nil means the real clock.
	Clock clock.WithTicker
	// Metrics, if not nil, records reviewauth_revocation_synced and the
	// revocation counters.
	Metrics *metrics.Metrics
}

// Revoker watches what tokens are bound to and what decisions rest on, and
// revokes and flushes cached answers when those change. Build one with
// [New] or [NewForConfig]; nothing happens until [Revoker.Run]. Its methods
// are safe for concurrent use.
type Revoker struct {
	opts        Options
	clock       clock.WithTicker
	metrics     *observe.Recorder
	secondFlush time.Duration
	stall       time.Duration
	sources     []*source
	logger      logr.Logger // set by Run before anything can log
	running     atomic.Bool // Run was called
	stopped     atomic.Bool // Run returned
	wake        chan struct{}
	backoff     *wait.Backoff        // of the reflectors; nil: client-go's
	armed       func(next time.Time) // tests: called when Run's loop waits

	mu        sync.Mutex
	flushes   []pendingFlush         // due times increasing
	deadlines map[types.UID]deadline // revocations at deletionTimestamp + DeletionLeeway
	gauge     int                    // last value of the synced gauge: -1 unset, 0, 1
}

type pendingFlush struct {
	due   time.Time
	all   bool
	users map[string]struct{}
}

type deadline struct {
	at       time.Time
	resource string
}

// New returns a Revoker for opts, or an error naming what is wrong with
// them. It starts nothing.
func New(opts Options) (*Revoker, error) {
	if err := validate(&opts); err != nil {
		return nil, err
	}
	r := &Revoker{
		opts:        opts,
		clock:       opts.Clock,
		metrics:     observe.Of(opts.Metrics),
		secondFlush: opts.SecondFlush,
		stall:       opts.StallTimeout,
		logger:      klog.Background(),
		wake:        make(chan struct{}, 1),
		deadlines:   make(map[types.UID]deadline),
		gauge:       -1,
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	b := retryBackoff
	r.backoff = &b
	r.secondFlush = cmp.Or(r.secondFlush, DefaultSecondFlush)
	r.stall = cmp.Or(r.stall, DefaultStallTimeout)
	r.sources = r.newSources()
	return r, nil
}

// validate checks opts and normalizes Watch and Namespaces.
func validate(o *Options) error {
	var errs []error
	if len(o.Watch) == 0 {
		errs = append(errs, errors.New("revocation: nothing to watch"))
	}
	seen := make(map[Resource]bool)
	var watch []Resource
	for _, w := range o.Watch {
		if !slices.Contains(Resources, w) {
			errs = append(errs, fmt.Errorf("revocation: unknown resource %q (known: %v)", w, Resources))
			continue
		}
		if !seen[w] {
			seen[w] = true
			watch = append(watch, w)
		}
	}
	o.Watch = watch
	if (seen[Pods] || seen[Node]) && o.NodeName == "" {
		errs = append(errs, errors.New("revocation: watching pods or the node needs the node's name"))
	}
	if o.NodeName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(o.NodeName) {
			errs = append(errs, fmt.Errorf("revocation: node name %q: %s", o.NodeName, msg))
		}
	}
	if (seen[Pods] || seen[Node] || seen[ServiceAccounts]) && o.Identities == nil {
		errs = append(errs, errors.New("revocation: watching pods, the node or service accounts needs an IdentityRevoker"))
	}
	if (seen[ServiceAccounts] || ((seen[Pods] || seen[Node]) && o.NodeMetadata == nil)) && o.Metadata == nil {
		errs = append(errs, errors.New("revocation: watching pods, the node or service accounts needs a metadata client"))
	}
	if seen[ClusterRoles] || seen[Roles] {
		if o.Decisions == nil {
			errs = append(errs, errors.New("revocation: watching RBAC needs a DecisionForgetter"))
		}
		if o.RBAC == nil {
			errs = append(errs, errors.New("revocation: watching RBAC needs an RBAC client"))
		}
	}
	if len(o.Namespaces) > 0 && !seen[ServiceAccounts] && !seen[Roles] {
		errs = append(errs, errors.New("revocation: namespaces limit only service accounts and roles, and neither is watched"))
	}
	var ns []string
	for _, n := range o.Namespaces {
		for _, msg := range validation.IsDNS1123Label(n) {
			errs = append(errs, fmt.Errorf("revocation: namespace %q: %s", n, msg))
		}
		if !slices.Contains(ns, n) {
			ns = append(ns, n)
		}
	}
	o.Namespaces = ns
	if o.StallTimeout < 0 {
		errs = append(errs, errors.New("revocation: the stall timeout must not be negative"))
	}
	return errors.Join(errs...)
}

// NewForConfig returns [New] of opts, with Metadata and RBAC clients made
// from cfg when they are nil and needed (RBAC objects are read as
// protobuf).
func NewForConfig(cfg *rest.Config, opts Options) (*Revoker, error) {
	if cfg == nil {
		return nil, errors.New("revocation: NewForConfig with a nil config")
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = cmp.Or(cfg.UserAgent, rest.DefaultKubernetesUserAgent()) + " reviewauth-revocation"
	needs := func(rs ...Resource) bool {
		return slices.ContainsFunc(opts.Watch, func(w Resource) bool { return slices.Contains(rs, w) })
	}
	if opts.Metadata == nil && (needs(ServiceAccounts) || (opts.NodeMetadata == nil && needs(Pods, Node))) {
		c, err := metadata.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("revocation: %w", err)
		}
		opts.Metadata = c
	}
	if opts.RBAC == nil && needs(ClusterRoles, Roles) {
		pc := rest.CopyConfig(cfg)
		pc.ContentType = runtime.ContentTypeProtobuf
		pc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
		c, err := rbacv1client.NewForConfig(pc)
		if err != nil {
			return nil, fmt.Errorf("revocation: %w", err)
		}
		opts.RBAC = c
	}
	return New(opts)
}

// ErrRunning is returned by a second call of [Revoker.Run].
var ErrRunning = errors.New("revocation: Run called twice")

// Run watches until ctx is done, then stops every watch and timer it
// started, waits for them, and returns nil. It logs through
// klog.FromContext(ctx). Run may be called once; a second call returns
// [ErrRunning].
func (r *Revoker) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	r.logger = klog.FromContext(ctx).WithName("revocation")
	ctx, cancel := context.WithCancel(klog.NewContext(ctx, r.logger))
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		r.stopped.Store(true)
		r.mu.Lock()
		r.gauge = 0
		r.metrics.RevocationSynced(false)
		r.mu.Unlock()
	}()
	r.updateSynced()
	for _, s := range r.sources {
		wg.Go(func() { s.run(ctx) })
	}
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		next := r.step()
		var fire <-chan time.Time
		if !next.IsZero() {
			d := max(next.Sub(r.clock.Now()), 0)
			if timer == nil {
				timer = r.clock.NewTimer(d)
			} else {
				timer.Stop()
				timer.Reset(d)
			}
			fire = timer.C()
		}
		if r.armed != nil {
			r.armed(next)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-fire:
		case <-r.wake:
		}
	}
}

// Synced reports whether the revoker is in sync: it runs, every watch has
// listed since its last error, and none has been silent past the stall
// timeout. While it is not, cached answers live their TTLs.
func (r *Revoker) Synced() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.syncedLocked(r.clock.Now())
}

func (r *Revoker) syncedLocked(now time.Time) bool {
	if !r.running.Load() || r.stopped.Load() {
		return false
	}
	for _, s := range r.sources {
		if !s.listed || (s.watching && now.Sub(s.lastSeen) >= r.stall) {
			return false
		}
	}
	return true
}

// updateSynced sets the gauge when the state changed, and logs the change.
// The gauge is set under r.mu: set after it, a caller that found the
// revoker in sync could set it after a later one that found it out of
// sync, and leave it at 1.
func (r *Revoker) updateSynced() {
	r.mu.Lock()
	ok := r.syncedLocked(r.clock.Now())
	v := 0
	if ok {
		v = 1
	}
	changed := r.gauge != v
	was := r.gauge
	r.gauge = v
	if changed {
		r.metrics.RevocationSynced(ok)
	}
	r.mu.Unlock()
	if !changed {
		return
	}
	switch {
	case ok:
		r.logger.Info("In sync: deleted objects and RBAC changes now revoke cached identities and decisions at once")
	case was == 1:
		r.logger.Info("Out of sync: cached identities and decisions live their TTLs until the watches catch up")
	}
}

// poke wakes Run's loop.
func (r *Revoker) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// step does what is due: second flushes, revocations at deletion
// deadlines, stalled watches. It returns when it is next needed (zero:
// only when poked).
func (r *Revoker) step() time.Time {
	now := r.clock.Now()
	var next time.Time
	soonest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	r.mu.Lock()
	var due []pendingFlush
	for len(r.flushes) > 0 && !r.flushes[0].due.After(now) {
		due = append(due, r.flushes[0])
		r.flushes = r.flushes[1:]
	}
	if len(r.flushes) > 0 {
		soonest(r.flushes[0].due)
	}
	expired := make(map[string][]types.UID)
	for uid, d := range r.deadlines {
		if d.at.After(now) {
			soonest(d.at)
			continue
		}
		expired[d.resource] = append(expired[d.resource], uid)
		delete(r.deadlines, uid)
	}
	var stalled []*source
	for _, s := range r.sources {
		if !s.watching {
			continue
		}
		if end := s.lastSeen.Add(r.stall); end.After(now) {
			soonest(end)
			continue
		}
		stalled = append(stalled, s)
		s.listed = false
		s.lastSeen = now
		soonest(now.Add(r.stall))
	}
	r.mu.Unlock()

	if len(due) > 0 {
		f := pendingFlush{users: make(map[string]struct{})}
		for _, d := range due {
			f.all = f.all || d.all
			for u := range d.users {
				f.users[u] = struct{}{}
			}
		}
		r.forget(f.all, f.users)
	}
	for resource, uids := range expired {
		slices.Sort(uids)
		r.revoke(resource, uids, "deleted past the API server's leeway")
	}
	if len(stalled) > 0 {
		// Out of sync before a stalled watch is restarted: the new watch
		// opens at once, and the gauge must not say 1 once it is open
		// (set after the restart, TestStalledWatch found it at 1 in 3-8
		// of 300 runs; 0 of 300 now).
		r.updateSynced()
	}
	for _, s := range stalled {
		r.logger.Info("Watch delivered nothing, not even a bookmark: restarting it", "resource", s.name, "stallTimeout", r.stall)
		r.metrics.RevocationResync(s.resource, "stalled")
		s.stopWatch()
	}
	r.updateSynced()
	return next
}

// revoke revokes uids, bound to objects of resource.
func (r *Revoker) revoke(resource string, uids []types.UID, why string) {
	if len(uids) == 0 {
		return
	}
	r.metrics.Revoked(resource, len(uids))
	r.opts.Identities.Revoke(uids...)
	r.logger.V(2).Info("Revoked cached identities", "resource", resource, "uids", uids, "why", why)
}

// schedule arranges for uid to be revoked at at, unless it is revoked
// before.
func (r *Revoker) schedule(uid types.UID, at time.Time, resource string) {
	r.mu.Lock()
	d, ok := r.deadlines[uid]
	if ok && d.at.Equal(at) {
		r.mu.Unlock()
		return
	}
	r.deadlines[uid] = deadline{at: at, resource: resource}
	r.mu.Unlock()
	r.poke()
}

// unschedule forgets uid's deadline.
func (r *Revoker) unschedule(uids ...types.UID) {
	r.mu.Lock()
	for _, u := range uids {
		delete(r.deadlines, u)
	}
	r.mu.Unlock()
}

// flush forgets the decisions of users (all of them when all), now and
// again after the second-flush delay.
func (r *Revoker) flush(all bool, users map[string]struct{}) {
	if !all && len(users) == 0 {
		return
	}
	if len(users) > maxUsersPerFlush {
		all, users = true, nil
	}
	r.forget(all, users)
	if r.secondFlush < 0 {
		return
	}
	r.mu.Lock()
	if len(r.flushes) >= maxPendingFlushes {
		r.flushes = r.flushes[:0]
		all, users = true, nil
	}
	r.flushes = append(r.flushes, pendingFlush{due: r.clock.Now().Add(r.secondFlush), all: all, users: users})
	r.mu.Unlock()
	r.poke()
}

func (r *Revoker) forget(all bool, users map[string]struct{}) {
	if all || len(users) > maxUsersPerFlush {
		r.metrics.DecisionsFlushed("all", 1)
		r.opts.Decisions.ForgetAll()
		r.logger.V(2).Info("Flushed every cached decision")
		return
	}
	names := make([]string, 0, len(users))
	for u := range users {
		names = append(names, u)
	}
	slices.Sort(names)
	r.metrics.DecisionsFlushed("user", len(names))
	for _, u := range names {
		r.opts.Decisions.ForgetUser(u)
	}
	r.logger.V(2).Info("Flushed cached decisions", "users", names)
}
