package authn

import (
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/cache"
	"github.com/reviewauth/reviewauth/internal/bearer"
	"github.com/reviewauth/reviewauth/internal/observe"
	"github.com/reviewauth/reviewauth/internal/review"
	"github.com/reviewauth/reviewauth/metrics"
)

// Defaults for [Options]. Each is used when the corresponding field is zero.
// The cache's are package cache's, stated there with their reasons.
const (
	// DefaultSuccessTTL is how long an authenticated identity is reused
	// without asking again: [cache.DefaultSuccessTTL], one minute, the
	// revocation latency (the token's own exp always caps it).
	DefaultSuccessTTL = cache.DefaultSuccessTTL

	// DefaultFailureTTL is how long a rejection is remembered:
	// [cache.DefaultFailureTTL], ten seconds.
	DefaultFailureTTL = cache.DefaultFailureTTL

	// DefaultMaxEntries bounds each of the success and rejection caches:
	// [cache.DefaultTokenMaxEntries].
	DefaultMaxEntries = cache.DefaultTokenMaxEntries

	// DefaultMaxTokenSize is the largest token reviewed, in bytes:
	// [cache.DefaultMaxTokenSize], 16 KiB. A service-account JWT is about
	// 1 KiB; 16 KiB leaves room for large OIDC tokens while refusing junk
	// before it costs a review.
	DefaultMaxTokenSize = cache.DefaultMaxTokenSize

	// DefaultTimeout is the total budget of one review, retries included:
	// [cache.DefaultTimeout], ten seconds.
	DefaultTimeout = cache.DefaultTimeout

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

// Options configures an [Authenticator] (and a [Client], which reads the
// fields that are not about caching). Every zero value means the default
// named in its comment. [New] reads Options once: changing it afterwards
// has no effect.
type Options struct {
	// Audiences are sent in every TokenReview's spec.audiences, and the
	// API server's answer must name at least one of them. Required, unless
	// AllowAPIServerAudience or AudiencesFromContext is set. Audiences in
	// a call's context replace them for that call: see
	// [Client.AuthenticateToken].
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

	// AudiencesFromContext, with no Audiences, is for a service that learns
	// its audience per call (a CSI sidecar reads it from its
	// SnapshotMetadataService object): every call must carry its audiences
	// in its context (authenticator.WithAudiences), and a call that does
	// not is refused (reviewauth.ErrUnauthenticated) without a review. One
	// Authenticator then serves every audience, each cached apart.
	AudiencesFromContext bool

	// SuccessTTL is how long an authenticated identity is cached; never past
	// the token's exp claim. Zero means [DefaultSuccessTTL]; negative
	// disables caching of successes (and with it StaleIfError).
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
	// and never past the token's exp. It has no effect when caching of
	// successes is disabled (SuccessTTL < 0, or
	// --authentication-token-webhook-cache-ttl=0). Rejections are never
	// extended, and a rejection removes the stale identity. Each stale serve
	// is counted in reviewauth_stale_serves_total{cache="token"}. Zero (the
	// default) disables it: an outage is reported as such.
	StaleIfError time.Duration

	// MaxTokenSize is the largest token reviewed, in bytes; larger tokens
	// are refused locally. Zero or negative means [DefaultMaxTokenSize].
	MaxTokenSize int

	// MaxInFlight bounds concurrent TokenReviews. Zero or negative means
	// [DefaultMaxInFlight]. Reviews past it wait in a fair queue: tokens
	// the PreVerifier found verified take up to three turns in a row, the
	// others at least one in four while they wait; within each, the
	// sources (package serving tells the client's address and connection)
	// take turns. A caller alone on its address, with n other addresses
	// waiting in its class, is reviewed within (n+1)*4 reviews done after
	// it arrived: one client's junk, verified or not, never starves
	// another's token.
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

	// PreVerifier, if not nil, checks each token before it is reviewed:
	// tokens it finds forged are refused without a review, tokens it finds
	// verified are reviewed in the class of the review queue that takes
	// most turns (see MaxInFlight), and the others are reviewed in the
	// other class. See [JWKSVerifier].
	PreVerifier PreVerifier

	// Metrics, if not nil, records reviews, retries, reviews in flight,
	// reviews the API server refused to perform for this service, and the
	// caches (as cache="token" and cache="token_rejected"). Register it on
	// your own registry. It does not keep the Authenticator alive.
	Metrics *metrics.Metrics

	// TracerProvider, if not nil, is used for OpenTelemetry spans: one per
	// AuthenticateToken call (attributes: cache hit, decision, and the
	// context's audiences if any) and one per TokenReview sent (its
	// audiences and decision). Nil means no spans, at no cost.
	TracerProvider trace.TracerProvider
}

// TracerName is the instrumentation name of the spans authn creates.
const TracerName = "github.com/reviewauth/reviewauth/authn"

// apiServerAudiences are the API server audiences of a default cluster. A
// service that lists one of them as its own audience accepts API server
// tokens, so New treats it like AllowAPIServerAudience.
var apiServerAudiences = []string{"https://kubernetes.default.svc", "https://kubernetes.default.svc.cluster.local", "kubernetes.default.svc", "api", "kubernetes"}

// Client authenticates bearer tokens with one TokenReview per call, and
// judges the API server's answer: the audiences, contradictory or
// malformed answers, and the API server refusing the service's own
// credentials. It caches nothing: an [Authenticator] is a Client behind
// package cache. Use a Client alone to compose a cache of your own, such
// as one in front of a union of a Client and another authenticator.Token.
// It implements authenticator.Token and is safe for concurrent use. Build
// one with [NewClient] or [NewClientForConfig]; the zero Client is not
// usable.
type Client struct {
	reviewer     TokenReviewer
	audiences    []string
	fromContext  bool // AudiencesFromContext: no audience without the context's
	allowAPIAud  bool
	maxTokenSize int
	timeout      time.Duration
	retrier      *review.Retrier
	preVerifier  PreVerifier
	tracer       trace.Tracer
}

var _ authenticator.Token = (*Client)(nil)

// NewClient returns a Client that reviews tokens with reviewer, configured
// by the fields of opts that are not about caching (SuccessTTL, FailureTTL,
// MaxEntries and StaleIfError are not read). It fails as [New] does.
func NewClient(reviewer TokenReviewer, opts Options) (*Client, error) {
	if reviewer == nil {
		return nil, errors.New("authn: nil TokenReviewer")
	}
	auds := slices.Clone(opts.Audiences)
	slices.Sort(auds)
	auds = slices.Compact(auds)
	switch {
	case len(auds) == 0 && !opts.AllowAPIServerAudience && !opts.AudiencesFromContext:
		return nil, errors.New("authn: no audience configured: set Options.Audiences to this service's audience (or, dangerously, AllowAPIServerAudience)")
	case len(auds) > 0 && opts.AllowAPIServerAudience:
		return nil, errors.New("authn: AllowAPIServerAudience is only for services without audiences of their own; unset it or Audiences")
	}
	for _, a := range auds {
		if err := checkAudience(a, opts.AllowAPIServerAudience); err != "" {
			return nil, errors.New("authn: " + err)
		}
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	c := &Client{
		reviewer:     reviewer,
		audiences:    auds,
		fromContext:  opts.AudiencesFromContext,
		allowAPIAud:  opts.AllowAPIServerAudience,
		maxTokenSize: review.Positive(opts.MaxTokenSize, DefaultMaxTokenSize),
		timeout:      review.Positive(opts.Timeout, DefaultTimeout),
		retrier: review.New("TokenReview", review.Options{Backoff: opts.Backoff, Clock: clk, MaxInFlight: opts.MaxInFlight,
			AttemptTimeout: opts.AttemptTimeout, Observer: review.ObserverOf(observe.Of(opts.Metrics))}),
		preVerifier: opts.PreVerifier,
	}
	if opts.TracerProvider != nil {
		c.tracer = opts.TracerProvider.Tracer(TracerName)
	}
	return c, nil
}

// checkAudience says what is wrong with the audience a, or returns "".
func checkAudience(a string, allowAPIAud bool) string {
	switch {
	case strings.TrimSpace(a) == "":
		return "empty audience"
	case slices.Contains(apiServerAudiences, a) && !allowAPIAud:
		return fmt.Sprintf("audience %q is the API server's own audience: tokens for it can be replayed against the API server; use an audience of this service", a)
	}
	return ""
}

// NewClientForConfig returns a Client that reviews tokens through the API
// server described by cfg, with the client [NewForConfig] uses.
func NewClientForConfig(cfg *rest.Config, opts Options) (*Client, error) {
	p, err := review.NewPoster[*authenticationv1.TokenReview](cfg, "/apis/authentication.k8s.io/v1/tokenreviews", authenticationv1.SchemeGroupVersion.WithKind("TokenReview"))
	if err != nil {
		return nil, fmt.Errorf("authn: building the TokenReview client: %w", err)
	}
	return NewClient(p, opts)
}

// Audiences returns the audiences the Client reviews tokens for when a
// call's context names none, in sorted order.
func (c *Client) Audiences() []string { return slices.Clone(c.audiences) }

// AuthenticateToken reports who token belongs to, with one TokenReview.
//
// It returns (nil, false, nil) for an empty token: no credential. A token
// refused locally (larger than MaxTokenSize, containing anything but visible
// ASCII, or found forged by the PreVerifier), or that the API server
// rejects, yields an error matching reviewauth.ErrUnauthenticated. A review
// that could not be completed, or an answer that is malformed or
// contradictory (authenticated with an error, or without a username),
// yields a *reviewauth.ReviewError matching reviewauth.ErrUnavailable. An
// answer that is neither authenticated nor says why (what client-go's fake
// clientset answers; a real API server always says why) is a rejection
// marked [cache.NoCache]: the cache in front of the Client does not keep it.
// Only a success returns true, with a Response whose Audiences are the
// call's audiences the token is valid for.
//
// The audiences of a call are those of its context
// (authenticator.WithAudiences), as in k8s.io/apiserver's webhook token
// authenticator, or, when the context has none (or an empty list), the
// configured Audiences. Context audiences are held to the same rules as
// configured ones: a call whose context names an empty audience, or the
// API server's own without AllowAPIServerAudience, is refused without a
// review; so is a call with no audience at all (with AudiencesFromContext
// and no Audiences), unless AllowAPIServerAudience. An absent or empty
// context audience never turns into the API server's audience but by
// AllowAPIServerAudience.
func (c *Client) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	if token == "" {
		return nil, false, nil
	}
	if rej := c.refuse(token); rej != nil {
		return nil, false, rej
	}
	auds, rej := c.audiencesOf(ctx)
	if rej != nil {
		return nil, false, rej
	}
	ctx, rej = c.preVerify(ctx, token, auds)
	if rej != nil {
		return nil, false, rej
	}
	return c.review(ctx, token, auds)
}

// refuse refuses, without a review, tokens that no API server would
// accept: larger than MaxTokenSize, or anything but visible ASCII (RFC
// 6750's b64token is a subset).
func (c *Client) refuse(token string) *reviewauth.RejectedError {
	if len(token) > c.maxTokenSize {
		return &reviewauth.RejectedError{Reason: fmt.Sprintf("token is larger than %d bytes", c.maxTokenSize)}
	}
	for i := 0; i < len(token); i++ {
		if ch := token[i]; ch <= ' ' || ch >= 0x7f {
			return &reviewauth.RejectedError{Reason: "token contains whitespace, control or non-ASCII characters"}
		}
	}
	return nil
}

// audiencesOf returns the audiences of a call under ctx (see
// [Client.AuthenticateToken]), or why there are none it may use.
func (c *Client) audiencesOf(ctx context.Context) ([]string, *reviewauth.RejectedError) {
	auds, _ := authenticator.AudiencesFrom(ctx)
	if len(auds) == 0 {
		if len(c.audiences) == 0 && !c.allowAPIAud {
			return nil, &reviewauth.RejectedError{Reason: "no audience to review the token for: the request context names none"}
		}
		return c.audiences, nil
	}
	for _, a := range auds {
		if err := checkAudience(a, c.allowAPIAud); err != "" {
			return nil, &reviewauth.RejectedError{Reason: "the request context's audiences: " + err}
		}
	}
	return auds, nil
}

// preVerify asks the PreVerifier about token, for the call's audiences
// auds (in the context it is given; none when the API server's own are
// meant), if there is one, and returns its refusal of a forged token. This
// is the one place where its verdict is known: a token it cannot tell
// about, or finds verified, is reviewed; one it finds verified is marked
// in the returned context, so that internal/review's fair queue gives it
// the class that takes most turns.
func (c *Client) preVerify(ctx context.Context, token string, auds []string) (context.Context, *reviewauth.RejectedError) {
	if c.preVerifier == nil {
		return ctx, nil
	}
	vctx := ctx
	if len(auds) > 0 {
		vctx = authenticator.WithAudiences(ctx, auds)
	}
	var rej *reviewauth.RejectedError
	err := c.preVerifier.Verify(vctx, token)
	switch {
	case errors.As(err, &rej):
		return ctx, rej
	case err == nil:
		return review.WithVerified(ctx), nil
	}
	return ctx, nil
}

// review sends one TokenReview of token for auds, with retries, and judges
// the answer.
func (c *Client) review(ctx context.Context, token string, auds []string) (*authenticator.Response, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	logger := klog.FromContext(ctx)
	var span trace.Span
	if c.tracer != nil {
		ctx, span = c.tracer.Start(ctx, "reviewauth.TokenReview", trace.WithAttributes(attribute.StringSlice("reviewauth.audiences", auds)))
		defer span.End()
	}
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: auds}}
	var got *authenticationv1.TokenReview
	err := c.retrier.Do(ctx, review.RedactToken(token), func(ctx context.Context) error {
		var err error
		got, err = c.reviewer.Create(ctx, tr, metav1.CreateOptions{})
		return err
	})
	if err == nil && got == nil {
		err = &reviewauth.ReviewError{Review: "TokenReview", Attempts: 1, Err: errors.New("empty answer")}
	}
	if err == nil {
		if msg := inconsistent(&got.Status); msg != "" {
			// A malformed or contradictory answer is not the API server's
			// verdict on the token: could not check, and not cached, so
			// that a valid caller is not refused for FailureTTL.
			err = &reviewauth.ReviewError{Review: "TokenReview", Code: 201, Attempts: 1, Err: errors.New(msg)}
		}
	}
	if err != nil {
		logger.V(2).Info("TokenReview failed", "err", err)
		if span != nil {
			span.SetAttributes(attribute.String("reviewauth.decision", "unavailable"))
			span.SetStatus(codes.Error, "review unavailable")
		}
		return nil, false, err
	}
	resp, rej := judge(&got.Status, token, auds)
	if span != nil {
		d := "authenticated"
		if rej != nil {
			d = "unauthenticated"
		}
		span.SetAttributes(attribute.String("reviewauth.decision", d))
	}
	if rej != nil {
		logger.V(4).Info("TokenReview rejected the token", "reason", rej.Reason)
		if !got.Status.Authenticated && got.Status.Error == "" {
			return nil, false, cache.NoCache(rej)
		}
		return nil, false, rej
	}
	logger.V(4).Info("TokenReview authenticated", "user", resp.User.GetName(), "audiences", resp.Audiences)
	return resp, true, nil
}

