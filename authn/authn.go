package authn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/internal/bearer"
	"github.com/reviewauth/reviewauth/internal/cache"
	"github.com/reviewauth/reviewauth/internal/jwt"
	"github.com/reviewauth/reviewauth/internal/observe"
	"github.com/reviewauth/reviewauth/internal/review"
	"github.com/reviewauth/reviewauth/metrics"
)

// Defaults for [Options]. Each is used when the corresponding field is zero.
const (
	// DefaultSuccessTTL is how long an authenticated identity is reused
	// without asking again. It is the revocation latency: a deleted pod,
	// service account or secret stops a token within this time (the token's
	// own exp always caps it). The kubelet and kube-rbac-proxy use 2m; we use
	// 1m, halving the window in which a revoked token still works, at the cost
	// of one TokenReview per token per minute.
	DefaultSuccessTTL = time.Minute

	// DefaultFailureTTL is how long a rejection is remembered. Long enough
	// that a client retrying a bad token in a loop costs one review per 10s
	// rather than one per call; short enough that a token which was not yet
	// valid (clock skew, a service account created a moment ago) recovers
	// quickly. apiserver does not cache rejections at all.
	DefaultFailureTTL = 10 * time.Second

	// DefaultMaxEntries bounds each of the success and rejection caches.
	DefaultMaxEntries = 4096

	// DefaultMaxTokenSize is the largest token reviewed, in bytes. A
	// service-account JWT is about 1 KiB; 16 KiB leaves room for large OIDC
	// tokens while refusing junk before it costs a review.
	DefaultMaxTokenSize = 16 << 10

	// DefaultTimeout is the total budget of one review, retries included.
	DefaultTimeout = 10 * time.Second

	// DefaultAttemptTimeout bounds each request of a review. A healthy API
	// server answers a TokenReview in milliseconds; a request unanswered
	// after 3s is stuck (a dead connection, a server that accepted and
	// hung), and waiting longer would spend the budget its retries need:
	// with 3s and the 10s budget, a review whose first request hangs still
	// gets two more full attempts, on a new stream or connection. The same
	// in authz.
	DefaultAttemptTimeout = review.DefaultAttemptTimeout

	// DefaultMaxInFlight bounds concurrent TokenReviews.
	DefaultMaxInFlight = review.DefaultMaxInFlight
)

// TokenReviewer is the one call Authenticator makes; Create must be safe for
// concurrent use. client-go's TokenReviewInterface satisfies it. Note that client-go's typed clients
// retry 429 and Retry-After answers internally (up to 10 times) before
// Authenticator sees them, read answers of any size, and log request and
// response bodies (the token) when klog runs at -v=8 or more with
// contextual logging off; [NewForConfig] builds a client that does none of
// these.
type TokenReviewer interface {
	Create(ctx context.Context, tr *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error)
}

