package review

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/internal/scheme"
)

// MaxAnswerBytes, DefaultQPS and DefaultBurst are reviewauth's: see there.
const (
	MaxAnswerBytes = reviewauth.MaxAnswerBytes
	DefaultQPS     = reviewauth.DefaultQPS
	DefaultBurst   = reviewauth.DefaultBurst
)

// ErrAnswerTooLarge reports an answer larger than the client reads. It is
// "could not check", and is not retried: the same question gets the same
// answer.
var ErrAnswerTooLarge = errors.New("the answer is larger than the limit")

// Client posts reviews to an API server over the HTTP client that client-go
// builds for a rest.Config (TLS, bearer token, token file, exec and
// certificate authentication, certificate rotation), with client-go's
// token-bucket rate limiter, but not through client-go's rest.Request:
//
//   - rest.Request logs request and response bodies at -v=8 through the
//     global klog when contextual logging is off, and a TokenReview's body
//     is the token; Client never logs a body. client-go's transport debug
//     wrappers (installed when -v>=6 at build time) log URLs and headers,
//     with the Authorization header masked, never bodies.
//   - rest.Request reads answers without a bound; Client reads at most a
//     limit and refuses the rest.
//   - Client reads Retry-After from the answer itself.
//
// Error answers carrying a metav1.Status become the apierrors they would
// be through client-go, so their codes and reasons are the same. A Client
// is safe for concurrent use.
type Client struct {
	http    *http.Client
	base    *url.URL
	limiter flowcontrol.RateLimiter
	// turn orders the waits on limiter as the review queue orders reviews
	// (see Client.do).
	turn      *Queue
	userAgent string
}

// NewClient returns a Client for the API server cfg describes. QPS and Burst
// default to [DefaultQPS] and [DefaultBurst] when zero; a negative QPS
// disables client-side rate limiting, and cfg.RateLimiter, if set, is used
// as it is. cfg is not modified.
func NewClient(cfg *rest.Config) (*Client, error) {
	if cfg == nil {
		return nil, errors.New("nil rest.Config")
	}
	cfg = rest.CopyConfig(cfg)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, err
	}
	limiter := cfg.RateLimiter
	if limiter == nil {
		qps, burst := cfg.QPS, cfg.Burst
		if qps == 0 {
			qps = DefaultQPS
		}
		if burst == 0 {
			burst = DefaultBurst
		}
		if qps > 0 {
			limiter = flowcontrol.NewTokenBucketRateLimiter(qps, burst)
		}
	}
	ua := cfg.UserAgent
	if ua == "" {
		ua = rest.DefaultKubernetesUserAgent()
	}
	return &Client{http: httpClient, base: base, limiter: limiter, turn: NewQueue(1), userAgent: ua}, nil
}

// Create posts in, a review of kind gvk, to path (such as
// /apis/authentication.k8s.io/v1/tokenreviews) in JSON (setting in's kind)
// and returns the answer, which must be a well-formed object of the same kind. The answer
// may be at most [MaxAnswerBytes] larger than the review sent (an answer
// echoes the review's spec, token included): an answer of exactly that size
// is read, one byte more is refused with [ErrAnswerTooLarge]. A wrong kind,
// an undecodable body and an error answer are errors; an error answer that
// carries a metav1.Status is returned as the *apierrors.StatusError
// client-go would return, with the Retry-After header in its details.
func Create[T runtime.Object](ctx context.Context, c *Client, path string, gvk schema.GroupVersionKind, in T) (T, error) {
	var zero T
	in.GetObjectKind().SetGroupVersionKind(gvk)
	body, err := json.Marshal(in)
	if err != nil {
		return zero, fmt.Errorf("encoding the %s: %w", gvk.Kind, err)
	}
	data, err := c.do(ctx, http.MethodPost, path, body, int64(len(body))+MaxAnswerBytes)
	if err != nil {
		return zero, err
	}
	obj, got, err := scheme.Decoder.Decode(data, nil, nil)
	if runtime.IsMissingKind(err) || runtime.IsMissingVersion(err) {
		// Their messages quote the whole answer, which echoes the token.
		return zero, errors.New("decoding the answer: it has no kind or apiVersion")
	}
	if err != nil {
		return zero, fmt.Errorf("decoding the answer: %w", err)
	}
	out, ok := obj.(T)
	if !ok || *got != gvk {
		return zero, fmt.Errorf("the API server answered a %s with a %s", gvk.Kind, got.Kind)
	}
	return out, nil
}

// Get fetches path with GET and returns the body of a 2xx answer, read up
// to limit bytes: a body of exactly limit bytes is returned, one byte more
// is refused with [ErrAnswerTooLarge]. Other answers are errors, as in
// [Create]. It accepts any media type, JSON first: the API server serves
// some documents only as their own type (the key set at /openid/v1/jwks as
// application/jwk-set+json, refusing "Accept: application/json" with 406).
func (c *Client) Get(ctx context.Context, path string, limit int64) ([]byte, error) {
	return c.do(ctx, http.MethodGet, path, nil, limit)
}