// inconsistent says what is wrong with a TokenReview status that is not a
// verdict, or returns "". A real API server authenticates only with a
// username, and never with an error; so these are malformed answers:
//
//   - authenticated and an error at once (contradictory; as a
//     SubjectAccessReview both allowed and denied);
//   - authenticated without a username (no identity to hand on; no
//     Kubernetes authenticator produces one).
//
// A status that is neither authenticated nor has an error is a rejection,
// as in k8s.io/apiserver's webhook authenticator, though not a verdict a
// real API server sends (see [Client.AuthenticateToken]).
func inconsistent(st *authenticationv1.TokenReviewStatus) string {
	switch {
	case st.Authenticated && st.Error != "":
		return "contradictory answer: authenticated, with an error"
	case st.Authenticated && st.User.Username == "":
		return "contradictory answer: authenticated, without a username"
	}
	return ""
}

// judge turns a consistent TokenReview status (see inconsistent) of a
// review for auds into an identity or a rejection.
func judge(st *authenticationv1.TokenReviewStatus, token string, auds []string) (*authenticator.Response, *reviewauth.RejectedError) {
	if !st.Authenticated {
		if st.Error == "" {
			return nil, &reviewauth.RejectedError{Reason: "the API server did not authenticate the token, and gave no reason"}
		}
		return nil, &reviewauth.RejectedError{Reason: "the API server rejected the token: " + review.RedactToken(token)(st.Error)}
	}
	var valid authenticator.Audiences
	if len(auds) == 0 {
		// AllowAPIServerAudience: the API server checked its own audience.
		valid = st.Audiences
	} else {
		if len(st.Audiences) == 0 {
			return nil, &reviewauth.RejectedError{Reason: "the API server's answer names no audience"}
		}
		valid = authenticator.Audiences(auds).Intersect(st.Audiences)
		if len(valid) == 0 {
			return nil, &reviewauth.RejectedError{Reason: fmt.Sprintf("token audiences %q do not include any of %q", st.Audiences, auds)}
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
		Audiences: valid,
		User: &user.DefaultInfo{
			Name:   st.User.Username,
			UID:    st.User.UID,
			Groups: slices.Clone(st.User.Groups),
			Extra:  extra,
		},
	}, nil
}

// Authenticator authenticates bearer tokens with TokenReviews, through a
// cache: a [Client] behind package cache's [cache.TokenAuthenticator], with
// the cache configured by the same Options. It implements
// authenticator.Token and authenticator.Request, and is safe for concurrent
// use. Build one with [New] or [NewForConfig]; the zero Authenticator is not
// usable. It starts one goroutine per shared review, which ends with the
// review.
//
// A token is looked up in the cache first (a success, then a rejection);
// on a miss, concurrent callers with the same token and context audiences
// share one call of the Client, in which the token is checked locally, then
// by the PreVerifier (a forged token stops there: no review, and the
// rejection is cached for FailureTTL), and only then reviewed.
type Authenticator struct {
	client *Client
	cached *cache.TokenAuthenticator
}

var (
	_ authenticator.Token   = (*Authenticator)(nil)
	_ authenticator.Request = (*Authenticator)(nil)
)

// New returns an Authenticator that reviews tokens with reviewer. It fails
// when reviewer is nil, when opts has no audience and neither
// AllowAPIServerAudience nor AudiencesFromContext is set, when an audience
// is empty, when an audience names a default API server audience without
// AllowAPIServerAudience, and when AllowAPIServerAudience comes with
// audiences.
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
	c, err := NewClient(reviewer, opts)
	if err != nil {
		return nil, err
	}
	return compose(c, opts)
}

