package grpcauth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	"golang.org/x/oauth2"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth/internal/cache"
	"github.com/reviewauth/reviewauth/internal/jwt"
	"github.com/reviewauth/reviewauth/internal/review"
)

// ContextTokenSource is an [oauth2.TokenSource] that can also get a token
// on behalf of a caller's context: TokenContext stops waiting when ctx is
// done and logs through klog.FromContext(ctx). [PerRPCCredentials] and
// [RoundTripper] call TokenContext, with the call's or the request's
// context, on a source that has it, and Token on any other
// oauth2.TokenSource. [TokenRequestSource] and [TokenSourceFunc] implement
// it.
//
// As oauth2.TokenSource says, Token (and TokenContext) must be safe for
// concurrent use by multiple goroutines, and the returned token must not be
// modified. The sources of this package return a token that has not
// expired, or an error; never an expired token.
type ContextTokenSource interface {
	oauth2.TokenSource
	TokenContext(ctx context.Context) (*oauth2.Token, error)
}

// TokenSourceFunc adapts a function to [ContextTokenSource]: TokenContext
// calls f(ctx), and Token calls f(context.Background()).
type TokenSourceFunc func(ctx context.Context) (*oauth2.Token, error)

// Token calls f with context.Background().
func (f TokenSourceFunc) Token() (*oauth2.Token, error) { return f(context.Background()) }

// TokenContext calls f(ctx).
func (f TokenSourceFunc) TokenContext(ctx context.Context) (*oauth2.Token, error) { return f(ctx) }

// tokenFrom asks src for a token on behalf of ctx: with TokenContext when
// src has it. A nil token, or one without an access token, is an error, so
// that no caller sends an empty credential.
func tokenFrom(ctx context.Context, src oauth2.TokenSource) (*oauth2.Token, error) {
	var (
		tok *oauth2.Token
		err error
	)
	if cs, ok := src.(ContextTokenSource); ok {
		tok, err = cs.TokenContext(ctx)
	} else {
		tok, err = src.Token()
	}
	if err != nil {
		return nil, err
	}
	if tok == nil || tok.AccessToken == "" {
		return nil, errors.New("grpcauth: the token source returned no token")
	}
	return tok, nil
}

// bearerToken returns the oauth2.Token of a bearer token that expires at exp
// (zero: no exp claim): a new one on every call, so that no caller can
// change another's.
func bearerToken(token string, exp time.Time) *oauth2.Token {
	return &oauth2.Token{AccessToken: token, TokenType: "Bearer", Expiry: exp}
}

// refreshFraction is the fraction of a token's lifetime after which a new
// one is fetched: the kubelet rotates projected tokens at 80% too.
const refreshFraction = 0.8

// refreshPoint returns the time at refreshFraction of [issued, exp].
func refreshPoint(issued, exp time.Time) time.Time {
	return issued.Add(time.Duration(float64(exp.Sub(issued)) * refreshFraction))
}

// FileOptions configures [NewFileTokenSource]. The zero value is ready to
// use.
type FileOptions struct {
	// RecheckInterval is how long a token read from the file is served
	// before the file is checked for rotation again (one stat; the file is
	// read again only if it changed). Zero or negative means 30 seconds,
	// well below the 2 minutes or more that remain when the kubelet rotates
	// a token. The file is also checked on every call once the cached token
	// is past 80% of its lifetime, and it is read again whenever it
	// changed.
	RecheckInterval time.Duration
	// Clock is the time source. Nil means the real clock.
	Clock clock.PassiveClock
}

