package review_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"golang.org/x/net/http2"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/internal/review"
)

var tokenReviewKind = authenticationv1.SchemeGroupVersion.WithKind("TokenReview")

const tokenReviewPath = "/apis/authentication.k8s.io/v1/tokenreviews"

func newTokenReview() *authenticationv1.TokenReview {
	return &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "header.payload.signature", Audiences: []string{"aud"}}}
}

// answerJSON is a TokenReview answer for spec.
func answerJSON(t testing.TB, spec authenticationv1.TokenReviewSpec) []byte {
	t.Helper()
	b, err := json.Marshal(&authenticationv1.TokenReview{
		TypeMeta: metav1.TypeMeta{Kind: "TokenReview", APIVersion: "authentication.k8s.io/v1"},
		Spec:     spec,
		Status:   authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}, Audiences: spec.Audiences},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tlsConfig returns a rest.Config for a TLS httptest server.
func tlsConfig(ts *httptest.Server) *rest.Config {
	return &rest.Config{Host: ts.URL, QPS: -1, TLSClientConfig: rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}),
	}}
}

func newClient(t testing.TB, cfg *rest.Config) *review.Client {
	t.Helper()
	c, err := review.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAnswerSizeLimit: an answer may be MaxAnswerBytes larger than the
// review sent; at the limit it is read, one byte more is refused, whether
// the server announces its length or not, and the refusal is not retried.
func TestAnswerSizeLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		extra   int // bytes past the limit
		chunked bool
		wantErr bool
	}{
		{name: "at the limit", extra: 0},
		{name: "one byte over", extra: 1, wantErr: true},
		{name: "at the limit, chunked", extra: 0, chunked: true},
		{name: "one byte over, chunked", extra: 1, chunked: true, wantErr: true},
		{name: "20 MB", extra: 20 << 20, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var requests atomic.Int32
			ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				in, _ := io.ReadAll(r.Body)
				var tr authenticationv1.TokenReview
				_ = json.Unmarshal(in, &tr)
				body := answerJSON(t, tr.Spec)
				size := len(in) + review.MaxAnswerBytes + tt.extra
				body = append(body, bytes.Repeat([]byte(" "), size-len(body))...)
				w.Header().Set("Content-Type", "application/json")
				if !tt.chunked {
					w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				}
				w.WriteHeader(http.StatusCreated)
				if tt.chunked {
					w.(http.Flusher).Flush() // no Content-Length
				}
				_, _ = w.Write(body)
			}))
			defer ts.Close()
			c := newClient(t, tlsConfig(ts))
			r := review.New("TokenReview", review.Options{Backoff: wait.Backoff{Duration: time.Nanosecond, Steps: 3}})
			var got *authenticationv1.TokenReview
			err := r.Do(context.Background(), nil, func(ctx context.Context) error {
				var err error
				got, err = review.Create(ctx, c, tokenReviewPath, tokenReviewKind, newTokenReview())
				return err
			})
			if tt.wantErr {
				var re *reviewauth.ReviewError
				if !errors.As(err, &re) || !errors.Is(err, review.ErrAnswerTooLarge) || re.Attempts != 1 || re.Code != 0 {
					t.Fatalf("Do() = %v; want a ReviewError matching ErrAnswerTooLarge after 1 attempt", err)
				}
				if n := requests.Load(); n != 1 {
					t.Errorf("requests = %d; want 1: an oversized answer is not retried", n)
				}
				return
			}
			if err != nil || got.Status.User.Username != "alice" {
				t.Fatalf("Do() = %v, %+v; want the answer", err, got)
			}
		})
	}
}

