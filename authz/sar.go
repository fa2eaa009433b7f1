package authz

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/internal/cache"
	"github.com/reviewauth/reviewauth/internal/observe"
	"github.com/reviewauth/reviewauth/internal/review"
	"github.com/reviewauth/reviewauth/metrics"
)

const reviewName = "SubjectAccessReview"

// Defaults used for the zero fields of [Options].
const (
	// DefaultAllowedTTL is how long an Allow is cached. The kubelet keeps
	// one for 5 minutes and k8s.io/apiserver's delegated authorizer for 10
	// seconds. One minute bounds how long a revoked RoleBinding keeps
	// working to what operators expect of "eventually", while a client
	// polling every 10-30 seconds (a Prometheus scrape, a CSI backup
	// stream) costs one SAR a minute instead of one per request.
	DefaultAllowedTTL = time.Minute

	// DefaultDeniedTTL is how long a Deny or a NoOpinion is cached. The
	// kubelet uses 30 seconds and the delegated apiserver 10. A denial is
	// usually followed by someone fixing RBAC and trying again, so it is
	// kept short; coalescing already keeps a retrying herd of denied
	// callers to one SAR at a time.
	DefaultDeniedTTL = 10 * time.Second

	// DefaultMaxEntries bounds the cache, like the 8192-entry LRU of
	// k8s.io/apiserver's webhook authorizer. An entry holds the review's
	// canonical encoding (a few hundred bytes for a service account), so a
	// full cache takes a few MiB. Callers who fill every entry with
	// attributes just under [DefaultMaxCacheableAttributeBytes] could make
	// it take about 80 MiB, the same bound as k8s.io/apiserver's webhook,
	// whose LRU is keyed by the review's JSON; lower MaxEntries or
	// MaxCacheableAttributeBytes where memory is tight.
	DefaultMaxEntries = 8192

	// DefaultMaxCacheableAttributeBytes is the size of caller-controlled
	// attributes from which a result is not cached, as in k8s.io/apiserver.
	DefaultMaxCacheableAttributeBytes = 10000

	// DefaultTimeout is the total budget of one review, retries and waits
	// included.
	DefaultTimeout = 10 * time.Second

	// DefaultAttemptTimeout bounds each request of a review, as in authn:
	// a request unanswered after 3s is stuck, and waiting longer would
	// spend the budget its retries need (with the 10s budget, a review whose
	// first request hangs still gets two more full attempts).
	DefaultAttemptTimeout = review.DefaultAttemptTimeout

	// DefaultMaxInFlight bounds the SubjectAccessReviews in flight at once.
	// A healthy API server answers a SAR in a few milliseconds, so 16
	// slots carry thousands of SARs a second, far more than a cache-fronted
	// agent needs; the bound matters when the API server is slow, where it
	// keeps a node agent from piling hundreds of requests onto it (every
	// node runs one, and the API server is shared by all of them). It is
	// the same bound authn uses for TokenReviews.
	DefaultMaxInFlight = review.DefaultMaxInFlight
)

