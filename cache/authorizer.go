package cache

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"hash/maphash"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth"
	icache "github.com/reviewauth/reviewauth/internal/cache"
	"github.com/reviewauth/reviewauth/internal/observe"
	"github.com/reviewauth/reviewauth/metrics"
)

// Defaults of [AuthorizerOptions], used for its zero fields. authz's
// defaults are these.
const (
	// DefaultAllowedTTL is how long an Allow is cached. The kubelet keeps
	// one for 5 minutes and k8s.io/apiserver's delegated authorizer for 10
	// seconds. One minute bounds how long a revoked RoleBinding keeps
	// working to what operators expect of "eventually", while a client
	// polling every 10-30 seconds (a Prometheus scrape, a CSI backup
	// stream) costs one SubjectAccessReview a minute instead of one per
	// request.
	DefaultAllowedTTL = time.Minute

	// DefaultDeniedTTL is how long a Deny or a NoOpinion is cached. The
	// kubelet uses 30 seconds and the delegated apiserver 10. A denial is
	// usually followed by someone fixing RBAC and trying again, so it is
	// kept short; coalescing already keeps a retrying herd of denied
	// callers to one review at a time.
	DefaultDeniedTTL = 10 * time.Second

	// DefaultAuthorizerMaxEntries bounds an [Authorizer]'s cache, like the
	// 8192-entry LRU of k8s.io/apiserver's webhook authorizer. An entry
	// holds the attributes' canonical encoding (a few hundred bytes for a
	// service account), so a full cache takes a few MiB. Callers who fill
	// every entry with attributes just under
	// [DefaultMaxCacheableAttributeBytes] could make it take about 80 MiB,
	// the same bound as k8s.io/apiserver's webhook, whose LRU is keyed by
	// the review's JSON; lower MaxEntries or MaxCacheableAttributeBytes
	// where memory is tight.
	DefaultAuthorizerMaxEntries = 8192

	// DefaultMaxCacheableAttributeBytes is the size of caller-controlled
	// attributes from which a decision is not cached, as in
	// k8s.io/apiserver.
	DefaultMaxCacheableAttributeBytes = 10000
)

// AuthorizerOptions configures an [Authorizer]. Every zero value means the
// default named in its comment. [NewAuthorizer] reads it once: changing it
// afterwards has no effect.
type AuthorizerOptions struct {
	// AllowedTTL is how long an Allow is cached. Zero means
	// [DefaultAllowedTTL]; negative disables caching of Allows (and with it
	// StaleIfError).
	AllowedTTL time.Duration
	// DeniedTTL is how long a Deny or a NoOpinion is cached. Zero means
	// [DefaultDeniedTTL]; negative disables caching of them.
	DeniedTTL time.Duration
	// MaxEntries bounds the number of cached decisions. Zero or negative
	// means [DefaultAuthorizerMaxEntries].
	MaxEntries int

	// MaxCacheableAttributeBytes: a request whose caller-controlled
	// attributes (namespace, verb, group, version, resource, subresource,
	// name, path, and the field and label selectors) add up to this many
	// bytes or more is never cached, so that a caller cannot fill the cache
	// with large entries. Such requests are still coalesced: concurrent
	// identical ones share one call. Zero or negative means
	// [DefaultMaxCacheableAttributeBytes].
	MaxCacheableAttributeBytes int

	// StaleIfError, when positive, lets a cached Allow be served for up to
	// this long past AllowedTTL, but only while the wrapped authorizer
	// cannot check (its error matches reviewauth.ErrUnavailable). It has no
	// effect when caching of Allows is disabled. Denials and NoOpinions are
	// never extended, and a fresh answer replaces the stale Allow. Each
	// stale serve is counted in reviewauth_stale_serves_total{cache=<Name>}.
	// Zero (the default) disables it: an outage is reported as such.
	StaleIfError time.Duration

	// CacheKeyIgnoredExtras lists user extra keys left out of the cache
	// key: requests that differ only in them share one entry (and one
	// coalesced call), and the wrapped authorizer sees the extras of the
	// caller that missed. Nil (the default) leaves every extra in the key:
	// a wrapped authorizer may decide on any of them. authz ignores the
	// credential-id extra, which its SubjectAccessReview's authorizers (RBAC,
	// Node) never read.
	CacheKeyIgnoredExtras []string

	// SubjectAccessReviewKey keys decisions on the
	// authorization.k8s.io/v1 SubjectAccessReview the attributes make, as
	// authz builds it, rather than on every attribute: requests that make
	// the same review share an entry (for a non-resource request only the
	// path and verb count; selector operators a review cannot carry are
	// left out, as the review leaves them out). Set it only when the
	// wrapped authorizer decides on that review and nothing else, as
	// authz's SubjectAccessReview client does.
	SubjectAccessReviewKey bool

	// Timeout bounds the call shared by the callers that miss on one key.
	// No caller's deadline bounds it for the others. Zero or negative means
	// [DefaultTimeout].
	Timeout time.Duration

	// Clock tells the time for expiry. Nil means the real clock.
	Clock clock.PassiveClock

	// Metrics, if not nil, records the cache (hits, misses, evictions,
	// entries, coalesced waits) as cache=<Name>, and stale serves. It does
	// not keep the Authorizer alive.
	Metrics *metrics.Metrics
	// Name names the cache in Metrics. Empty means "authorizer".
	Name string

	// TracerProvider, if not nil, is used for one OpenTelemetry span per
	// Authorize or ConditionsAwareAuthorize call, named SpanName, with the
	// attributes reviewauth.verb, reviewauth.resource,
	// reviewauth.subresource, reviewauth.path, reviewauth.cache_hit and
	// reviewauth.decision. Nil means no spans, at no cost.
	TracerProvider trace.TracerProvider
	// SpanName names the spans. Empty means "reviewauth.cache.Authorize".
	SpanName string
}