// TestErrorAnswers: error answers become the apierrors client-go returns,
// with Retry-After from the header, and never carry the body.
func TestErrorAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		code       int
		retryAfter string
		body       string
		wantReason metav1.StatusReason
		wantDelay  int
	}{
		{name: "403 Status", code: 403, body: `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"tokenreviews.authentication.k8s.io is forbidden: User \"x\" cannot create resource","reason":"Forbidden","code":403}`, wantReason: metav1.StatusReasonForbidden},
		{name: "429 with Retry-After header only", code: 429, retryAfter: "3", body: `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"slow down","reason":"TooManyRequests","code":429}`, wantReason: metav1.StatusReasonTooManyRequests, wantDelay: 3},
		{name: "503 text", code: 503, retryAfter: "1", body: "secret-looking text body", wantReason: metav1.StatusReasonServiceUnavailable, wantDelay: 1},
		{name: "500 huge", code: 500, body: strings.Repeat("x", 2*review.MaxAnswerBytes), wantReason: metav1.StatusReasonInternalError},
		{name: "401 empty", code: 401, wantReason: metav1.StatusReasonUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				w.WriteHeader(tt.code)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer ts.Close()
			_, err := review.Create(context.Background(), newClient(t, tlsConfig(ts)), tokenReviewPath, tokenReviewKind, newTokenReview())
			var se apierrors.APIStatus
			if !errors.As(err, &se) || int(se.Status().Code) != tt.code || apierrors.ReasonForError(err) != tt.wantReason {
				t.Fatalf("Create() = %v; want a %d %s status error", err, tt.code, tt.wantReason)
			}
			if d, _ := apierrors.SuggestsClientDelay(err); d != tt.wantDelay {
				t.Errorf("Retry-After = %d; want %d", d, tt.wantDelay)
			}
			if tt.body != "" && !strings.HasPrefix(tt.body, "{") && strings.Contains(err.Error(), tt.body[:10]) {
				t.Errorf("error %q carries the body", err)
			}
		})
	}
}

// TestWrongKindAndMalformedAnswers: a 2xx answer must be a well-formed
// object of the kind asked for.
func TestWrongKindAndMalformedAnswers(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"wrong kind":   `{"kind":"SubjectAccessReview","apiVersion":"authorization.k8s.io/v1","status":{"allowed":true}}`,
		"no kind":      `{"status":{"authenticated":true,"user":{"username":"alice"}}}`,
		"broken JSON":  `{"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1","status":{"authenticated":tru`,
		"Status a 201": `{"kind":"Status","apiVersion":"v1","status":"Success"}`,
		"empty":        ``,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, body)
			}))
			defer ts.Close()
			got, err := review.Create(context.Background(), newClient(t, tlsConfig(ts)), tokenReviewPath, tokenReviewKind, newTokenReview())
			if err == nil {
				t.Fatalf("Create() = %+v, nil; want an error", got)
			}
		})
	}
}

// TestAttemptTimeoutWithSilentServer: a server that accepts and never
// answers costs each attempt its own timeout, not the whole budget, and
// the attempts that time out are retried (on fresh connections).
func TestAttemptTimeoutWithSilentServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
			accepted <- struct{}{}
		}
	}()
	defer func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()

	const attemptTimeout = 50 * time.Millisecond
	clk := clocktesting.NewFakeClock(time.Now())
	r := review.New("TokenReview", review.Options{
		Backoff:        wait.Backoff{Duration: time.Second, Factor: 1, Steps: 2},
		Clock:          clk,
		AttemptTimeout: attemptTimeout,
	})
	c := newClient(t, &rest.Config{Host: "http://" + ln.Addr().String(), QPS: -1})
	// The caller's budget is far longer than the attempts need.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- r.Do(ctx, nil, func(ctx context.Context) error {
			_, err := review.Create(ctx, c, tokenReviewPath, tokenReviewKind, newTokenReview())
			return err
		})
	}()
	var err2 error
	for waiting := true; waiting; {
		select {
		case err2 = <-done:
			waiting = false
		default:
			// The backoff waits on the fake clock: step it when the
			// retrier sleeps, never while an attempt is in flight.
			if clk.HasWaiters() {
				clk.Step(time.Second)
			}
			runtime.Gosched()
		}
	}
	elapsed := time.Since(start)
	var re *reviewauth.ReviewError
	if !errors.As(err2, &re) || re.Attempts != 3 || re.Code != 0 || !strings.Contains(err2.Error(), "attempt timeout") {
		t.Fatalf("Do() = %v; want a ReviewError after 3 attempts, each cut by the attempt timeout", err2)
	}
	if n := len(accepted); n != 3 {
		t.Errorf("connections = %d; want 3 (one per attempt)", n)
	}
	if elapsed > 20*attemptTimeout {
		t.Errorf("Do() took %v; want about 3 x %v", elapsed, attemptTimeout)
	}
}