// Options configures an [Authorizer]. The zero value gives the defaults
// documented on each field. [New] reads Options once: changing it
// afterwards has no effect.
type Options struct {
	// AllowedTTL is how long an Allow is cached. Zero means
	// [DefaultAllowedTTL]; a negative value disables caching of Allows.
	AllowedTTL time.Duration

	// DeniedTTL is how long a Deny or a NoOpinion is cached. Zero means
	// [DefaultDeniedTTL]; a negative value disables caching of them.
	// Errors are never cached.
	DeniedTTL time.Duration

	// MaxEntries bounds the number of cached decisions. Zero or negative
	// means [DefaultMaxEntries].
	MaxEntries int

	// MaxCacheableAttributeBytes: a request whose caller-controlled
	// attributes (namespace, verb, group, version, resource, subresource,
	// name, path, and the field and label selectors) add up to this many
	// bytes or more is never cached, so a caller cannot fill the cache
	// with large entries. Such requests are still coalesced: concurrent
	// identical ones share one SAR. Zero or negative means
	// [DefaultMaxCacheableAttributeBytes].
	MaxCacheableAttributeBytes int

	// Timeout is the total budget of one review, retries included. Zero or
	// negative means [DefaultTimeout]. It bounds the review shared by concurrent
	// identical calls; no caller's deadline bounds it for the others.
	Timeout time.Duration

	// AttemptTimeout bounds each request of a review, so that one request
	// that hangs leaves the budget to its retries; a request cut by it is
	// retried. It is in real time, like Timeout. Zero means
	// [DefaultAttemptTimeout]; negative means no bound but Timeout.
	AttemptTimeout time.Duration

	// Backoff spaces retries, exactly as in authn: Steps is the number of
	// retries, and the waits grow from Duration by Factor, with Jitter, up
	// to Cap. A Retry-After from the API server replaces a shorter wait,
	// and no wait may end past the review's deadline (see
	// [Authorizer.Authorize]). Zero means 100ms doubling with 20% jitter, 4
	// retries, capped at 2s. Steps < 0 disables retries. Retried: 429, 5xx,
	// connection refused or reset, EOF, timeouts; any other 4xx is not.
	Backoff wait.Backoff

	// MaxInFlight bounds the SubjectAccessReviews in flight at once;
	// callers past it wait, subject to their context. Zero or negative
	// means [DefaultMaxInFlight].
	MaxInFlight int

	// Clock tells the time for cache expiry and retry waits. Nil means the
	// real clock. Deadlines (Timeout, the caller's) are in real time, as
	// contexts are.
	Clock clock.Clock

	// Metrics, if not nil, records reviews, retries, reviews in flight,
	// reviews the API server refused to perform for this service
	// (review="SubjectAccessReview") and the cache (cache="sar"). It does
	// not keep the Authorizer alive.
	Metrics *metrics.Metrics

	// StaleIfError, when positive, lets a cached Allow be served for up to
	// this long past AllowedTTL, but only while the API server cannot be
	// asked (the review fails with reviewauth.ErrUnavailable). Denials and
	// NoOpinions are never extended, and a fresh answer replaces the stale
	// Allow. Each stale serve is counted in
	// reviewauth_stale_serves_total{cache="sar"}. Zero (the default)
	// disables it: an outage is reported as such.
	StaleIfError time.Duration

	// CacheKeyIgnoredExtras lists user extra keys left out of the cache
	// key: two reviews that differ only in these extras share one cache
	// entry (and one coalesced review). The SubjectAccessReview sent still
	// carries every extra of the caller that missed. Nil means
	// []string{[CredentialIDExtra]}; an empty, non-nil slice leaves every
	// extra in the key.
	//
	// The default exists because a bound service-account token's review
	// carries credential-id "JTI=<unique>", so a client that mints a token
	// per call (the upstream CSI snapshot-metadata iterator does) would
	// otherwise cost a SubjectAccessReview per call. Leaving it out is
	// safe for RBAC and Node authorization, which decide on the user name
	// and groups only and never read extras. Keep it in the key (pass an
	// empty slice) if an authorizer in the cluster decides on it: a
	// webhook, or an AuthorizationConfiguration match condition reading
	// request.extra. The pod and node extras
	// (authentication.kubernetes.io/pod-name, pod-uid, node-name,
	// node-uid) stay in the key by default: they identify the caller's pod
	// and node, which such authorizers may check, and they are the same
	// for every token of one pod, so they cost one entry per pod.
	CacheKeyIgnoredExtras []string

	// TracerProvider, if not nil, is used for OpenTelemetry spans: one per
	// Authorize call (attributes: verb, resource or path, cache hit,
	// decision) and one per SubjectAccessReview sent. Nil means no spans,
	// at no cost.
	TracerProvider trace.TracerProvider
}

