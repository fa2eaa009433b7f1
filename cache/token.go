package cache

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth"
	icache "github.com/reviewauth/reviewauth/internal/cache"
	"github.com/reviewauth/reviewauth/internal/jwt"
	"github.com/reviewauth/reviewauth/internal/observe"
	"github.com/reviewauth/reviewauth/metrics"
)

// Defaults of [TokenOptions], used for its zero fields. authn's defaults are
// these.
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

	// DefaultTokenMaxEntries bounds each of the success and rejection caches
	// of a [TokenAuthenticator].
	DefaultTokenMaxEntries = 4096

	// DefaultMaxTokenSize is the largest token looked up, in bytes. A
	// service-account JWT is about 1 KiB; 16 KiB leaves room for large OIDC
	// tokens while refusing junk before it costs a hash or a review.
	DefaultMaxTokenSize = 16 << 10

	// DefaultTimeout bounds the call a cache miss makes, shared by every
	// caller that misses on the same key: the total budget of one review,
	// retries included.
	DefaultTimeout = icache.DefaultLoadTimeout
)

// reviewTokens and reviewAttributes are the kinds of review the errors of
// the decorators name (reviewauth.ReviewError.Review).
const (
	reviewTokens     = "TokenReview"
	reviewAttributes = "SubjectAccessReview"
)

// TokenOptions configures a [TokenAuthenticator]. Every zero value means
// the default named in its comment. [NewTokenAuthenticator] reads it once:
// changing it afterwards has no effect.
type TokenOptions struct {
	// SuccessTTL is how long an authenticated identity is cached; never
	// past the token's exp claim, when the token is a JWT. Zero means
	// [DefaultSuccessTTL]; negative disables caching of identities (and
	// with it StaleIfError).
	SuccessTTL time.Duration
	// FailureTTL is how long a rejection is cached. Zero means
	// [DefaultFailureTTL]; negative disables caching of rejections.
	FailureTTL time.Duration
	// MaxEntries bounds the identity cache and, separately, the rejection
	// cache, so that a flood of bad tokens cannot evict good identities.
	// Zero or negative means [DefaultTokenMaxEntries].
	MaxEntries int

	// StaleIfError, when positive, lets an identity be served for up to
	// this long past its SuccessTTL, but only while the wrapped
	// authenticator cannot check (its error matches
	// reviewauth.ErrUnavailable), and never past the token's exp. It has
	// no effect when caching of identities is disabled. Rejections are never
	// extended, and a rejection removes the stale identity. Each stale serve
	// is counted in reviewauth_stale_serves_total{cache=<Name>}. Zero (the
	// default) disables it: an outage is reported as such.
	StaleIfError time.Duration

	// MaxTokenSize is the largest token looked up, in bytes; larger tokens
	// are refused (a *reviewauth.RejectedError) without a hash or a call.
	// Zero or negative means [DefaultMaxTokenSize].
	MaxTokenSize int

	// Timeout bounds the call shared by the callers that miss on one key.
	// No caller's deadline bounds it for the others. Zero or negative means
	// [DefaultTimeout].
	Timeout time.Duration

	// Clock tells the time for expiry. Nil means the real clock.
	Clock clock.PassiveClock

	// RevocationRetention is how long [TokenAuthenticator.Revoke] keeps
	// refusing identities bound to a revoked UID. Zero means
	// [DefaultRevocationRetention]; negative makes Revoke only forget
	// cached identities, so that the next review may bring them back.
	RevocationRetention time.Duration
	// MaxRevoked bounds how many revoked UIDs are remembered; beyond it
	// the least recently revoked or refused is forgotten first. Zero or
	// negative means [DefaultMaxRevoked].
	MaxRevoked int

	// Metrics, if not nil, records the caches (hits, misses, evictions,
	// entries, coalesced waits) as cache=<Name> and cache=<Name>_rejected,
	// and stale serves. It does not keep the TokenAuthenticator alive.
	Metrics *metrics.Metrics
	// Name names the caches in Metrics. Empty means "token".
	Name string

	// TracerProvider, if not nil, is used for one OpenTelemetry span per
	// AuthenticateToken call, named SpanName, with the attributes
	// reviewauth.cache_hit, reviewauth.decision and, when the context
	// carries audiences, reviewauth.audiences. Nil means no spans, at no
	// cost.
	TracerProvider trace.TracerProvider
	// SpanName names the spans. Empty means
	// "reviewauth.cache.AuthenticateToken".
	SpanName string
}