// Options configures an [Authenticator]. Every zero value means the default
// named in its comment. [New] reads Options once: changing it afterwards has
// no effect.
type Options struct {
	// Audiences are sent in every TokenReview's spec.audiences, and the
	// API server's answer must name at least one of them. Required, unless
	// AllowAPIServerAudience is set.
	Audiences []string

	// AllowAPIServerAudience, with no Audiences, sends reviews without
	// audiences, so the API server checks tokens against its own audience.
	//
	// DANGEROUS: a token for the API server's audience is a credential for
	// the API server itself. A service that accepts one has received a
	// credential it can replay against the API server with the caller's
	// permissions, and so has anyone who compromises the service. Give the
	// service an audience of its own and have callers request tokens for it.
	// This exists for migrating callers that cannot yet do so.
	AllowAPIServerAudience bool

	// SuccessTTL is how long an authenticated identity is cached; never past
	// the token's exp claim. Zero means [DefaultSuccessTTL]; negative
	// disables caching of successes.
	SuccessTTL time.Duration
	// FailureTTL is how long a rejection is cached. Zero means
	// [DefaultFailureTTL]; negative disables caching of rejections.
	FailureTTL time.Duration
	// MaxEntries bounds the success cache and, separately, the rejection
	// cache. Zero or negative means [DefaultMaxEntries].
	MaxEntries int

	// StaleIfError, when positive, lets an identity be served for up to this
	// long past its SuccessTTL, but only while the API server cannot be
	// asked (the review of that token fails with reviewauth.ErrUnavailable),
	// and never past the token's exp. Rejections are never extended, and a
	// rejection removes the stale identity. Each stale serve is counted in
	// reviewauth_stale_serves_total{cache="token"}. Zero (the default)
	// disables it: an outage is reported as such.
	StaleIfError time.Duration

	// MaxTokenSize is the largest token reviewed, in bytes; larger tokens
	// are refused locally. Zero or negative means [DefaultMaxTokenSize].
	MaxTokenSize int

	// MaxInFlight bounds concurrent TokenReviews. Zero or negative means
	// [DefaultMaxInFlight].
	MaxInFlight int
	// Timeout is the total budget of one review, retries included. Zero or
	// negative means [DefaultTimeout].
	Timeout time.Duration
	// AttemptTimeout bounds each request of a review, so that one request
	// that hangs leaves the budget to its retries; a request cut by it is
	// retried. It is in real time, like Timeout. Zero means
	// [DefaultAttemptTimeout]; negative means no bound but Timeout.
	AttemptTimeout time.Duration
	// Backoff spaces retries; Steps is the number of retries. Zero means
	// 100ms doubling with 20% jitter, 4 retries, capped at 2s. Steps < 0
	// disables retries.
	Backoff wait.Backoff

	// Clock tells the time for caching and retries. Nil means the real
	// clock.
	Clock clock.Clock

	// PreVerifier, if not nil, checks each token before it is reviewed, and
	// tokens it finds forged are refused without a review. See
	// [JWKSVerifier]. A token it accepts is still reviewed.
	PreVerifier PreVerifier

	// Metrics, if not nil, records reviews, retries, reviews in flight,
	// reviews the API server refused to perform for this service, and the
	// caches (as cache="token" and cache="token_rejected"). Register it on
	// your own registry. It does not keep the Authenticator alive.
	Metrics *metrics.Metrics

	// TracerProvider, if not nil, is used for OpenTelemetry spans: one per
	// AuthenticateToken call (attributes: audiences, cache hit, decision)
	// and one per TokenReview sent. Nil means no spans, at no cost.
	TracerProvider trace.TracerProvider
}

// Authenticator authenticates bearer tokens with TokenReviews. It implements
// authenticator.Token and authenticator.Request, and is safe for concurrent
// use. Build one with [New] or [NewForConfig]; the zero Authenticator is not
// usable. It starts one goroutine per shared review, which ends with the
// review.
type Authenticator struct {
	reviewer  TokenReviewer
	audiences []string
	opts      Options
	clock     clock.Clock
	keyer     *cache.TokenKeyer
	ok        *cache.Cache[*identity]
	rejected  *cache.Cache[*reviewauth.RejectedError]
	group     cache.Group[result]
	retrier   *review.Retrier
	tracer    trace.Tracer
	audAttr   attribute.KeyValue
	metrics   *observe.Recorder
}

var (
	_ authenticator.Token   = (*Authenticator)(nil)
	_ authenticator.Request = (*Authenticator)(nil)
)

// identity is a cached success. With StaleIfError the cache keeps it past
// fresh, for use only when the API server cannot be asked.
type identity struct {
	resp  *authenticator.Response
	fresh time.Time
}

// lookup returns the cached identity for key if it is fresh, or else the
// stale one that StaleIfError may still serve. It counts a hit or a miss;
// a second look within one call uses peek.
func (a *Authenticator) lookup(key cache.Key) (fresh *authenticator.Response, stale *identity) {
	id, ok := a.ok.Get(key)
	return a.fresh(id, ok)
}

// peek is lookup without counting.
func (a *Authenticator) peek(key cache.Key) (fresh *authenticator.Response, stale *identity) {
	id, ok := a.ok.Peek(key)
	return a.fresh(id, ok)
}

func (a *Authenticator) fresh(id *identity, ok bool) (*authenticator.Response, *identity) {
	if !ok {
		return nil, nil
	}
	if a.opts.StaleIfError <= 0 || a.clock.Now().Before(id.fresh) {
		return id.resp, nil
	}
	return nil, id
}