// Authorizer is an [authorizer.Authorizer] that caches the decisions of the
// authorizer.Authorizer it wraps. The package documentation says what it
// caches and for how long. It implements the whole interface of
// k8s.io/apiserver v0.37: it fits filters.WithAuthorization and union.New.
// It is safe for concurrent use if the wrapped authorizer is. Build one with
// [NewAuthorizer]; the zero Authorizer is not usable. It starts one
// goroutine per shared call, which ends with the call.
type Authorizer struct {
	inner        authorizer.Authorizer
	enc          icache.AttributeEncoder
	seed1, seed2 maphash.Seed
	keyer        *icache.Keyer
	collide      bool // tests only: every encoding gets the same lookup key
	cache        *icache.Cache[decision]
	group        icache.Group[loaded]
	clock        clock.PassiveClock
	allowedTTL   time.Duration
	deniedTTL    time.Duration
	maxAttrBytes int
	stale        time.Duration
	name         string
	spanName     string
	metrics      *observe.Recorder
	tracer       trace.Tracer
	forget       forgetting
}

var _ authorizer.Authorizer = (*Authorizer)(nil)

// decision is what the cache keeps for one request: the answer, and the
// request's full encoding, compared on every hit (see [Authorizer.lookup]).
type decision struct {
	d      authorizer.Decision
	reason string
	enc    string
	fresh  time.Time // with StaleIfError: when an Allow stops being fresh
	user   string    // the user's name, for ForgetUser
	notes  *notes    // replayed with every answer
}

// loaded is what a shared call hands its callers: a decision, or a
// conditional decision (of ConditionsAwareAuthorize), which is never
// cached.
type loaded struct {
	v    decision
	cond *authorizer.ConditionsAwareDecision
}

// The two kinds of call, whose decisions are cached apart: a
// conditions-aware authorizer may answer Authorize with a fail-closed Deny
// where ConditionsAwareAuthorize has conditions. The kind is the first byte
// of a request's encoding.
const (
	kindAuthorize       byte = 'U'
	kindConditionsAware byte = 'C'
)