// TokenAuthenticator is an authenticator.Token that caches what the
// authenticator.Token it wraps answers. The package documentation says
// what it caches and for how long. It is safe for concurrent use if the
// wrapped authenticator is. Build one with [NewTokenAuthenticator]; the
// zero TokenAuthenticator is not usable. It starts one goroutine per shared
// call, which ends with the call.
type TokenAuthenticator struct {
	inner    authenticator.Token
	opts     TokenOptions
	clock    clock.PassiveClock
	keyer    *icache.Keyer
	noAud    *icache.TokenKeyer // keys of calls without context audiences
	ok       *icache.Cache[*identity]
	rejected *icache.Cache[rejection]
	group    icache.Group[result]
	metrics  *observe.Recorder
	tracer   trace.Tracer
	revoked  revocations
}

var _ authenticator.Token = (*TokenAuthenticator)(nil)

// identity is a cached success. With StaleIfError the cache keeps it past
// fresh, for use only when the wrapped authenticator cannot check.
type identity struct {
	resp  *authenticator.Response
	notes *notes // replayed on every hit
	fresh time.Time
	bound []string // the UIDs the identity is bound to (see Revoke)
}

// rejection is a cached rejection: the error the wrapped authenticator
// returned, nil for (nil, false, nil).
type rejection struct{ err error }

// result is what a shared call hands its callers.
type result struct {
	resp     *authenticator.Response
	notes    *notes
	rejected bool
	err      error // with rejected: the rejection's error, or nil
}

// NewTokenAuthenticator returns a TokenAuthenticator that caches inner's
// answers as opts says. When inner is itself a cache (it has a method
// Uncached() authenticator.Token, as [TokenAuthenticator] and
// authn.Authenticator do), the new one wraps what that one wraps, with
// opts, rather than putting a cache in front of a cache. It fails when inner is
// nil; it validates nothing else, since every value of opts means
// something.
func NewTokenAuthenticator(inner authenticator.Token, opts TokenOptions) (*TokenAuthenticator, error) {
	if u, ok := inner.(interface{ Uncached() authenticator.Token }); ok {
		inner = u.Uncached()
	}
	if inner == nil {
		return nil, errors.New("cache: NewTokenAuthenticator with a nil authenticator")
	}
	opts.SuccessTTL = cmp.Or(opts.SuccessTTL, DefaultSuccessTTL)
	opts.FailureTTL = cmp.Or(opts.FailureTTL, DefaultFailureTTL)
	opts.MaxEntries = positive(opts.MaxEntries, DefaultTokenMaxEntries)
	opts.MaxTokenSize = positive(opts.MaxTokenSize, DefaultMaxTokenSize)
	opts.Timeout = positive(opts.Timeout, DefaultTimeout)
	opts.Name = cmp.Or(opts.Name, "token")
	opts.SpanName = cmp.Or(opts.SpanName, "reviewauth.cache.AuthenticateToken")
	opts.RevocationRetention = cmp.Or(opts.RevocationRetention, DefaultRevocationRetention)
	opts.MaxRevoked = positive(opts.MaxRevoked, DefaultMaxRevoked)
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	opts.Clock = clk
	keyer := icache.NewKeyer()
	c := &TokenAuthenticator{
		inner:    inner,
		opts:     opts,
		clock:    clk,
		keyer:    keyer,
		noAud:    keyer.ForAudiences(nil),
		ok:       icache.New[*identity](icache.Options{MaxEntries: opts.MaxEntries, Clock: clk}),
		rejected: icache.New[rejection](icache.Options{MaxEntries: opts.MaxEntries, Clock: clk}),
		group:    icache.Group[result]{Timeout: opts.Timeout},
		metrics:  observe.Of(opts.Metrics),
	}
	c.revoked.init(keyer, &opts)
	if opts.TracerProvider != nil {
		c.tracer = opts.TracerProvider.Tracer(TracerName)
	}
	c.group.Counters = c.ok.Counters()
	c.metrics.AddCache(opts.Name, c.ok.Counters())
	c.metrics.AddCache(opts.Name+"_rejected", c.rejected.Counters())
	return c, nil
}

// TracerName is the instrumentation name of the spans the decorators
// create.
const TracerName = "github.com/reviewauth/reviewauth/cache"