// FileTokenSource is an [oauth2.TokenSource] that reads a projected
// service-account token from a file, such as the one the kubelet mounts and
// rotates. It caches the token and does not touch the file on every call:
// it checks the file again (a stat) after [FileOptions.RecheckInterval], or
// on every call once the token is past 80% of the lifetime stated by its
// JWT claims, and reads it again only when it changed. It never returns a
// token whose exp claim has passed. It starts no goroutine and is safe for
// concurrent use. Build one with [NewFileTokenSource]; the zero
// FileTokenSource is not usable.
//
// Being an oauth2.TokenSource, it plugs into grpc's
// credentials/oauth.TokenSource and client-go's
// transport.TokenSourceWrapTransport as it is; [PerRPCCredentials] and
// [RoundTripper] add what those lack (the token goes to one server only).
// Do not wrap it in oauth2.ReuseTokenSource: it caches already, and a token
// without an exp claim has a zero Expiry, which ReuseTokenSource reads as
// "never expires", so that it would never see the file rotate.
//
// grpc's own google.golang.org/grpc/credentials/jwt (experimental in grpc
// v1.85.0) also sends a token file on gRPC calls. It fits a gRPC-only
// client whose token file always holds a JWT with an exp claim and which
// talks to a single server, or whose call credentials come from xDS (gRFC
// A97): it needs no code of this package. It reads the file again only
// within a minute of exp (so a rotated token is picked up late, which is
// harmless while the old one is valid), refreshes on a goroutine of its
// own, and binds the token to no server. Prefer FileTokenSource with
// [PerRPCCredentials] when the same credentials value may reach more than
// one server, when the token may not be a JWT, when HTTP clients need the
// same token ([RoundTripper], client-go), or when tests need an injectable
// clock; and [TokenRequestSource] when there is no file to read.
type FileTokenSource struct {
	path     string
	interval time.Duration
	clock    clock.PassiveClock

	mu        sync.Mutex
	token     string
	info      os.FileInfo
	checkedAt time.Time
	refreshAt time.Time // zero when the token has no exp claim
	exp       time.Time // zero when the token has no exp claim
}

var _ oauth2.TokenSource = (*FileTokenSource)(nil)