// NewAuthorizer returns an Authorizer that caches inner's decisions as opts
// says. When inner is itself a cache (it has a method Uncached()
// authorizer.Authorizer, as [Authorizer] and authz.Authorizer do), the new
// one wraps what that one wraps, with opts, rather than putting a cache in
// front of a cache. It fails when inner is nil; it validates nothing else,
// since every value of opts means something.
func NewAuthorizer(inner authorizer.Authorizer, opts AuthorizerOptions) (*Authorizer, error) {
	if u, ok := inner.(interface{ Uncached() authorizer.Authorizer }); ok {
		inner = u.Uncached()
	}
	if inner == nil {
		return nil, errors.New("cache: NewAuthorizer with a nil authorizer")
	}
	a := &Authorizer{
		inner:        inner,
		enc:          icache.AttributeEncoder{SubjectAccessReview: opts.SubjectAccessReviewKey},
		seed1:        maphash.MakeSeed(),
		seed2:        maphash.MakeSeed(),
		keyer:        icache.NewKeyer(),
		clock:        opts.Clock,
		allowedTTL:   cmp.Or(opts.AllowedTTL, DefaultAllowedTTL),
		deniedTTL:    cmp.Or(opts.DeniedTTL, DefaultDeniedTTL),
		maxAttrBytes: positive(opts.MaxCacheableAttributeBytes, DefaultMaxCacheableAttributeBytes),
		stale:        opts.StaleIfError,
		name:         cmp.Or(opts.Name, "authorizer"),
		spanName:     cmp.Or(opts.SpanName, "reviewauth.cache.Authorize"),
		metrics:      observe.Of(opts.Metrics),
	}
	for _, x := range opts.CacheKeyIgnoredExtras {
		if !slices.Contains(a.enc.Ignored, x) {
			a.enc.Ignored = append(a.enc.Ignored, x)
		}
	}
	if a.clock == nil {
		a.clock = clock.RealClock{}
	}
	a.forget.seed = a.seed1
	if opts.TracerProvider != nil {
		a.tracer = opts.TracerProvider.Tracer(TracerName)
	}
	a.cache = icache.New[decision](icache.Options{MaxEntries: positive(opts.MaxEntries, DefaultAuthorizerMaxEntries), Clock: a.clock})
	a.group.Timeout = positive(opts.Timeout, DefaultTimeout)
	a.group.Counters = a.cache.Counters()
	a.metrics.AddCache(a.name, a.cache.Counters())
	return a, nil
}

// Uncached returns the authorizer a wraps.
func (a *Authorizer) Uncached() authorizer.Authorizer { return a.inner }

// errNilAttributes is the answer to nil attributes.
var errNilAttributes = &reviewauth.ReviewError{Review: reviewAttributes, Err: errors.New("cache: nil attributes")}

// Authorize implements [authorizer.UnconditionalAuthorizer]. It answers from
// the cache when it can; otherwise it asks the wrapped authorizer once for
// every concurrent identical request. A caller whose ctx ends first returns
// at once with DecisionDeny and a *[reviewauth.ReviewError] wrapping
// ctx.Err(); the shared call goes on for the others and is cancelled when
// every caller has left. Otherwise the answer is the wrapped authorizer's
// decision, reason and error, as they are (an error with an Allow
// included: the edges, httpauth, grpcauth and authz.Check, refuse any
// answer with an error), or a cached copy of them, with the warnings and
// audit annotations its call recorded. Errors are never cached.
//
// On a hit Authorize does not allocate (selectors included), unless the
// user has more than 32 groups or 16 extra keys, or a label requirement
// has many values.
func (a *Authorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if attrs == nil {
		return authorizer.DecisionDeny, "", errNilAttributes
	}
	if a.tracer != nil {
		v, _, err := a.traced(ctx, attrs, kindAuthorize)
		return v.d, v.reason, err
	}
	// The hit path of decide, by hand, so that a hit returns without
	// copying a loaded (BenchmarkSARHit).
	bp := icache.GetKeyBuf()
	enc := a.enc.Append(append((*bp)[:0], kindAuthorize), attrs)
	key := a.lookup(enc)
	v, ok := a.cache.Get(key)
	if ok && v.enc == string(enc) && a.fresh(&v) {
		icache.PutKeyBuf(bp, enc)
		v.notes.replay(ctx)
		return v.d, v.reason, nil
	}
	l, err, _ := a.missed(ctx, attrs, kindAuthorize, bp, enc, key, v, ok)
	return l.v.d, l.v.reason, err
}

// ConditionsAwareAuthorize implements [authorizer.Authorizer]: as
// Authorize, over the wrapped authorizer's ConditionsAwareAuthorize. An
// unconditional decision is cached (apart from those of Authorize); a
// conditional one is shared by the concurrent identical requests that
// asked for it, and never cached.
func (a *Authorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	if attrs == nil {
		return authorizer.ConditionsAwareDecisionDeny("", errNilAttributes)
	}
	var l loaded
	var err error
	if a.tracer != nil {
		l.v, l.cond, err = a.traced(ctx, attrs, kindConditionsAware)
	} else {
		l, err, _ = a.decide(ctx, attrs, kindConditionsAware)
	}
	if l.cond != nil && err == nil {
		return *l.cond
	}
	return authorizer.ConditionsAwareDecisionFromParts(l.v.d, l.v.reason, err)
}

// EvaluateConditions implements [authorizer.Authorizer]: the wrapped
// authorizer evaluates its own conditions, uncached.
func (a *Authorizer) EvaluateConditions(ctx context.Context, d authorizer.ConditionsAwareDecision, data authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return a.inner.EvaluateConditions(ctx, d, data)
}