// Accept headers: a review's answer is JSON; a document fetched with Get
// may be of another type.
const (
	acceptReview   = "application/json"
	acceptDocument = "application/json, */*"
)

// do sends one request and returns the body of a 2xx answer.
func (c *Client) do(ctx context.Context, method, path string, body []byte, limit int64) ([]byte, error) {
	if c.limiter != nil {
		// One request at a time waits for the limiter's next token, the
		// one the fair queue picks (verified tokens first, sources in
		// turn: see Queue), not the first to ask. The token bucket
		// alone serves its waiters first come, first served: under a
		// flood of junk tokens at the limit (200 a second), a verified
		// token's review, first in the in-flight queue, then waited
		// behind the 15 others in flight for their tokens, about 80 ms
		// (the snapshot-metadata sidecar under 600 junk-token clients:
		// p50 87 ms, against 36 ms with no limit; AMD EPYC, 2 cores).
		if err := c.turn.Acquire(ctx); err != nil {
			return nil, err
		}
		err := c.limiter.Wait(ctx)
		c.turn.Release()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("client rate limiter: %w", err)
		}
	}
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", acceptDocument)
	if body != nil {
		req.Header.Set("Accept", acceptReview)
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", c.userAgent)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	retryAfter := retryAfterHeader(resp)
	var data []byte
	if resp.ContentLength <= limit {
		data, err = io.ReadAll(io.LimitReader(resp.Body, limit+1))
		if err != nil {
			return nil, fmt.Errorf("reading the answer: %w", err)
		}
	}
	if resp.ContentLength > limit || int64(len(data)) > limit {
		if !ok {
			// An error answer too large to read is still an error of its
			// code (a 503 is retried as a 503).
			return nil, apierrors.NewGenericServerResponse(resp.StatusCode, method, schema.GroupResource{}, "", "", retryAfter, true)
		}
		return nil, &tooLargeError{code: resp.StatusCode, limit: limit}
	}
	if ok {
		return data, nil
	}
	return nil, statusError(resp.StatusCode, method, data, retryAfter)
}

// tooLargeError is an oversized 2xx answer. It carries the HTTP code for
// metrics and the error's Code.
type tooLargeError struct {
	code  int
	limit int64
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("%v (HTTP %d, more than %d bytes)", ErrAnswerTooLarge, e.code, e.limit)
}

func (e *tooLargeError) Unwrap() error { return ErrAnswerTooLarge }

// statusError turns an error answer into the error client-go would return:
// the answer's metav1.Status if it carries one, else a generic error of the
// code. The body itself never becomes part of the message.
func statusError(code int, method string, body []byte, retryAfter int) error {
	if obj, _, err := scheme.Decoder.Decode(body, nil, nil); err == nil {
		if st, ok := obj.(*metav1.Status); ok && st.Status != metav1.StatusSuccess {
			if st.Code == 0 {
				st.Code = int32(code)
			}
			if retryAfter > 0 && (st.Details == nil || st.Details.RetryAfterSeconds == 0) {
				if st.Details == nil {
					st.Details = &metav1.StatusDetails{}
				}
				st.Details.RetryAfterSeconds = int32(retryAfter)
			}
			return &apierrors.StatusError{ErrStatus: *st}
		}
	}
	return apierrors.NewGenericServerResponse(code, method, schema.GroupResource{}, "", "", retryAfter, true)
}

// retryAfterHeader returns the Retry-After of a 429 or 5xx answer, in whole
// seconds (the only form the API server sends), or 0.
func retryAfterHeader(resp *http.Response) int {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500 {
		return 0
	}
	s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After")))
	if err != nil || s <= 0 {
		return 0
	}
	// The API server never asks for more than a few seconds; a day bounds
	// nonsense without overflowing time.Duration arithmetic.
	return min(s, int(24*time.Hour/time.Second))
}

// Poster creates objects of one kind at one path with a [Client]. Its
// Create has the shape of client-go's typed Create, so it satisfies
// authn.TokenReviewer and authz.SubjectAccessReviewer.
type Poster[T runtime.Object] struct {
	Client *Client
	Path   string
	Kind   schema.GroupVersionKind
}

// NewPoster returns the Poster of kind at path on the API server cfg
// describes, with a [NewClient].
func NewPoster[T runtime.Object](cfg *rest.Config, path string, kind schema.GroupVersionKind) (Poster[T], error) {
	c, err := NewClient(cfg)
	return Poster[T]{Client: c, Path: path, Kind: kind}, err
}

// Create posts in as [Create] does.
func (p Poster[T]) Create(ctx context.Context, in T, _ metav1.CreateOptions) (T, error) {
	return Create(ctx, p.Client, p.Path, p.Kind, in)
}