// positive returns v if it is positive, else def.
func positive[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// Uncached returns the authenticator c wraps.
func (c *TokenAuthenticator) Uncached() authenticator.Token { return c.inner }

// AuthenticateToken implements authenticator.Token: it answers from the
// cache when it can, and otherwise asks the wrapped authenticator once for
// every concurrent caller with the same token and context audiences
// (authenticator.AudiencesFrom), which key the cache with the token.
//
// A token larger than MaxTokenSize is refused: an error matching
// reviewauth.ErrUnauthenticated. A caller whose ctx ends while it waits
// returns at once with a *reviewauth.ReviewError wrapping ctx's error (the
// shared call goes on for the others, and is cancelled when every caller
// has left); so does every caller when the call panics. Otherwise the
// answer is the wrapped authenticator's (a success with the warnings and
// audit annotations its call recorded), or a cached copy of it (the
// Response is shared between callers and must not be modified), or a
// stale identity (see [TokenOptions].StaleIfError). The package
// documentation lists how this differs from k8s.io/apiserver's token
// cache.
//
// A hit does not allocate, with or without context audiences (with the
// BLAKE2b PRF, for the first 16 audience sets the TokenAuthenticator sees;
// a hit under any other allocates a keyed hash state).
func (c *TokenAuthenticator) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	if c.tracer != nil {
		return c.authenticateTraced(ctx, token)
	}
	resp, ok, err, _ := c.authenticate(ctx, token)
	return resp, ok, err
}

func (c *TokenAuthenticator) authenticateTraced(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	ctx, span := c.tracer.Start(ctx, c.opts.SpanName)
	defer span.End()
	if auds, ok := authenticator.AudiencesFrom(ctx); ok {
		span.SetAttributes(attribute.StringSlice("reviewauth.audiences", auds))
	}
	resp, ok, err, hit := c.authenticate(ctx, token)
	d := tokenDecision(ok, err)
	span.SetAttributes(attribute.Bool("reviewauth.cache_hit", hit), attribute.String("reviewauth.decision", d))
	if d == "unavailable" {
		span.SetStatus(codes.Error, "review unavailable")
	}
	return resp, ok, err
}

// tokenDecision names the outcome of an authentication for spans:
// "authenticated", "unauthenticated" (a refusal, or an error that does not
// match reviewauth.ErrUnavailable) or "unavailable".
func tokenDecision(ok bool, err error) string {
	switch {
	case ok && err == nil:
		return "authenticated"
	case errors.Is(err, reviewauth.ErrUnavailable):
		return "unavailable"
	default:
		return "unauthenticated"
	}
}

// authenticate is AuthenticateToken; hit reports whether a cache answered.
func (c *TokenAuthenticator) authenticate(ctx context.Context, token string) (_ *authenticator.Response, _ bool, _ error, hit bool) {
	if len(token) > c.opts.MaxTokenSize {
		// Checked before hashing, so that junk costs nothing.
		return nil, false, &reviewauth.RejectedError{Reason: fmt.Sprintf("token is larger than %d bytes", c.opts.MaxTokenSize)}, false
	}
	key := c.key(ctx, token)
	id, found := c.ok.Get(key)
	var stale *identity
	if found {
		if c.opts.StaleIfError <= 0 || c.clock.Now().Before(id.fresh) {
			id.notes.replay(ctx)
			return id.resp, true, nil, true
		}
		stale = id
	}
	if rej, found := c.rejected.Get(key); found {
		return nil, false, rej.err, true
	}
	if err := ctx.Err(); err != nil {
		return nil, false, &reviewauth.ReviewError{Review: reviewTokens, Err: err}, false
	}
	res, _, err := c.group.Do(ctx, key, func(lctx context.Context) (result, error) {
		return c.load(lctx, key, token)
	})
	if err != nil {
		if werr, ok := fromWait(ctx, err, reviewTokens, token); ok {
			return nil, false, werr, false
		}
		if cur, ok := c.ok.Peek(key); stale != nil && ok && cur == stale && errors.Is(err, reviewauth.ErrUnavailable) {
			// Stale-if-error: the wrapped authenticator cannot check,
			// and this token was authenticated less than StaleIfError
			// ago past its TTL. The second look makes sure that the
			// identity was neither revoked nor replaced meanwhile.
			c.metrics.StaleServe(c.opts.Name)
			klog.FromContext(ctx).V(2).Info("Serving a stale identity: the authenticator cannot check", "user", stale.resp.User.GetName(), "err", err)
			stale.notes.replay(ctx)
			return stale.resp, true, nil, true
		}
		return nil, false, err, false
	}
	if res.rejected {
		return nil, false, res.err, false
	}
	res.notes.replay(ctx)
	return res.resp, true, nil, false
}

// key returns the cache key of token for the audiences in ctx.
func (c *TokenAuthenticator) key(ctx context.Context, token string) icache.Key {
	if auds, _ := authenticator.AudiencesFrom(ctx); len(auds) > 0 {
		return c.keyer.TokenKey(token, auds)
	}
	return c.noAud.Key(token)
}