type result struct {
	resp     *authenticator.Response
	rejected *reviewauth.RejectedError
}

// apiServerAudiences are the API server audiences of a default cluster. A
// service that lists one of them as its own audience accepts API server
// tokens, so New treats it like AllowAPIServerAudience.
var apiServerAudiences = []string{"https://kubernetes.default.svc", "https://kubernetes.default.svc.cluster.local", "kubernetes.default.svc", "api", "kubernetes"}

// New returns an Authenticator that reviews tokens with reviewer. It fails
// when opts has no audience and AllowAPIServerAudience is not set, when an
// audience is empty, and when an audience names a default API server
// audience without AllowAPIServerAudience.
//
// The reviewer is yours, and so is what it logs: a client-go typed client
// (clientset.AuthenticationV1().TokenReviews()) logs each TokenReview's
// request and response body, which hold the token, through the global klog
// at -v=8 and above when contextual logging is off (component-base's
// --feature-gates=ContextualLogging=false, or
// klog.EnableContextualLogging(false)); with contextual logging on,
// Authenticator caps the logger it hands the reviewer at V(5). It also
// reads answers of any size. Prefer [NewForConfig], whose client never logs
// a body at any klog setting and bounds answers ([reviewauth.MaxAnswerBytes]).
func New(reviewer TokenReviewer, opts Options) (*Authenticator, error) {
	if reviewer == nil {
		return nil, errors.New("authn: nil TokenReviewer")
	}
	auds := slices.Clone(opts.Audiences)
	slices.Sort(auds)
	auds = slices.Compact(auds)
	switch {
	case len(auds) == 0 && !opts.AllowAPIServerAudience:
		return nil, errors.New("authn: no audience configured: set Options.Audiences to this service's audience (or, dangerously, AllowAPIServerAudience)")
	case len(auds) > 0 && opts.AllowAPIServerAudience:
		return nil, errors.New("authn: AllowAPIServerAudience is only for services without audiences of their own; unset it or Audiences")
	}
	for _, a := range auds {
		if strings.TrimSpace(a) == "" {
			return nil, errors.New("authn: empty audience")
		}
		if slices.Contains(apiServerAudiences, a) && !opts.AllowAPIServerAudience {
			return nil, fmt.Errorf("authn: audience %q is the API server's own audience: tokens for it can be replayed against the API server; use an audience of this service", a)
		}
	}
	opts.SuccessTTL = cmp.Or(opts.SuccessTTL, DefaultSuccessTTL)
	opts.FailureTTL = cmp.Or(opts.FailureTTL, DefaultFailureTTL)
	opts.MaxEntries = review.Positive(opts.MaxEntries, DefaultMaxEntries)
	opts.MaxTokenSize = review.Positive(opts.MaxTokenSize, DefaultMaxTokenSize)
	opts.Timeout = review.Positive(opts.Timeout, DefaultTimeout)
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	rec := observe.Of(opts.Metrics)
	a := &Authenticator{
		reviewer:  reviewer,
		metrics:   rec,
		audiences: auds,
		opts:      opts,
		clock:     clk,
		keyer:     cache.NewKeyer().ForAudiences(auds),
		ok:        cache.New[*identity](cache.Options{MaxEntries: opts.MaxEntries, Clock: clk}),
		rejected:  cache.New[*reviewauth.RejectedError](cache.Options{MaxEntries: opts.MaxEntries, Clock: clk}),
		group:     cache.Group[result]{Timeout: opts.Timeout},
		retrier: review.New("TokenReview", review.Options{Backoff: opts.Backoff, Clock: clk, MaxInFlight: opts.MaxInFlight,
			AttemptTimeout: opts.AttemptTimeout, Observer: review.ObserverOf(rec)}),
		audAttr: attribute.StringSlice("reviewauth.audiences", auds),
	}
	if opts.TracerProvider != nil {
		a.tracer = opts.TracerProvider.Tracer(TracerName)
	}
	a.group.Counters = a.ok.Counters()
	rec.AddCache("token", a.ok.Counters())
	rec.AddCache("token_rejected", a.rejected.Counters())
	return a, nil
}