// TestHTTP2StreamResetsAreRetried: client-go speaks HTTP/2 to the API
// server; a reset stream (RST_STREAM), before the answer or in the middle
// of its body, is retried as a reset HTTP/1.1 connection is.
func TestHTTP2StreamResetsAreRetried(t *testing.T) {
	t.Parallel()
	for _, midBody := range []bool{false, true} {
		t.Run(fmt.Sprintf("mid-body=%v", midBody), func(t *testing.T) {
			t.Parallel()
			const resets = 2
			var requests atomic.Int32
			var protos sync.Map
			ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				protos.Store(r.Proto, true)
				n := requests.Add(1)
				in, _ := io.ReadAll(r.Body)
				var tr authenticationv1.TokenReview
				_ = json.Unmarshal(in, &tr)
				if n <= resets {
					if midBody {
						w.Header().Set("Content-Type", "application/json")
						w.WriteHeader(http.StatusCreated)
						_, _ = w.Write(answerJSON(t, tr.Spec)[:20])
						w.(http.Flusher).Flush()
					}
					panic(http.ErrAbortHandler) // RST_STREAM
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write(answerJSON(t, tr.Spec))
			}))
			ts.EnableHTTP2 = true
			ts.Config.ErrorLog = nil
			ts.StartTLS()
			defer ts.Close()
			c := newClient(t, tlsConfig(ts))
			r := review.New("TokenReview", review.Options{Backoff: wait.Backoff{Duration: time.Nanosecond, Steps: 4}})
			var got *authenticationv1.TokenReview
			err := r.Do(context.Background(), nil, func(ctx context.Context) error {
				var err error
				got, err = review.Create(ctx, c, tokenReviewPath, tokenReviewKind, newTokenReview())
				return err
			})
			if err != nil || got.Status.User.Username != "alice" {
				t.Fatalf("Do() = %v; want the answer after %d resets", err, resets)
			}
			if n := requests.Load(); n != resets+1 {
				t.Errorf("requests = %d; want %d", n, resets+1)
			}
			if _, ok := protos.Load("HTTP/2.0"); !ok {
				t.Errorf("no request over HTTP/2: the test proves nothing")
			}
		})
	}
}

// TestRetryClassification: which failures of one attempt are retried.
func TestRetryClassification(t *testing.T) {
	t.Parallel()
	gr := schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}
	tests := []struct {
		name  string
		err   error
		retry bool
	}{
		{"HTTP/2 RST_STREAM", &url.Error{Op: "Post", URL: "https://x", Err: http2.StreamError{StreamID: 1, Code: http2.ErrCodeInternal}}, true},
		{"HTTP/2 reset while reading the body", fmt.Errorf("reading the answer: %w", http2.StreamError{StreamID: 3, Code: http2.ErrCodeCancel}), true},
		{"HTTP/2 GOAWAY", http2.GoAwayError{LastStreamID: 1, ErrCode: http2.ErrCodeNo}, true},
		{"HTTP/2 connection error", http2.ConnectionError(http2.ErrCodeProtocol), true},
		{"net/http's bundled HTTP/2 reset", errors.New("stream error: stream ID 5; INTERNAL_ERROR; received from peer"), true},
		{"HTTP/2 connection lost", errors.New("http2: client connection lost"), true},
		{"EOF", io.EOF, true},
		{"429", apierrors.NewTooManyRequests("slow down", 0), true},
		{"500", apierrors.NewInternalError(errors.New("boom")), true},
		{"400", apierrors.NewBadRequest("no"), false},
		{"404", apierrors.NewNotFound(gr, ""), false},
		{"oversized answer", fmt.Errorf("x: %w", review.ErrAnswerTooLarge), false},
		{"malformed answer", errors.New("decoding the answer: invalid character"), false},
		{"canceled", context.Canceled, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := review.New("TokenReview", review.Options{Backoff: wait.Backoff{Duration: time.Nanosecond, Steps: 1}})
			attempts := 0
			_ = r.Do(context.Background(), nil, func(context.Context) error {
				attempts++
				return tt.err
			})
			if got := attempts == 2; got != tt.retry {
				t.Errorf("%v: attempts = %d; want retried=%v", tt.err, attempts, tt.retry)
			}
		})
	}
}