// SubjectAccessReviewer creates SubjectAccessReviews; Create must be safe for
// concurrent use. client-go's
// k8s.io/client-go/kubernetes/typed/authorization/v1.SubjectAccessReviewInterface
// satisfies it. Create must return the review as the API server does, with
// its spec echoed and its status filled in: an answer whose spec has neither
// resource nor non-resource attributes is treated as malformed ("could not
// check").
type SubjectAccessReviewer interface {
	Create(ctx context.Context, sar *authorizationv1.SubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error)
}

// decision is what the cache keeps for one review: the answer, and the
// review's full encoding, compared on every hit (see [keys]).
type decision struct {
	d      authorizer.Decision
	reason string
	enc    string
	fresh  time.Time // with StaleIfError: when an Allow stops being fresh
}

// Authorizer authorizes requests with authorization.k8s.io/v1
// SubjectAccessReviews, with a bounded cache, coalescing of concurrent
// identical reviews, bounded retries and a bound on reviews in flight.
//
// Authorizer implements the whole [authorizer.Authorizer] of
// k8s.io/apiserver v0.37: it can be passed to filters.WithAuthorization
// (which takes the narrower [authorizer.UnconditionalAuthorizer]) and to
// union.New (which takes [authorizer.Authorizer]). It is not
// conditions-aware: ConditionsAwareAuthorize returns the unconditional
// decision of Authorize, and EvaluateConditions always denies with
// [authorizer.ErrorConditionEvaluationNotSupported].
//
// Decisions follow the SubjectAccessReview status:
//
//   - allowed and not denied: DecisionAllow;
//   - denied and not allowed: DecisionDeny;
//   - neither: DecisionNoOpinion, with the API server's reason. This
//     includes a status with only an evaluationError, as in
//     k8s.io/apiserver's webhook: it is the API server's answer (RBAC
//     reports a binding to a missing role this way, persistently), not a
//     failure to ask. The evaluationError is logged at V(4), never
//     returned to the caller;
//   - both allowed and denied: a malformed answer. DecisionDeny with a
//     *[reviewauth.ReviewError]: "could not check", never an Allow, and
//     never cached.
//
// Any failure to get an answer (after retries) gives DecisionDeny and a
// *[reviewauth.ReviewError], which matches [reviewauth.ErrUnavailable]. No
// error ever comes with DecisionAllow. Unlike k8s.io/apiserver's webhook,
// which answers NoOpinion on error so that a union falls through to the next
// authorizer, Authorizer fails closed.
//
// An Authorizer is safe for concurrent use. It starts one goroutine per
// shared review, which ends with the review. Build one with [New] or
// [NewForConfig]; the zero Authorizer is not usable.
type Authorizer struct {
	reviewer     SubjectAccessReviewer
	keys         keys
	cache        *cache.Cache[decision]
	group        cache.Group[decision]
	retrier      *review.Retrier
	clock        clock.Clock
	allowedTTL   time.Duration
	deniedTTL    time.Duration
	maxAttrBytes int
	timeout      time.Duration
	stale        time.Duration
	metrics      *observe.Recorder
	tracer       trace.Tracer
}

var (
	_ authorizer.Authorizer              = (*Authorizer)(nil)
	_ authorizer.UnconditionalAuthorizer = (*Authorizer)(nil)
)

// NewForConfig returns an Authorizer that posts SubjectAccessReviews to the
// API server described by cfg, configured by opts, over the HTTP client
// client-go builds for it (TLS, bearer token or token file, exec or
// certificate authentication), with client-go's token-bucket rate limiter.
// [Options.Backoff] and [Options.Timeout] are the only retry policy
// (client-go's own retries are not used), Retry-After is read from each
// answer, answers are bounded ([reviewauth.MaxAnswerBytes]) and must be
// SubjectAccessReviews, and no body is ever logged, at any klog setting.
// QPS and Burst default to [reviewauth.DefaultQPS] and [reviewauth.DefaultBurst] when cfg leaves
// them zero. cfg itself is not modified.
func NewForConfig(cfg *rest.Config, opts Options) (*Authorizer, error) {
	// The client refuses an answer of another kind, which would otherwise
	// read as an empty status: NoOpinion.
	p, err := review.NewPoster[*authorizationv1.SubjectAccessReview](cfg, "/apis/authorization.k8s.io/v1/subjectaccessreviews", authorizationv1.SchemeGroupVersion.WithKind("SubjectAccessReview"))
	if err != nil {
		return nil, fmt.Errorf("authz: building the SubjectAccessReview client: %w", err)
	}
	return New(p, opts)
}