// NewForConfig returns an Authenticator that reviews tokens through the API
// server described by cfg, over the HTTP client client-go builds for it
// (TLS, bearer token or token file, exec or certificate authentication),
// with client-go's token-bucket rate limiter. QPS and Burst default to
// [reviewauth.DefaultQPS] and [reviewauth.DefaultBurst] when cfg leaves them zero. Options.Backoff
// alone governs retries (client-go's own are not used), Retry-After is read
// from each answer, answers are bounded ([reviewauth.MaxAnswerBytes]), and no request
// or response body is ever logged, at any klog verbosity or vmodule,
// contextual logging on or off. cfg is not modified.
func NewForConfig(cfg *rest.Config, opts Options) (*Authenticator, error) {
	p, err := review.NewPoster[*authenticationv1.TokenReview](cfg, "/apis/authentication.k8s.io/v1/tokenreviews", authenticationv1.SchemeGroupVersion.WithKind("TokenReview"))
	if err != nil {
		return nil, fmt.Errorf("authn: building the TokenReview client: %w", err)
	}
	return New(p, opts)
}

// SelfCheck asks the API server cfg describes whether cfg's credentials may
// create TokenReviews, as [NewForConfig] needs, with a
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
	return review.SelfCheck(ctx, cfg, "authn", "authentication.k8s.io", "tokenreviews")
}

// TracerName is the instrumentation name of the spans authn creates.
const TracerName = "github.com/reviewauth/reviewauth/authn"

// Audiences returns the audiences the Authenticator reviews tokens for, in
// sorted order.
func (a *Authenticator) Audiences() []string { return slices.Clone(a.audiences) }

// AuthenticateRequest authenticates the bearer token in r's Authorization
// header (RFC 6750; the scheme is case-insensitive) with
// [Authenticator.AuthenticateToken]. A request with no Authorization header,
// or one of another scheme, yields (nil, false, nil), so that other
// authenticators in a union may try; a request with more than one
// Authorization header (k8s.io/apiserver's bearertoken reads the first), or
// an empty bearer token, is rejected. On success the Authorization header
// is removed, so that handlers never see the token. httpauth reads the
// header the same way.
func (a *Authenticator) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	token, ok, err := bearer.FromRequest(r)
	if !ok || err != nil {
		return nil, false, err
	}
	resp, ok, err := a.AuthenticateToken(r.Context(), token)
	if ok && err == nil {
		r.Header.Del("Authorization")
	}
	return resp, ok, err
}

// AuthenticateToken reports who token belongs to.
//
// It returns (nil, false, nil) for an empty token: no credential. A token the
// API server rejects, or that is refused locally (larger than MaxTokenSize,
// or containing anything but visible ASCII), yields an error matching
// reviewauth.ErrUnauthenticated. A review that could not be completed yields
// a *reviewauth.ReviewError matching reviewauth.ErrUnavailable. Only a
// success returns true, with a Response whose Audiences are the configured
// audiences the token is valid for.
//
// The Response is shared between callers and must not be modified.
func (a *Authenticator) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	if a.tracer != nil {
		return a.authenticateTraced(ctx, token)
	}
	resp, ok, err, _ := a.authenticate(ctx, token)
	return resp, ok, err
}

func (a *Authenticator) authenticateTraced(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	ctx, span := a.tracer.Start(ctx, "reviewauth.authn.AuthenticateToken", trace.WithAttributes(a.audAttr))
	defer span.End()
	resp, ok, err, hit := a.authenticate(ctx, token)
	span.SetAttributes(attribute.Bool("reviewauth.cache_hit", hit), attribute.String("reviewauth.decision", decision(ok, err)))
	if err != nil && !errors.Is(err, reviewauth.ErrUnauthenticated) {
		span.SetStatus(codes.Error, "review unavailable")
	}
	return resp, ok, err
}

// decision names an outcome for spans and logs.
func decision(ok bool, err error) string {
	switch {
	case ok && err == nil:
		return "authenticated"
	case err == nil, errors.Is(err, reviewauth.ErrUnauthenticated):
		return "unauthenticated"
	default:
		return "unavailable"
	}
}