func (a *Authorizer) traced(ctx context.Context, attrs authorizer.Attributes, kind byte) (decision, *authorizer.ConditionsAwareDecision, error) {
	ctx, span := a.tracer.Start(ctx, a.spanName, trace.WithAttributes(
		attribute.String("reviewauth.verb", attrs.GetVerb()),
		attribute.String("reviewauth.resource", attrs.GetResource()),
		attribute.String("reviewauth.subresource", attrs.GetSubresource()),
		attribute.String("reviewauth.path", attrs.GetPath()),
	))
	defer span.End()
	l, err, hit := a.decide(ctx, attrs, kind)
	name := decisionName(l.v.d, err)
	if l.cond != nil && err == nil {
		name = "conditional"
	}
	span.SetAttributes(attribute.Bool("reviewauth.cache_hit", hit), attribute.String("reviewauth.decision", name))
	if err != nil {
		span.SetStatus(codes.Error, "review unavailable")
	}
	return l.v, l.cond, err
}

func decisionName(d authorizer.Decision, err error) string {
	switch {
	case err != nil:
		return "unavailable"
	case d == authorizer.DecisionAllow:
		return "allowed"
	case d == authorizer.DecisionNoOpinion:
		return "no_opinion"
	default:
		return "denied"
	}
}

// lookup returns the lookup key of the encoding enc: two 64-bit
// hash/maphash sums under random per-Authorizer seeds. It is fast but not
// collision-resistant, so every entry stores the full encoding and a hit
// counts only if the stored encoding equals the request's (a full-key
// compare on every hit): a collision can only cost a miss.
func (a *Authorizer) lookup(enc []byte) icache.Key {
	var key icache.Key
	if a.collide {
		return key
	}
	binary.LittleEndian.PutUint64(key[:8], maphash.Bytes(a.seed1, enc))
	binary.LittleEndian.PutUint64(key[8:16], maphash.Bytes(a.seed2, enc))
	return key
}

// callKey returns the key under which concurrent misses of the encoding
// enc share one call: a collision there would hand one request's answer
// to another, so it is a PRF keyed by a random per-process secret
// (internal/cache.Keyer), computed on misses only.
func (a *Authorizer) callKey(enc string) icache.Key {
	h := a.keyer.NewHash()
	h.WriteString(enc)
	return h.Sum()
}

// fresh reports whether the cached v may be served without asking.
func (a *Authorizer) fresh(v *decision) bool {
	return a.stale <= 0 || v.d != authorizer.DecisionAllow || a.clock.Now().Before(v.fresh)
}

// decide is Authorize and ConditionsAwareAuthorize, by kind; hit reports
// whether the cache answered.
func (a *Authorizer) decide(ctx context.Context, attrs authorizer.Attributes, kind byte) (_ loaded, _ error, hit bool) {
	bp := icache.GetKeyBuf()
	enc := a.enc.Append(append((*bp)[:0], kind), attrs)
	key := a.lookup(enc)
	v, ok := a.cache.Get(key)
	if ok && v.enc == string(enc) && a.fresh(&v) {
		icache.PutKeyBuf(bp, enc)
		v.notes.replay(ctx)
		return loaded{v: v}, nil, true
	}
	return a.missed(ctx, attrs, kind, bp, enc, key, v, ok)
}

// missed is decide after a lookup of the encoding enc (in the pooled
// buffer bp) under key that found v (if ok) but no fresh decision.
func (a *Authorizer) missed(ctx context.Context, attrs authorizer.Attributes, kind byte, bp *[]byte, enc []byte, key icache.Key, v decision, ok bool) (_ loaded, _ error, hit bool) {
	stale, haveStale := v, ok && v.enc == string(enc)
	encs := string(enc)
	icache.PutKeyBuf(bp, enc)
	l, err := a.miss(ctx, key, encs, attrs, kind)
	if err == nil {
		l.v.notes.replay(ctx)
		return l, nil, false
	}
	if werr, ok := fromWait(ctx, err, reviewAttributes, ""); ok {
		// The cache's own error (this caller left, or the call
		// panicked) comes with a Deny: no decision was made for it.
		return loaded{v: decision{d: authorizer.DecisionDeny}}, werr, false
	}
	if cur, ok := a.cache.Peek(key); haveStale && ok && cur == stale && errors.Is(err, reviewauth.ErrUnavailable) {
		// Stale-if-error: an Allow less than StaleIfError past its TTL,
		// served only because the wrapped authorizer cannot check.
		// The second look makes sure it was not forgotten meanwhile.
		a.metrics.StaleServe(a.name)
		klog.FromContext(ctx).V(2).Info("Serving a stale Allow: the authorizer cannot check", "err", err)
		stale.notes.replay(ctx)
		return loaded{v: stale}, nil, true
	}
	// The wrapped authorizer's error, with its decision and reason.
	l.v.notes.replay(ctx)
	return l, err, false
}

