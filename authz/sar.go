package authz

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/cache"
	"github.com/reviewauth/reviewauth/internal/observe"
	"github.com/reviewauth/reviewauth/internal/review"
	"github.com/reviewauth/reviewauth/metrics"
)

const reviewName = "SubjectAccessReview"

// Defaults used for the zero fields of [Options]. The cache's are package
// cache's, stated there with their reasons.
const (
	// DefaultAllowedTTL is how long an Allow is cached:
	// [cache.DefaultAllowedTTL], one minute.
	DefaultAllowedTTL = cache.DefaultAllowedTTL

	// DefaultDeniedTTL is how long a Deny or a NoOpinion is cached:
	// [cache.DefaultDeniedTTL], ten seconds.
	DefaultDeniedTTL = cache.DefaultDeniedTTL

	// DefaultMaxEntries bounds the cache: [cache.DefaultAuthorizerMaxEntries],
	// like the 8192-entry LRU of k8s.io/apiserver's webhook authorizer.
	DefaultMaxEntries = cache.DefaultAuthorizerMaxEntries

	// DefaultMaxCacheableAttributeBytes is the size of caller-controlled
	// attributes from which a result is not cached, as in k8s.io/apiserver:
	// [cache.DefaultMaxCacheableAttributeBytes].
	DefaultMaxCacheableAttributeBytes = cache.DefaultMaxCacheableAttributeBytes

	// DefaultTimeout is the total budget of one review, retries and waits
	// included: [cache.DefaultTimeout], ten seconds.
	DefaultTimeout = cache.DefaultTimeout

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

// Options configures an [Authorizer] (and a [Client], which reads the
// fields that are not about caching). The zero value gives the defaults
// documented on each field. [New] reads Options once: changing it
// afterwards has no effect.
type Options struct {
	// AllowedTTL is how long an Allow is cached. Zero means
	// [DefaultAllowedTTL]; a negative value disables caching of Allows
	// (and with it StaleIfError).
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
	// asked (the review fails with reviewauth.ErrUnavailable). It has no
	// effect when caching of Allows is disabled (AllowedTTL < 0, or
	// --authorization-webhook-cache-authorized-ttl=0). Denials and
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

// Client authorizes requests with one SubjectAccessReview per call: it maps
// the attributes to the review's spec (the user, the resource or
// non-resource attributes, field and label selectors as k8s.io/apiserver's
// webhook authorizer sends them), sends it with bounded retries and a bound
// on reviews in flight, and judges the answer. It caches nothing: an
// [Authorizer] is a Client behind package cache. Use a Client alone to
// compose a cache of your own.
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
//     *[reviewauth.ReviewError]: "could not check", never an Allow.
//
// Any failure to get an answer (after retries), and an answer that is not
// a SubjectAccessReview (no spec echoed), gives DecisionDeny and a
// *[reviewauth.ReviewError], which matches [reviewauth.ErrUnavailable]. No
// error ever comes with DecisionAllow. Unlike k8s.io/apiserver's webhook,
// which answers NoOpinion on error so that a union falls through to the next
// authorizer, a Client fails closed.
//
// A Client implements [authorizer.Authorizer]; it is not conditions-aware
// (ConditionsAwareAuthorize returns the decision of Authorize, and
// EvaluateConditions always denies with
// [authorizer.ErrorConditionEvaluationNotSupported]). It is safe for
// concurrent use. Build one with [NewClient] or [NewClientForConfig]; the
// zero Client is not usable.
type Client struct {
	reviewer SubjectAccessReviewer
	retrier  *review.Retrier
	timeout  time.Duration
	tracer   trace.Tracer
}

var _ authorizer.Authorizer = (*Client)(nil)

// NewClient returns a Client that creates SubjectAccessReviews through
// reviewer, configured by the fields of opts that are not about caching
// (AllowedTTL, DeniedTTL, MaxEntries, MaxCacheableAttributeBytes,
// StaleIfError and CacheKeyIgnoredExtras are not read). It returns an
// error if reviewer is nil. [New] says what a client-go typed client does.
func NewClient(reviewer SubjectAccessReviewer, opts Options) (*Client, error) {
	if reviewer == nil {
		return nil, errors.New("authz: nil SubjectAccessReviewer")
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	c := &Client{
		reviewer: reviewer,
		timeout:  review.Positive(opts.Timeout, DefaultTimeout),
		retrier: review.New(reviewName, review.Options{Backoff: opts.Backoff, Clock: clk, MaxInFlight: opts.MaxInFlight,
			AttemptTimeout: opts.AttemptTimeout, Observer: review.ObserverOf(observe.Of(opts.Metrics))}),
	}
	if opts.TracerProvider != nil {
		c.tracer = opts.TracerProvider.Tracer(TracerName)
	}
	return c, nil
}

// NewClientForConfig returns a Client that posts SubjectAccessReviews to
// the API server described by cfg, with the client [NewForConfig] uses.
func NewClientForConfig(cfg *rest.Config, opts Options) (*Client, error) {
	// The client refuses an answer of another kind, which would otherwise
	// read as an empty status: NoOpinion.
	p, err := review.NewPoster[*authorizationv1.SubjectAccessReview](cfg, "/apis/authorization.k8s.io/v1/subjectaccessreviews", authorizationv1.SchemeGroupVersion.WithKind("SubjectAccessReview"))
	if err != nil {
		return nil, fmt.Errorf("authz: building the SubjectAccessReview client: %w", err)
	}
	return NewClient(p, opts)
}

// Authorize implements [authorizer.UnconditionalAuthorizer] with one
// SubjectAccessReview, retried within [Options.Timeout] and ctx's
// deadline. A wait before a retry that would end past ctx's deadline is
// not taken: the call returns at once with a *[reviewauth.ReviewError]
// carrying the API server's Retry-After, if any.
func (c *Client) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if attrs == nil {
		return authorizer.DecisionDeny, "", &reviewauth.ReviewError{Review: reviewName, Err: errors.New("authz: nil attributes")}
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if c.tracer != nil {
		var span trace.Span
		ctx, span = c.tracer.Start(ctx, "reviewauth.SubjectAccessReview")
		defer span.End()
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: sarSpec(attrs)}
	var out *authorizationv1.SubjectAccessReview
	attempts := 0
	err := c.retrier.Do(ctx, nil, func(ctx context.Context) error {
		attempts++
		var err error
		out, err = c.reviewer.Create(ctx, sar, metav1.CreateOptions{})
		if err == nil && out == nil {
			err = errors.New("authz: empty SubjectAccessReview response")
		}
		return err
	})
	if err != nil {
		return authorizer.DecisionDeny, "", err
	}
	if out.Spec.ResourceAttributes == nil && out.Spec.NonResourceAttributes == nil {
		// The API server echoes the spec. An answer without one is not a
		// SubjectAccessReview (client-go decodes a well-formed object of
		// another kind into an empty one), and its empty status must not
		// read as NoOpinion.
		return authorizer.DecisionDeny, "", &reviewauth.ReviewError{Review: reviewName, Code: http.StatusCreated, Attempts: attempts,
			Err: errors.New("authz: malformed SubjectAccessReview response: no spec")}
	}
	st := out.Status
	d := authorizer.DecisionNoOpinion
	switch {
	case st.Allowed && st.Denied:
		return authorizer.DecisionDeny, st.Reason, &reviewauth.ReviewError{Review: reviewName, Code: http.StatusCreated, Attempts: attempts,
			Err: errors.New("authz: malformed SubjectAccessReview status: both allowed and denied")}
	case st.Allowed:
		d = authorizer.DecisionAllow
	case st.Denied:
		d = authorizer.DecisionDeny
	}
	if st.EvaluationError != "" {
		klog.FromContext(ctx).V(4).Info("SubjectAccessReview evaluation error", "decision", d, "evaluationError", st.EvaluationError)
	}
	return d, st.Reason, nil
}

// ConditionsAwareAuthorize implements [authorizer.Authorizer]. A Client is
// not conditions-aware: this returns the decision of Authorize.
func (c *Client) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(c.Authorize(ctx, attrs))
}

// EvaluateConditions implements [authorizer.Authorizer]. A Client never
// returns conditions, so this fails closed: DecisionDeny with
// [authorizer.ErrorConditionEvaluationNotSupported].
func (c *Client) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// TracerName is the instrumentation name of the spans authz creates.
const TracerName = "github.com/reviewauth/reviewauth/authz"

// Authorizer authorizes requests with authorization.k8s.io/v1
// SubjectAccessReviews, through a cache: a [Client] behind package cache's
// [cache.Authorizer], with the cache configured by the same Options and
// keyed by the SubjectAccessReview each request makes
// ([cache.AuthorizerOptions].SubjectAccessReviewKey), leaving out the extras
// of [Options.CacheKeyIgnoredExtras]. So it has a bounded cache, coalescing
// of concurrent identical reviews, bounded retries and a bound on reviews
// in flight; the Client documents the decisions, package cache what is
// cached for how long (errors never are).
//
// Authorizer implements the whole [authorizer.Authorizer] of
// k8s.io/apiserver v0.37: it can be passed to filters.WithAuthorization
// (which takes the narrower [authorizer.UnconditionalAuthorizer]) and to
// union.New (which takes [authorizer.Authorizer]). It is not
// conditions-aware: ConditionsAwareAuthorize returns the unconditional
// decision of Authorize, and EvaluateConditions always denies with
// [authorizer.ErrorConditionEvaluationNotSupported].
//
// Any failure to get an answer gives DecisionDeny and a
// *[reviewauth.ReviewError], which matches [reviewauth.ErrUnavailable]. No
// error ever comes with DecisionAllow.
//
// An Authorizer is safe for concurrent use. It starts one goroutine per
// shared review, which ends with the review. Build one with [New] or
// [NewForConfig]; the zero Authorizer is not usable.
type Authorizer struct {
	client *Client
	cached *cache.Authorizer
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
	c, err := NewClientForConfig(cfg, opts)
	if err != nil {
		return nil, err
	}
	return compose(c, opts)
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
	c, err := NewClient(reviewer, opts)
	if err != nil {
		return nil, err
	}
	return compose(c, opts)
}

// compose puts c behind the cache opts describes.
func compose(c *Client, opts Options) (*Authorizer, error) {
	ignored := opts.CacheKeyIgnoredExtras
	if ignored == nil {
		ignored = []string{CredentialIDExtra}
	}
	cached, err := cache.NewAuthorizer(c, cache.AuthorizerOptions{
		AllowedTTL:                 opts.AllowedTTL,
		DeniedTTL:                  opts.DeniedTTL,
		MaxEntries:                 opts.MaxEntries,
		MaxCacheableAttributeBytes: opts.MaxCacheableAttributeBytes,
		StaleIfError:               opts.StaleIfError,
		CacheKeyIgnoredExtras:      ignored,
		SubjectAccessReviewKey:     true,
		Timeout:                    c.timeout,
		Clock:                      opts.Clock,
		Metrics:                    opts.Metrics,
		Name:                       "sar",
		TracerProvider:             opts.TracerProvider,
		SpanName:                   "reviewauth.authz.Authorize",
	})
	if err != nil {
		return nil, err
	}
	return &Authorizer{client: c, cached: cached}, nil
}

// ForgetUser forgets every cached decision about the user named name and
// keeps the decisions in flight for that user out of the cache:
// [cache.Authorizer.ForgetUser] on the Authorizer's cache. It is safe for
// concurrent use.
func (a *Authorizer) ForgetUser(name string) { a.cached.ForgetUser(name) }

// ForgetAll forgets every cached decision and keeps the decisions in
// flight out of the cache: [cache.Authorizer.ForgetAll] on the
// Authorizer's cache. It is safe for concurrent use.
func (a *Authorizer) ForgetAll() { a.cached.ForgetAll() }

// Uncached returns the [Client] behind the Authorizer's cache, so that
// [cache.NewAuthorizer] given an Authorizer puts its cache in front of the
// Client rather than in front of this cache.
func (a *Authorizer) Uncached() authorizer.Authorizer { return a.client }

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
	return a.cached.Authorize(ctx, attrs)
}

// ConditionsAwareAuthorize implements [authorizer.Authorizer]. Authorizer is
// not conditions-aware: this returns the decision of Authorize, as
// Authorize does (through the cache).
func (a *Authorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.cached.Authorize(ctx, attrs))
}

// EvaluateConditions implements [authorizer.Authorizer]. Authorizer never
// returns conditions, so this fails closed: DecisionDeny with
// [authorizer.ErrorConditionEvaluationNotSupported].
func (a *Authorizer) EvaluateConditions(ctx context.Context, d authorizer.ConditionsAwareDecision, data authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return a.client.EvaluateConditions(ctx, d, data)
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