// authenticate is AuthenticateToken; hit reports whether a cache answered.
func (a *Authenticator) authenticate(ctx context.Context, token string) (_ *authenticator.Response, _ bool, _ error, hit bool) {
	if token == "" {
		return nil, false, nil, false
	}
	if len(token) > a.opts.MaxTokenSize {
		// Checked before hashing, so that junk costs nothing.
		return nil, false, &reviewauth.RejectedError{Reason: fmt.Sprintf("token is larger than %d bytes", a.opts.MaxTokenSize)}, false
	}
	key := a.keyer.Key(token)
	resp, stale := a.lookup(key)
	if resp != nil {
		// Only a token that passed validate can have been cached: the
		// byte scan is left off the hit path.
		return resp, true, nil, true
	}
	if rej := validate(token); rej != nil {
		return nil, false, rej, false
	}
	if rej, ok := a.rejected.Get(key); ok {
		return nil, false, rej, true
	}
	if a.opts.PreVerifier != nil {
		// Forged tokens stop here. Any other error means the verifier
		// cannot tell, and the TokenReview decides.
		var rej *reviewauth.RejectedError
		err := a.opts.PreVerifier.Verify(ctx, token)
		if errors.As(err, &rej) {
			a.rejected.Set(key, rej, a.opts.FailureTTL)
			return nil, false, rej, false
		}
		if err == nil {
			// Its signature verified: reviewed ahead of tokens that
			// could not be verified (internal/review's fair queue).
			ctx = review.WithVerified(ctx)
		}
	}
	res, _, err := a.group.Do(ctx, key, func(ctx context.Context) (result, error) {
		return a.review(ctx, key, token)
	})
	if err != nil && stale != nil && errors.Is(err, reviewauth.ErrUnavailable) {
		// Stale-if-error: the API server cannot be asked, and this token
		// was authenticated less than StaleIfError ago past its TTL.
		a.metrics.StaleServe("token")
		klog.FromContext(ctx).V(2).Info("Serving a stale identity: the API server is unavailable", "user", stale.resp.User.GetName(), "err", err)
		return stale.resp, true, nil, true
	}
	if err != nil {
		if errors.Is(err, reviewauth.ErrUnavailable) {
			return nil, false, err, false
		}
		// The caller's context ended, or the load panicked.
		return nil, false, &reviewauth.ReviewError{Review: "TokenReview", Err: review.Redacted(err, review.RedactToken(token))}, false
	}
	if res.rejected != nil {
		return nil, false, res.rejected, false
	}
	return res.resp, true, nil, false
}

// validate refuses, without a review, tokens that no API server would
// accept: anything but visible ASCII (RFC 6750's b64token is a subset).
func validate(token string) *reviewauth.RejectedError {
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c >= 0x7f {
			return &reviewauth.RejectedError{Reason: "token contains whitespace, control or non-ASCII characters"}
		}
	}
	return nil
}