// miss is the miss path of decide, kept apart so that the hit path
// allocates nothing for the closure.
func (a *Authorizer) miss(ctx context.Context, key icache.Key, enc string, attrs authorizer.Attributes, kind byte) (loaded, error) {
	if err := ctx.Err(); err != nil {
		return loaded{}, err
	}
	cacheable := icache.AttributeBytes(attrs, a.enc.SubjectAccessReview) < a.maxAttrBytes
	// The shared call runs under the Group's detached context and its
	// timeout alone; each caller leaves when its own ctx ends, or when the
	// call's next attempt is due after its deadline (Postpone).
	l, _, err := a.group.Do(ctx, a.callKey(enc), func(lctx context.Context) (loaded, error) {
		return a.load(lctx, key, enc, attrs, kind, cacheable)
	})
	return l, err
}

// load runs one shared call and caches its decision. Its error comes with
// the wrapped authorizer's reason.
func (a *Authorizer) load(ctx context.Context, key icache.Key, enc string, attrs authorizer.Attributes, kind byte, cacheable bool) (loaded, error) {
	// A caller that missed the cache just as the previous shared call
	// finished starts a new one; its answer is already cached. This second
	// look is part of the caller's lookup: it counts no hit or miss.
	if v, ok := a.cache.Peek(key); ok && v.enc == enc && a.fresh(&v) {
		return loaded{v: v}, nil
	}
	var name string
	if u := attrs.GetUser(); u != nil {
		name = u.GetName()
	}
	gen := a.forget.generation(name)
	rctx, recorded := recording(ctx)
	var d authorizer.Decision
	var reason string
	var err error
	if kind == kindAuthorize {
		d, reason, err = a.inner.Authorize(rctx, attrs)
	} else {
		cad := a.inner.ConditionsAwareAuthorize(rctx, attrs)
		if !cad.IsUnconditional() {
			return loaded{cond: &cad, v: decision{notes: recorded()}}, nil
		}
		switch {
		case cad.IsAllow():
			d = authorizer.DecisionAllow
		case cad.IsNoOpinion():
			d = authorizer.DecisionNoOpinion
		}
		reason, err = cad.Reason(), cad.Error()
	}
	v := decision{d: d, reason: reason, enc: enc, user: name, notes: recorded()}
	if err != nil {
		// Never cached; the decision and reason come back as they are
		// (union.New reads a NoOpinion with an error as "ask the
		// next one"), the error too unless the call's context ended.
		if couldNotCheck(ctx, err) {
			err = asUnavailable(ctx, err, reviewAttributes)
		} else {
			// Not "could not check": an answer, which replaces a
			// stale Allow (see stale.go).
			a.cache.Delete(key)
		}
		return loaded{v: v}, err
	}
	// A decision made after the call's context ended (every caller left,
	// or Timeout) is not cached: it may be an artefact of the
	// cancellation, and nobody may be left to receive it.
	if cacheable && ctx.Err() == nil {
		a.store(key, v, gen)
	} else {
		a.cache.Delete(key) // an answer all the same: no stale Allow outlives it
	}
	return loaded{v: v}, nil
}

// store caches v under key, unless a forget has moved the generation of
// its user past gen (read before the wrapped authorizer was asked): it
// decides under the forgetting's read lock, so that a concurrent
// ForgetUser or ForgetAll either finds v in the cache or keeps it out.
func (a *Authorizer) store(key icache.Key, v decision, gen uint64) {
	ttl := a.deniedTTL
	keep := ttl
	if v.d == authorizer.DecisionAllow {
		ttl = a.allowedTTL
		keep = retention(ttl, a.stale)
	}
	v.fresh = a.clock.Now().Add(ttl)
	a.forget.mu.RLock()
	defer a.forget.mu.RUnlock()
	if a.forget.generation(v.user) != gen {
		return
	}
	// A non-positive TTL stores nothing and drops any stale Allow.
	a.cache.Set(key, v, keep)
}