// NewFileTokenSource returns a [FileTokenSource] for the token file at path.
// The file is read on the first call to Token, not here. An empty path is
// an error.
func NewFileTokenSource(path string, opts FileOptions) (*FileTokenSource, error) {
	if path == "" {
		return nil, errors.New("grpcauth: NewFileTokenSource: empty path")
	}
	if opts.RecheckInterval <= 0 {
		opts.RecheckInterval = 30 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &FileTokenSource{path: path, interval: opts.RecheckInterval, clock: opts.Clock}, nil
}

// Token returns the token in the file, reading the file again if it was
// rotated, as a bearer oauth2.Token whose Expiry is the token's exp claim
// (zero when it has none). It returns an error if the file cannot be read,
// is empty, or holds an expired token. Token implements oauth2.TokenSource.
func (s *FileTokenSource) Token() (*oauth2.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	due := s.token == "" || !now.Before(s.checkedAt.Add(s.interval)) ||
		(!s.refreshAt.IsZero() && !now.Before(s.refreshAt))
	if due {
		if err := s.reload(now); err != nil {
			return nil, err
		}
	}
	if !s.exp.IsZero() && !now.Before(s.exp) {
		return nil, fmt.Errorf("grpcauth: token file %s holds a token that expired at %s and was not rotated", s.path, s.exp.UTC().Format(time.RFC3339))
	}
	return bearerToken(s.token, s.exp), nil
}

func (s *FileTokenSource) reload(now time.Time) error {
	fi, err := os.Stat(s.path)
	if err != nil {
		return fmt.Errorf("grpcauth: token file: %w", err)
	}
	if s.token != "" && s.info != nil && os.SameFile(fi, s.info) &&
		fi.ModTime().Equal(s.info.ModTime()) && fi.Size() == s.info.Size() {
		s.checkedAt = now
		return nil
	}
	b, err := os.ReadFile(s.path)
	if err != nil {
		return fmt.Errorf("grpcauth: token file: %w", err)
	}
	tok := string(bytes.TrimSpace(b))
	if tok == "" {
		return fmt.Errorf("grpcauth: token file %s is empty", s.path)
	}
	s.token, s.info, s.checkedAt = tok, fi, now
	s.refreshAt, s.exp = time.Time{}, time.Time{}
	if iat, exp, ok := jwt.Lifetime(tok); ok {
		if iat.IsZero() || iat.After(now) {
			iat = now // no issue time: count the lifetime from the read
		}
		s.exp = exp
		s.refreshAt = refreshPoint(iat, exp)
	}
	return nil
}

// TokenCreator is the one call [TokenRequestSource] makes, in the shape of
// client-go's ServiceAccountInterface.CreateToken: a TokenCreator is bound
// to one namespace. [NewTokenRequestSourceForConfig] builds one that never
// logs a body and bounds answers. A client-go typed client
// (clientset.CoreV1().ServiceAccounts(ns)) satisfies it too, but logs the
// response body, which is the minted token, through the global klog at
// -v=8 and above when contextual logging is off, and reads answers of any
// size; use it only where neither can happen.
type TokenCreator interface {
	CreateToken(ctx context.Context, serviceAccountName string, tokenRequest *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error)
}

// TokenRequestOptions configures [NewTokenRequestSourceForConfig] and
// [NewTokenRequestSource].
type TokenRequestOptions struct {
	// Namespace is the namespace of the service account.
	// NewTokenRequestSourceForConfig requires it; NewTokenRequestSource
	// ignores it, since its [TokenCreator] is bound to a namespace.
	Namespace string
	// ServiceAccount is the name of the service account to get tokens for.
	// Required.
	ServiceAccount string
	// Audiences are the audiences of the tokens: the audience the server
	// checks. Nil means the API server's own audience, which a server that
	// checks its audience rejects.
	Audiences []string
	// Lifetime is the requested lifetime. Zero or negative means 10
	// minutes, the shortest the API server grants. The API server may grant
	// another lifetime; refreshes follow the granted one.
	Lifetime time.Duration
	// BoundObject binds the tokens to an object (a Pod, Secret or Node), so
	// that they are invalidated with it. Nil means unbound.
	BoundObject *authenticationv1.BoundObjectReference
	// RetryInterval is the minimum time between two refresh attempts after
	// a failure, while the cached token is still valid. Zero or negative
	// means 10 seconds.
	RetryInterval time.Duration
	// Timeout bounds each TokenRequest, which runs detached from the
	// callers' contexts (see [TokenRequestSource]). Zero or negative means
	// 10 seconds.
	Timeout time.Duration
	// Clock is the time source. Nil means the real clock.
	Clock clock.PassiveClock
}

// TokenRequestSource is a [ContextTokenSource] (an [oauth2.TokenSource])
// that gets tokens for a service account from the TokenRequest API and
// caches them. A token is refreshed
// once 80% of its granted lifetime has passed. If that refresh fails while
// the cached token is still valid, the cached token is served, the failure
// is logged through the context's logger, and the refresh is tried again
// after [TokenRequestOptions.RetryInterval]; once the cached token has
// expired, Token returns the refresh error instead. It never returns an
// expired token.
//
// Concurrent callers share one TokenRequest, as the authenticator's reviews
// are shared: the request runs detached from every caller's
// cancellation, under its own [TokenRequestOptions.Timeout]; each caller
// stops waiting when its own context is done (and then gets the cached token
// if it is still valid, or its context's error), and the request is
// cancelled only when every caller waiting for it has left. One caller's
// cancellation never fails the others. The request runs on a goroutine of
// its own, which ends with it; TokenRequestSource starts no other. It is
// safe for concurrent use. Build one with [NewTokenRequestSourceForConfig]
// or [NewTokenRequestSource]; the zero TokenRequestSource is not usable.
type TokenRequestSource struct {
	client TokenCreator
	opts   TokenRequestOptions
	// token holds the granted token: refreshed at 80% of its lifetime,
	// retried after RetryInterval while it is valid, never served past its
	// expiry.
	token cache.Holder[granted]
}

// granted is a token the API server granted, and its expiry.
type granted struct {
	token string
	exp   time.Time
}

var _ ContextTokenSource = (*TokenRequestSource)(nil)

// NewTokenRequestSourceForConfig returns a [TokenRequestSource] that asks
// the API server cfg describes for tokens of opts.ServiceAccount in
// opts.Namespace (POST /api/v1/namespaces/NS/serviceaccounts/NAME/token),
// over the HTTP client client-go builds for cfg, with the review client of
// authn and authz: no request or response body (the token) is ever logged,
// at any klog verbosity, contextual logging on or off; answers are bounded
// (256 KiB more than the request) and must be TokenRequests. QPS and Burst
// default to 200 and 400 when cfg leaves them zero. cfg is not modified. It
// makes no request until the first call to Token.
func NewTokenRequestSourceForConfig(cfg *rest.Config, opts TokenRequestOptions) (*TokenRequestSource, error) {
	if opts.Namespace == "" {
		return nil, errors.New("grpcauth: NewTokenRequestSourceForConfig: Namespace is required")
	}
	c, err := review.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("grpcauth: building the TokenRequest client: %w", err)
	}
	return NewTokenRequestSource(tokenRequests{c: c, namespace: opts.Namespace}, opts)
}

// tokenRequests creates TokenRequests in one namespace with a review.Client.
type tokenRequests struct {
	c         *review.Client
	namespace string
}