// review runs once per key at a time, under the Group's detached context. It
// stores its result in the caches itself, so that waiters only read.
func (a *Authenticator) review(ctx context.Context, key cache.Key, token string) (result, error) {
	// A caller that missed the caches just before a previous load stored its
	// result, and reached the Group just after that load finished, would
	// otherwise send a second review. This second look is part of the same
	// lookup: it counts no hit or miss.
	if resp, _ := a.peek(key); resp != nil {
		return result{resp: resp}, nil
	}
	if rej, ok := a.rejected.Peek(key); ok {
		return result{rejected: rej}, nil
	}
	logger := klog.FromContext(ctx)
	var span trace.Span
	if a.tracer != nil {
		ctx, span = a.tracer.Start(ctx, "reviewauth.TokenReview", trace.WithAttributes(a.audAttr))
		defer span.End()
	}
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.audiences}}
	var got *authenticationv1.TokenReview
	err := a.retrier.Do(ctx, review.RedactToken(token), func(ctx context.Context) error {
		var err error
		got, err = a.reviewer.Create(ctx, tr, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		logger.V(2).Info("TokenReview failed", "err", err)
		if span != nil {
			span.SetAttributes(attribute.String("reviewauth.decision", "unavailable"))
			span.SetStatus(codes.Error, "review unavailable")
		}
		return result{}, err
	}
	if got == nil {
		return result{}, &reviewauth.ReviewError{Review: "TokenReview", Attempts: 1, Err: errors.New("empty answer")}
	}
	if msg := inconsistent(&got.Status); msg != "" {
		// A malformed or contradictory answer is not the API server's
		// verdict on the token: could not check, and not cached, so that
		// a valid caller is not refused for FailureTTL.
		err := &reviewauth.ReviewError{Review: "TokenReview", Code: 201, Attempts: 1, Err: errors.New(msg)}
		logger.V(2).Info("TokenReview answer is malformed", "err", err)
		if span != nil {
			span.SetAttributes(attribute.String("reviewauth.decision", "unavailable"))
			span.SetStatus(codes.Error, "malformed answer")
		}
		return result{}, err
	}
	resp, rej := a.judge(&got.Status, token)
	if span != nil {
		span.SetAttributes(attribute.String("reviewauth.decision", decision(rej == nil, nil)))
	}
	if rej != nil {
		logger.V(4).Info("TokenReview rejected the token", "reason", rej.Reason)
		a.rejected.Set(key, rej, a.opts.FailureTTL)
		a.ok.Delete(key) // a stale identity must not outlive a rejection
		return result{rejected: rej}, nil
	}
	now := a.clock.Now()
	ttl, keep := a.opts.SuccessTTL, a.opts.SuccessTTL
	if a.opts.StaleIfError > 0 {
		keep += a.opts.StaleIfError
	}
	if exp, ok := jwt.Expiry(token); ok {
		left := exp.Sub(now)
		ttl, keep = min(ttl, left), min(keep, left)
	}
	a.ok.Set(key, &identity{resp: resp, fresh: now.Add(ttl)}, keep)
	logger.V(4).Info("TokenReview authenticated", "user", resp.User.GetName(), "audiences", resp.Audiences, "cacheTTL", ttl)
	return result{resp: resp}, nil
}

// inconsistent says what is wrong with a TokenReview status that is not a
// verdict, or returns "". A real API server explains every rejection in
// status.error, and authenticates only with a username; so these are
// malformed answers:
//
//   - neither authenticated nor an error (an empty status, or an object of
//     another kind decoded as a TokenReview by a client that does not
//     check kinds);
//   - authenticated and an error at once (contradictory; as a
//     SubjectAccessReview both allowed and denied);
//   - authenticated without a username (no identity to hand on; no
//     Kubernetes authenticator produces one).
func inconsistent(st *authenticationv1.TokenReviewStatus) string {
	switch {
	case !st.Authenticated && st.Error == "":
		return "the answer has an empty status"
	case st.Authenticated && st.Error != "":
		return "contradictory answer: authenticated, with an error"
	case st.Authenticated && st.User.Username == "":
		return "contradictory answer: authenticated, without a username"
	}
	return ""
}

// judge turns a consistent TokenReview status (see inconsistent) into an
// identity or a rejection.
func (a *Authenticator) judge(st *authenticationv1.TokenReviewStatus, token string) (*authenticator.Response, *reviewauth.RejectedError) {
	if !st.Authenticated {
		return nil, &reviewauth.RejectedError{Reason: "the API server rejected the token: " + review.RedactToken(token)(st.Error)}
	}
	var auds authenticator.Audiences
	if len(a.audiences) == 0 {
		// AllowAPIServerAudience: the API server checked its own audience.
		auds = st.Audiences
	} else {
		if len(st.Audiences) == 0 {
			return nil, &reviewauth.RejectedError{Reason: "the API server's answer names no audience"}
		}
		auds = authenticator.Audiences(a.audiences).Intersect(st.Audiences)
		if len(auds) == 0 {
			return nil, &reviewauth.RejectedError{Reason: fmt.Sprintf("token audiences %q do not include any of %q", st.Audiences, a.audiences)}
		}
	}
	var extra map[string][]string
	if len(st.User.Extra) > 0 {
		extra = make(map[string][]string, len(st.User.Extra))
		for k, v := range st.User.Extra {
			extra[k] = slices.Clone([]string(v))
		}
	}
	return &authenticator.Response{
		Audiences: auds,
		User: &user.DefaultInfo{
			Name:   st.User.Username,
			UID:    st.User.UID,
			Groups: slices.Clone(st.User.Groups),
			Extra:  extra,
		},
	}, nil
}