// New returns an Authorizer that creates SubjectAccessReviews through
// reviewer, configured by opts.
//
// Retries are the Authorizer's: it retries on its own schedule
// ([Options.Backoff]) within its budget ([Options.Timeout]). A client-go
// typed client, such as clientset.AuthorizationV1().SubjectAccessReviews(),
// also retries responses that carry Retry-After, up to 10 times and on its
// own clock, inside each of the Authorizer's attempts; with such a client a
// throttling API server is asked more often than [Options.Backoff] says.
// [NewForConfig] builds a client without those hidden retries and is
// preferred. A typed client also reads answers of any size, and logs
// request and response bodies (the identities reviewed) through the global
// klog at -v=8 and above when contextual logging is off; NewForConfig's
// client bounds answers ([reviewauth.MaxAnswerBytes]) and never logs a body.
//
// New returns an error if reviewer is nil.
func New(reviewer SubjectAccessReviewer, opts Options) (*Authorizer, error) {
	if reviewer == nil {
		return nil, errors.New("authz: nil SubjectAccessReviewer")
	}
	a := &Authorizer{
		reviewer:     reviewer,
		keys:         newKeys(opts.CacheKeyIgnoredExtras),
		clock:        opts.Clock,
		allowedTTL:   opts.AllowedTTL,
		deniedTTL:    opts.DeniedTTL,
		maxAttrBytes: opts.MaxCacheableAttributeBytes,
		timeout:      opts.Timeout,
		stale:        opts.StaleIfError,
		metrics:      observe.Of(opts.Metrics),
	}
	if opts.TracerProvider != nil {
		a.tracer = opts.TracerProvider.Tracer(TracerName)
	}
	if a.clock == nil {
		a.clock = clock.RealClock{}
	}
	a.allowedTTL = cmp.Or(a.allowedTTL, DefaultAllowedTTL)
	a.deniedTTL = cmp.Or(a.deniedTTL, DefaultDeniedTTL)
	a.maxAttrBytes = review.Positive(a.maxAttrBytes, DefaultMaxCacheableAttributeBytes)
	a.timeout = review.Positive(a.timeout, DefaultTimeout)
	maxEntries := review.Positive(opts.MaxEntries, DefaultMaxEntries)
	a.retrier = review.New(reviewName, review.Options{Backoff: opts.Backoff, Clock: a.clock, MaxInFlight: opts.MaxInFlight,
		AttemptTimeout: opts.AttemptTimeout, Observer: review.ObserverOf(a.metrics)})
	a.cache = cache.New[decision](cache.Options{MaxEntries: maxEntries, Clock: a.clock})
	a.metrics.AddCache("sar", a.cache.Counters())
	a.group.Timeout, a.group.Counters = a.timeout, a.cache.Counters()
	return a, nil
}

// Authorize implements [authorizer.UnconditionalAuthorizer]. It answers
// from the cache when it can; otherwise it creates a SubjectAccessReview,
// shared with concurrent identical calls. A caller whose ctx ends first
// returns at once with a *[reviewauth.ReviewError] wrapping ctx.Err(); the
// shared review goes on for the others and is cancelled when every caller
// has left.
//
// The shared review retries within [Options.Timeout], whoever started it:
// no caller's deadline bounds it for the others, as in authn. A caller
// whose deadline comes before the review's next attempt (a backoff or a
// Retry-After wait) returns at once with a *[reviewauth.ReviewError]
// carrying the API server's Retry-After, if any, while callers with later
// deadlines keep waiting for the answer.
//
// On a cache hit Authorize does not allocate (selectors included), unless
// the user has more than 32 groups or 16 extra keys, or a label
// requirement has many values.
func (a *Authorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if attrs == nil {
		return authorizer.DecisionDeny, "", &reviewauth.ReviewError{Review: reviewName, Err: errors.New("authz: nil attributes")}
	}
	if a.tracer != nil {
		return a.authorizeTraced(ctx, attrs)
	}
	d, reason, err, _ := a.authorize(ctx, attrs)
	return d, reason, err
}