func (t tokenRequests) CreateToken(ctx context.Context, name string, tr *authenticationv1.TokenRequest, _ metav1.CreateOptions) (*authenticationv1.TokenRequest, error) {
	path := "/api/v1/namespaces/" + url.PathEscape(t.namespace) + "/serviceaccounts/" + url.PathEscape(name) + "/token"
	return review.Create(ctx, t.c, path, authenticationv1.SchemeGroupVersion.WithKind("TokenRequest"), tr)
}

// NewTokenRequestSource returns a [TokenRequestSource] that asks client for
// tokens (see [TokenCreator]; prefer [NewTokenRequestSourceForConfig]). It
// makes no request until the first call to Token.
func NewTokenRequestSource(client TokenCreator, opts TokenRequestOptions) (*TokenRequestSource, error) {
	if client == nil {
		return nil, errors.New("grpcauth: NewTokenRequestSource: nil TokenCreator")
	}
	if opts.ServiceAccount == "" {
		return nil, errors.New("grpcauth: NewTokenRequestSource: ServiceAccount is required")
	}
	if opts.Lifetime <= 0 {
		opts.Lifetime = 10 * time.Minute
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 10 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = cache.DefaultLoadTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	opts.Audiences = append([]string(nil), opts.Audiences...)
	return &TokenRequestSource{client: client, opts: opts, token: cache.Holder[granted]{
		Timeout: opts.Timeout, RetryInterval: opts.RetryInterval, Clock: opts.Clock}}, nil
}

// Token returns a valid token, fetching a new one when the cached one is
// past 80% of its lifetime, as a bearer oauth2.Token whose Expiry is the
// granted expiration. It is TokenContext with context.Background(): it waits
// for a TokenRequest at most [TokenRequestOptions].Timeout, and a refresh
// failure it covers with the cached token is logged through klog's global
// logger. Token implements oauth2.TokenSource, for callers that have no
// context to give (grpc's credentials/oauth, client-go's
// transport.TokenSourceWrapTransport).
func (s *TokenRequestSource) Token() (*oauth2.Token, error) {
	return s.TokenContext(context.Background())
}

// TokenContext is Token on behalf of a caller: it stops waiting when ctx is
// done (see [TokenRequestSource]), and logs through klog.FromContext(ctx).
func (s *TokenRequestSource) TokenContext(ctx context.Context) (*oauth2.Token, error) {
	g, ok, err := s.token.Get(ctx, false, s.refresh)
	switch {
	case ok && err != nil && ctx.Err() == nil:
		klog.FromContext(ctx).Error(err, "Refreshing the service account token failed; using the cached token until it expires",
			"serviceAccount", s.opts.ServiceAccount)
		return bearerToken(g.token, g.exp), nil
	case ok:
		return bearerToken(g.token, g.exp), nil
	case err == nil:
		// Cannot happen: without a valid token every caller may fetch.
		return nil, fmt.Errorf("grpcauth: no token for service account %q", s.opts.ServiceAccount)
	}
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return nil, fmt.Errorf("grpcauth: waiting for TokenRequest: %w", err)
	}
	return nil, err
}

// refresh makes one TokenRequest on behalf of every caller waiting for it.
// ctx is the Holder's detached context.
func (s *TokenRequestSource) refresh(ctx context.Context) (cache.Fetched[granted], error) {
	now := s.opts.Clock.Now()
	tok, exp, err := s.request(ctx, now)
	if err != nil {
		return cache.Fetched[granted]{}, err
	}
	return cache.Fetched[granted]{Value: granted{token: tok, exp: exp}, RefreshAt: refreshPoint(now, exp), Expires: exp}, nil
}

func (s *TokenRequestSource) request(ctx context.Context, now time.Time) (string, time.Time, error) {
	secs := int64(s.opts.Lifetime / time.Second)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         s.opts.Audiences,
		ExpirationSeconds: &secs,
		BoundObjectRef:    s.opts.BoundObject,
	}}
	resp, err := s.client.CreateToken(ctx, s.opts.ServiceAccount, tr, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("grpcauth: TokenRequest for service account %q: %w", s.opts.ServiceAccount, err)
	}
	exp := resp.Status.ExpirationTimestamp.Time
	if resp.Status.Token == "" || !now.Before(exp) {
		return "", time.Time{}, fmt.Errorf("grpcauth: TokenRequest for service account %q returned no token or an expired one", s.opts.ServiceAccount)
	}
	return resp.Status.Token, exp, nil
}