// load runs once per key at a time, under the Group's detached context.
// It stores its result in the caches itself, so that waiters only read.
// Its error is the wrapped authenticator's, or "could not check"; it is
// never cached.
func (c *TokenAuthenticator) load(ctx context.Context, key icache.Key, token string) (result, error) {
	// A caller that missed the caches just before a previous call stored
	// its result, and reached the Group just after that call finished,
	// would otherwise call again. This second look is part of the same
	// lookup: it counts no hit or miss.
	if id, ok := c.ok.Peek(key); ok && (c.opts.StaleIfError <= 0 || c.clock.Now().Before(id.fresh)) {
		return result{resp: id.resp, notes: id.notes}, nil
	}
	if rej, ok := c.rejected.Peek(key); ok {
		return result{rejected: true, err: rej.err}, nil
	}
	gen := c.revoked.gen.Load()
	rctx, recorded := recording(ctx)
	resp, ok, err := c.inner.AuthenticateToken(rctx, token)
	// An answer given after the call's context ended (every caller left,
	// or Timeout) is not cached: it may be an artefact of the
	// cancellation, and nobody may be left to receive it.
	cache := ctx.Err() == nil
	var nc *noCacheError
	if errors.As(err, &nc) {
		err, cache = nc.err, false
	}
	switch {
	case couldNotCheck(ctx, err):
		return result{}, asUnavailable(ctx, err, reviewTokens)
	case err != nil && !errors.Is(err, reviewauth.ErrUnauthenticated):
		// Neither "could not check" nor a definite rejection: returned
		// as it is and not cached, as k8s.io/apiserver's token cache
		// does with every error. It may be a rejection all the same
		// (apiserver's webhook authenticator reports one so), so it
		// removes a stale identity.
		c.ok.Delete(key)
		return result{}, err
	case ok && err == nil && (resp == nil || resp.User == nil):
		return result{}, &reviewauth.ReviewError{Review: reviewTokens, Err: errors.New("cache: the authenticator authenticated a token without a user")}
	case ok && err == nil:
		n := recorded()
		if c.store(key, token, resp, n, gen, cache) {
			return result{resp: resp, notes: n}, nil
		}
		err = errRevoked
	}
	// A rejection: a refusal ((nil, false, nil), or a Response without
	// ok), an error matching reviewauth.ErrUnauthenticated, or a revoked
	// identity.
	c.ok.Delete(key) // a stale identity must not outlive a rejection
	if cache {
		c.rejected.Set(key, rejection{err: err}, c.opts.FailureTTL)
	}
	return result{rejected: true, err: err}, nil
}

// store caches the identity resp of token under key with the notes n of
// its call, unless it is bound to a revoked UID, and reports whether it is
// not. The review that returned resp started at revocation generation
// gen: if a Revoke came since, or cache is false, the identity is returned
// but not cached. It decides under the
// read lock of the revocations, so that a concurrent Revoke either finds
// the identity in the cache or keeps it out (see revocations).
func (c *TokenAuthenticator) store(key icache.Key, token string, resp *authenticator.Response, n *notes, gen uint64, cache bool) bool {
	id := &identity{resp: resp, notes: n, bound: boundUIDs(resp.User)}
	now := c.clock.Now()
	ttl := c.opts.SuccessTTL
	keep := retention(ttl, c.opts.StaleIfError)
	if exp, ok := jwt.Expiry(token); ok {
		left := exp.Sub(now)
		ttl, keep = min(ttl, left), min(keep, left)
	}
	id.fresh = now.Add(ttl)
	c.revoked.mu.RLock()
	defer c.revoked.mu.RUnlock()
	if c.revoked.revoked(id.bound) {
		return false
	}
	if cache && c.revoked.gen.Load() == gen {
		c.ok.Set(key, id, keep)
	}
	return true
}

// NoCache marks err, a rejection that a wrapped authenticator returns, as
// one a [TokenAuthenticator] must not cache: it returns err itself (without
// the mark) to the callers of that call, and the next call asks again. It
// is for a rejection that is not a verdict on the token: authn marks a
// TokenReview that says "not authenticated" without saying why, which no
// real API server sends (client-go's fake clientset does). NoCache(nil) is
// nil.
func NoCache(err error) error {
	if err == nil {
		return nil
	}
	return &noCacheError{err: err}
}

type noCacheError struct{ err error }

func (e *noCacheError) Error() string { return e.err.Error() }
func (e *noCacheError) Unwrap() error { return e.err }