// TracerName is the instrumentation name of the spans authz creates.
const TracerName = "github.com/reviewauth/reviewauth/authz"

func (a *Authorizer) authorizeTraced(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	ctx, span := a.tracer.Start(ctx, "reviewauth.authz.Authorize", trace.WithAttributes(
		attribute.String("reviewauth.verb", attrs.GetVerb()),
		attribute.String("reviewauth.resource", attrs.GetResource()),
		attribute.String("reviewauth.subresource", attrs.GetSubresource()),
		attribute.String("reviewauth.path", attrs.GetPath()),
	))
	defer span.End()
	d, reason, err, hit := a.authorize(ctx, attrs)
	span.SetAttributes(attribute.Bool("reviewauth.cache_hit", hit), attribute.String("reviewauth.decision", decisionName(d, err)))
	if err != nil {
		span.SetStatus(codes.Error, "review unavailable")
	}
	return d, reason, err
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

// authorize is Authorize; hit reports whether the cache answered.
func (a *Authorizer) authorize(ctx context.Context, attrs authorizer.Attributes) (_ authorizer.Decision, _ string, _ error, hit bool) {
	bp := getKeyBuf()
	enc := a.keys.appendKey((*bp)[:0], attrs)
	key := a.keys.lookup(enc)
	var stale decision
	haveStale := false
	if v, ok := a.cache.Get(key); ok && v.enc == string(enc) {
		if a.stale <= 0 || v.d != authorizer.DecisionAllow || a.clock.Now().Before(v.fresh) {
			putKeyBuf(bp, enc)
			return v.d, v.reason, nil, true
		}
		stale, haveStale = v, true
	}
	encs := string(enc)
	putKeyBuf(bp, enc)
	d, reason, err := a.review(ctx, key, encs, attrs)
	if err != nil && haveStale && errors.Is(err, reviewauth.ErrUnavailable) {
		// Stale-if-error: an Allow less than StaleIfError past its TTL,
		// served only because the API server cannot be asked.
		a.metrics.StaleServe("sar")
		klog.FromContext(ctx).V(2).Info("Serving a stale Allow: the API server is unavailable", "err", err)
		return stale.d, stale.reason, nil, true
	}
	return d, reason, err, false
}

// review is the miss path of Authorize, kept apart so that the hit path
// allocates nothing for the closure.
func (a *Authorizer) review(ctx context.Context, key cache.Key, enc string, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if err := ctx.Err(); err != nil {
		return authorizer.DecisionDeny, "", &reviewauth.ReviewError{Review: reviewName, Err: err}
	}
	cacheable := attributeBytes(attrs) < a.maxAttrBytes
	sar := &authorizationv1.SubjectAccessReview{Spec: sarSpec(attrs)}
	// The shared review runs under the Group's detached context and its
	// timeout alone; each caller leaves when its own ctx ends, or when the
	// review's next attempt is due after its deadline (cache.Postpone).
	v, _, err := a.group.Do(ctx, a.keys.review(enc), func(lctx context.Context) (decision, error) {
		return a.load(lctx, key, enc, sar, cacheable)
	})
	if err != nil {
		var re *reviewauth.ReviewError
		if !errors.As(err, &re) {
			// ctx ended while waiting, or the shared review panicked.
			err = &reviewauth.ReviewError{Review: reviewName, Err: err}
		}
		return authorizer.DecisionDeny, v.reason, err
	}
	return v.d, v.reason, nil
}

// load runs one shared review and caches its result.
func (a *Authorizer) load(ctx context.Context, key cache.Key, enc string, sar *authorizationv1.SubjectAccessReview, cacheable bool) (decision, error) {
	// A caller that missed the cache just as the previous shared review
	// finished starts a new one; its answer is already cached. This second
	// look is part of the caller's lookup: it counts no hit or miss.
	if v, ok := a.cache.Peek(key); ok && v.enc == enc && (a.stale <= 0 || v.d != authorizer.DecisionAllow || a.clock.Now().Before(v.fresh)) {
		return v, nil
	}
	if a.tracer != nil {
		var span trace.Span
		ctx, span = a.tracer.Start(ctx, "reviewauth.SubjectAccessReview")
		defer span.End()
	}
	var out *authorizationv1.SubjectAccessReview
	attempts := 0
	err := a.retrier.Do(ctx, nil, func(ctx context.Context) error {
		attempts++
		var err error
		out, err = a.reviewer.Create(ctx, sar, metav1.CreateOptions{})
		if err == nil && out == nil {
			err = errors.New("authz: empty SubjectAccessReview response")
		}
		return err
	})
	if err != nil {
		return decision{}, err
	}
	if out.Spec.ResourceAttributes == nil && out.Spec.NonResourceAttributes == nil {
		// The API server echoes the spec. An answer without one is not a
		// SubjectAccessReview (client-go decodes a well-formed object of
		// another kind into an empty one), and its empty status must not
		// read as NoOpinion.
		return decision{}, &reviewauth.ReviewError{Review: reviewName, Code: http.StatusCreated, Attempts: attempts,
			Err: errors.New("authz: malformed SubjectAccessReview response: no spec")}
	}
	st := out.Status
	var v decision
	switch {
	case st.Allowed && st.Denied:
		return decision{reason: st.Reason}, &reviewauth.ReviewError{Review: reviewName, Code: http.StatusCreated, Attempts: attempts,
			Err: errors.New("authz: malformed SubjectAccessReview status: both allowed and denied")}
	case st.Allowed:
		v = decision{d: authorizer.DecisionAllow, reason: st.Reason, enc: enc}
	case st.Denied:
		v = decision{d: authorizer.DecisionDeny, reason: st.Reason, enc: enc}
	default:
		v = decision{d: authorizer.DecisionNoOpinion, reason: st.Reason, enc: enc}
	}
	if st.EvaluationError != "" {
		klog.FromContext(ctx).V(4).Info("SubjectAccessReview evaluation error", "decision", v.d, "evaluationError", st.EvaluationError)
	}
	if cacheable {
		ttl, keep := a.deniedTTL, a.deniedTTL
		if v.d == authorizer.DecisionAllow {
			ttl, keep = a.allowedTTL, a.allowedTTL
			if a.stale > 0 && ttl > 0 {
				keep += a.stale
			}
		}
		v.fresh = a.clock.Now().Add(ttl)
		// A non-positive TTL stores nothing and drops any stale Allow.
		a.cache.Set(key, v, keep)
	}
	return v, nil
}

// ConditionsAwareAuthorize implements [authorizer.Authorizer]. Authorizer is
// not conditions-aware: this returns the decision of Authorize.
func (a *Authorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

// EvaluateConditions implements [authorizer.Authorizer]. Authorizer never
// returns conditions, so this fails closed: DecisionDeny with
// [authorizer.ErrorConditionEvaluationNotSupported].
func (a *Authorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// SelfCheck asks the API server cfg describes whether cfg's credentials may
// create SubjectAccessReviews, as [NewForConfig] needs, with a
// SelfSubjectAccessReview (which any authenticated user may create), and
// names the identity they belong to when the API server tells (a
// SelfSubjectReview). Run it at start-up, and fail fast on its error.
//
// It returns nil when they may. An error matching reviewauth.ErrRefused means they
// may not, or were refused outright (401): its message names the identity
// and the ClusterRole it needs (system:auth-delegator). An error matching
// reviewauth.ErrUnavailable means the API server could not be asked; a
// service may then start anyway, since reviews report "could not check"
// until the API server answers.
func SelfCheck(ctx context.Context, cfg *rest.Config) error {
	return review.SelfCheck(ctx, cfg, "authz", "authorization.k8s.io", "subjectaccessreviews")
}