// compose puts c behind the cache opts describes.
func compose(c *Client, opts Options) (*Authenticator, error) {
	cached, err := cache.NewTokenAuthenticator(c, cache.TokenOptions{
		SuccessTTL:     opts.SuccessTTL,
		FailureTTL:     opts.FailureTTL,
		MaxEntries:     opts.MaxEntries,
		StaleIfError:   opts.StaleIfError,
		MaxTokenSize:   c.maxTokenSize,
		Timeout:        c.timeout,
		Clock:          opts.Clock,
		Metrics:        opts.Metrics,
		Name:           "token",
		TracerProvider: opts.TracerProvider,
		SpanName:       "reviewauth.authn.AuthenticateToken",
	})
	if err != nil {
		return nil, err
	}
	return &Authenticator{client: c, cached: cached}, nil
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
	c, err := NewClientForConfig(cfg, opts)
	if err != nil {
		return nil, err
	}
	return compose(c, opts)
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

// Audiences returns the audiences the Authenticator reviews tokens for when
// a call's context names none, in sorted order.
func (a *Authenticator) Audiences() []string { return a.client.Audiences() }

// Uncached returns the [Client] behind the Authenticator's cache, so that
// [cache.NewTokenAuthenticator] given an Authenticator puts its cache in
// front of the Client rather than in front of this cache.
func (a *Authenticator) Uncached() authenticator.Token { return a.client }

// Revoke forgets every cached identity bound to one of uids (a pod's, a
// node's or a ServiceAccount's UID) and refuses such identities for a while
// afterwards, even when the API server still accepts their tokens:
// [cache.TokenAuthenticator.Revoke] on the Authenticator's cache, which
// says what it promises. It is safe for concurrent use.
func (a *Authenticator) Revoke(uids ...types.UID) { a.cached.Revoke(uids...) }

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

// AuthenticateToken reports who token belongs to: [Client.AuthenticateToken]
// through the cache ([cache.TokenAuthenticator.AuthenticateToken]).
//
// It returns (nil, false, nil) for an empty token: no credential. A token the
// API server rejects, or that is refused locally (larger than MaxTokenSize,
// containing anything but visible ASCII, or forged), yields an error
// matching reviewauth.ErrUnauthenticated. A review that could not be
// completed yields a *reviewauth.ReviewError matching
// reviewauth.ErrUnavailable. Only a success returns true, with a Response
// whose Audiences are the call's audiences the token is valid for.
//
// The Response is shared between callers and must not be modified.
func (a *Authenticator) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	return a.cached.AuthenticateToken(ctx, token)
}