// TestRefusalsLoggedOncePerInterval: a 401 or 403 to the service's own
// review is not retried, matches ErrRefused and ErrUnavailable, is counted
// every time, and is logged at V(0), naming what the service needs, at most
// once per RefusalLogInterval.
func TestRefusalsLoggedOncePerInterval(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{Verbosity: 0})
	ctx := klog.NewContext(context.Background(), logger)
	clk := clocktesting.NewFakeClock(time.Now())
	var refusals atomic.Int32
	r := review.New("TokenReview", review.Options{Clock: clk, Observer: review.Observer{Refused: func(kind string) { refusals.Add(1) }}})
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "",
		errors.New(`User "system:serviceaccount:ns:sidecar" cannot create resource "tokenreviews" in API group "authentication.k8s.io" at the cluster scope`))
	do := func(err error) error {
		attempts := 0
		out := r.Do(ctx, nil, func(context.Context) error { attempts++; return err })
		if attempts != 1 {
			t.Errorf("attempts = %d; want 1: a refusal is not retried", attempts)
		}
		return out
	}
	for range 3 {
		err := do(forbidden)
		var re *reviewauth.ReviewError
		if !errors.As(err, &re) || re.Code != 403 || !errors.Is(err, review.ErrRefused) || !errors.Is(err, reviewauth.ErrUnavailable) {
			t.Fatalf("Do() = %v; want a 403 ReviewError matching ErrRefused and ErrUnavailable", err)
		}
	}
	clk.Step(review.RefusalLogInterval - time.Nanosecond)
	do(apierrors.NewUnauthorized("Unauthorized"))
	mu.Lock()
	if len(lines) != 1 {
		t.Fatalf("log lines = %d; want 1 within RefusalLogInterval:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	mu.Unlock()
	clk.Step(time.Nanosecond)
	do(apierrors.NewUnauthorized("Unauthorized"))
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 2 {
		t.Fatalf("log lines = %d; want 2 after RefusalLogInterval", len(lines))
	}
	for _, want := range []string{"system:auth-delegator", `system:serviceaccount:ns:sidecar`, `"review"="TokenReview"`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("first log line lacks %q: %s", want, lines[0])
		}
	}
	if !strings.Contains(lines[1], `"sameSinceLastLog"=3`) || !strings.Contains(lines[1], "401") {
		t.Errorf("second log line = %s; want the 401 and 3 refusals not logged since", lines[1])
	}
	if n := refusals.Load(); n != 5 {
		t.Errorf("refusals counted = %d; want 5", n)
	}
}

// gateLimiter is a rate limiter whose every Wait blocks until the test
// lets it through, recording who waited, in order.
type gateLimiter struct {
	waited chan string
	pass   chan struct{}
}

type labelKey struct{}

func (l *gateLimiter) Wait(ctx context.Context) error {
	l.waited <- ctx.Value(labelKey{}).(string)
	select {
	case <-l.pass:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (*gateLimiter) TryAccept() bool { return true }
func (*gateLimiter) Accept()         {}
func (*gateLimiter) Stop()           {}
func (*gateLimiter) QPS() float32    { return 1 }

// TestRateLimiterTurns: requests wait for the rate limiter's tokens one at
// a time, in the review queue's order (verified first, sources in turn),
// not first come, first served: a verified token's review that arrives
// behind a flood's waits for one token, not for the flood's.
func TestRateLimiterTurns(t *testing.T) {
	t.Parallel()
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
	}))
	defer ts.Close()
	lim := &gateLimiter{waited: make(chan string, 16), pass: make(chan struct{})}
	cfg := tlsConfig(ts)
	cfg.RateLimiter = lim
	c := newClient(t, cfg)
	ctx := context.Background()
	get := func(label string, verified bool, addr string) chan error {
		rctx := review.WithSource(context.WithValue(ctx, labelKey{}, label), review.Source{Address: addr, Conn: label})
		if verified {
			rctx = review.WithVerified(rctx)
		}
		done := make(chan error, 1)
		go func() { _, err := c.Get(rctx, "/", 1<<10); done <- err }()
		return done
	}
	var dones []chan error
	// junk0 takes the turn and waits for a token; junk1..3 (one address)
	// and then the verified token (another) wait for the turn.
	dones = append(dones, get("junk0", false, "10.0.0.1"))
	if got := <-lim.waited; got != "junk0" {
		t.Fatalf("first to wait for a token: %s", got)
	}
	waitQueued := func(n int) {
		deadline := time.Now().Add(10 * time.Second)
		for review.TurnsWaiting(c) != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d waiting for the turn, want %d", review.TurnsWaiting(c), n)
			}
			runtime.Gosched()
		}
	}
	for i := 1; i <= 3; i++ {
		dones = append(dones, get(fmt.Sprint("junk", i), false, "10.0.0.1"))
		waitQueued(i)
	}
	dones = append(dones, get("verified", true, "10.0.0.2"))
	waitQueued(4)
	var order []string
	for range 4 {
		lim.pass <- struct{}{}
		order = append(order, <-lim.waited)
	}
	lim.pass <- struct{}{}
	want := []string{"verified", "junk1", "junk2", "junk3"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("waited for tokens in the order %v, want %v", order, want)
	}
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Error(err)
		}
	}
	select {
	case l := <-lim.waited:
		t.Errorf("%s waited for a token twice", l)
	default:
	}
}
