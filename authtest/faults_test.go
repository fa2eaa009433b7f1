package authtest_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/reviewauth/reviewauth/authtest"
)

// waitFor polls cond until it holds; it fails the test after 10s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// codecs are the two ways a client talks to the server: client-go's default
// (protobuf for built-in types) and JSON.
var codecs = []struct {
	name        string
	contentType string
}{
	{"protobuf", ""},
	{"json", "application/json"},
}

func clientsetFor(t testing.TB, s *authtest.Server, contentType string) kubernetes.Interface {
	t.Helper()
	cfg := s.Config()
	cfg.ContentType = contentType
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("kubernetes.NewForConfig() = %v", err)
	}
	return cs
}

func TestFaults(t *testing.T) {
	t.Parallel()
	isStatus := func(code int32) func(error) bool {
		return func(err error) bool {
			var st apierrors.APIStatus
			return errors.As(err, &st) && st.Status().Code == code
		}
	}
	isTransportError := func(err error) bool {
		var st apierrors.APIStatus
		return err != nil && !errors.As(err, &st)
	}
	tests := []struct {
		name    string
		fault   authtest.Fault
		wantErr func(error) bool // nil: no error
	}{
		{"429", authtest.Fault{Status: http.StatusTooManyRequests}, apierrors.IsTooManyRequests},
		{"500", authtest.Fault{Status: http.StatusInternalServerError}, apierrors.IsInternalError},
		{"502", authtest.Fault{Status: http.StatusBadGateway}, isStatus(http.StatusBadGateway)},
		{"503", authtest.Fault{Status: http.StatusServiceUnavailable}, apierrors.IsServiceUnavailable},
		{"504", authtest.Fault{Status: http.StatusGatewayTimeout}, apierrors.IsTimeout},
		{"403", authtest.Fault{Status: http.StatusForbidden}, apierrors.IsForbidden},
		{"drop connection", authtest.Fault{DropConnection: true}, isTransportError},
		{"malformed body", authtest.Fault{MalformedBody: true}, isTransportError},
		// client-go does not check the kind of an answer: it returns an
		// empty object and no error.
		{"wrong kind", authtest.Fault{WrongKind: true}, nil},
		{"empty status", authtest.Fault{EmptyStatus: true}, nil},
	}
	for _, codec := range codecs {
		for _, tt := range tests {
			t.Run(codec.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				s := authtest.Start(t)
				cs := clientsetFor(t, s, codec.contentType)
				s.AddToken("tok", backup, []string{"x"}, time.Time{})
				s.AddServiceAccount("default", "backup")
				s.SetPolicy(func(authorizationv1.SubjectAccessReviewSpec) (bool, bool, string, string) {
					return true, false, "ok", ""
				})
				ctx := context.Background()
				calls := []struct {
					e    authtest.Endpoint
					call func() (empty bool, err error)
				}{
					{authtest.TokenReviews, func() (bool, error) {
						tr, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "tok", Audiences: []string{"x"}}}, metav1.CreateOptions{})
						return err == nil && !tr.Status.Authenticated && tr.Status.User.Username == "" && tr.Status.Error == "", err
					}},
					{authtest.SubjectAccessReviews, func() (bool, error) {
						sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: nonResourceSpec("u", nil, "get", "/")}, metav1.CreateOptions{})
						return err == nil && sar.Status == (authorizationv1.SubjectAccessReviewStatus{}), err
					}},
					{authtest.TokenRequests, func() (bool, error) {
						treq, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "backup", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
						return err == nil && treq.Status.Token == "", err
					}},
				}
				for _, c := range calls {
					s.InjectFault(c.e, tt.fault)
					empty, err := c.call()
					if tt.wantErr == nil {
						if err != nil || !empty {
							t.Errorf("%s with fault %+v = empty %v, error %v; want an empty status and no error", c.e, tt.fault, empty, err)
						}
					} else if err == nil || !tt.wantErr(err) {
						t.Errorf("%s with fault %+v = %v; want an error of the expected kind", c.e, tt.fault, err)
					}
					if got := s.Count(c.e); got != 1 {
						t.Errorf("Count(%s) = %d; want 1", c.e, got)
					}
					// Times 0 keeps the fault until it is cleared.
					if _, err2 := c.call(); (err2 == nil) != (err == nil) {
						t.Errorf("%s second call with a persistent fault = %v; want like the first, %v", c.e, err2, err)
					}
					s.ClearFaults()
					if empty, err := c.call(); err != nil || empty {
						t.Errorf("%s after ClearFaults = empty %v, error %v; want a full answer", c.e, empty, err)
					}
				}
			})
		}
	}
}

func TestFaultBothAllowedAndDenied(t *testing.T) {
	t.Parallel()
	for _, codec := range codecs {
		t.Run(codec.name, func(t *testing.T) {
			t.Parallel()
			s := authtest.Start(t)
			cs := clientsetFor(t, s, codec.contentType)
			s.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{BothAllowedAndDenied: true, Times: 1})
			sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{Spec: nonResourceSpec("u", nil, "get", "/")}, metav1.CreateOptions{})
			if err != nil || !sar.Status.Allowed || !sar.Status.Denied {
				t.Errorf("SAR with BothAllowedAndDenied = %+v, %v; want allowed and denied", sar.Status, err)
			}
		})
	}
}

func TestFaultTimesAndQueue(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	cs := clientset(t, s)
	s.InjectFault(authtest.TokenReviews, authtest.Fault{Status: http.StatusServiceUnavailable, Times: 2})
	s.InjectFault(authtest.TokenReviews, authtest.Fault{Status: http.StatusInternalServerError, Times: 1})
	want := []func(error) bool{
		apierrors.IsServiceUnavailable,
		apierrors.IsServiceUnavailable,
		apierrors.IsInternalError,
		func(err error) bool { return err == nil },
	}
	for i, ok := range want {
		_, err := cs.AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "t"}}, metav1.CreateOptions{})
		if !ok(err) {
			t.Errorf("request %d = %v; want the queued fault's error", i, err)
		}
	}
	if got := s.Count(authtest.TokenReviews); got != len(want) {
		t.Errorf("Count(TokenReviews) = %d; want %d", got, len(want))
	}
}

func TestFaultRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		retryAfter time.Duration
		wantHeader string
		wantSecs   int32
	}{
		{"none", 0, "", 0},
		{"whole seconds", 3 * time.Second, "3", 3},
		{"rounded up", 1500 * time.Millisecond, "2", 2},
		{"sub-second", time.Millisecond, "1", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := authtest.Start(t)
			s.InjectFault(authtest.TokenReviews, authtest.Fault{Status: http.StatusTooManyRequests, RetryAfter: tt.retryAfter})
			resp, body := post(t, s, "/apis/authentication.k8s.io/v1/tokenreviews", "application/json", `{"spec":{"token":"t"}}`)
			if got := resp.Header.Get("Retry-After"); got != tt.wantHeader {
				t.Errorf("Retry-After = %q; want %q", got, tt.wantHeader)
			}
			st := decodeStatus(t, resp, body)
			var secs int32
			if st.Details != nil {
				secs = st.Details.RetryAfterSeconds
			}
			if st.Code != http.StatusTooManyRequests || st.Reason != metav1.StatusReasonTooManyRequests || secs != tt.wantSecs {
				t.Errorf("Status = code %d, reason %q, retryAfterSeconds %d; want 429, TooManyRequests, %d", st.Code, st.Reason, secs, tt.wantSecs)
			}
		})
	}
}

func TestFaultDelay(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	cs := clientset(t, s)
	s.InjectFault(authtest.TokenReviews, authtest.Fault{Delay: time.Hour, Times: 1})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "t"}}, metav1.CreateOptions{})
		errc <- err
	}()
	waitFor(t, "the delayed request to arrive", func() bool { return s.InFlight(authtest.TokenReviews) == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("delayed TokenReview after cancel = %v; want context.Canceled", err)
	}
	waitFor(t, "the delayed handler to return", func() bool { return s.InFlight(authtest.TokenReviews) == 0 })
	// The fault was used up: the next request is answered at once.
	if _, err := cs.AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "t"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("TokenReview after the delay fault = %v; want no error", err)
	}
}

func TestBlock(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	cs := clientset(t, s)
	s.AddToken("tok", backup, []string{"x"}, time.Time{})
	const n = 5
	release := s.Block(authtest.TokenReviews)
	var wg sync.WaitGroup
	results := make(chan authenticationv1.TokenReviewStatus, n)
	for range n {
		wg.Go(func() {
			tr, err := cs.AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "tok", Audiences: []string{"x"}}}, metav1.CreateOptions{})
			if err != nil {
				t.Errorf("blocked TokenReview = %v; want no error after release", err)
				return
			}
			results <- tr.Status
		})
	}
	waitFor(t, "all requests to block", func() bool { return s.InFlight(authtest.TokenReviews) == n })
	if got := len(results); got != 0 {
		t.Errorf("%d requests answered while blocked; want 0", got)
	}
	release()
	release() // idempotent
	wg.Wait()
	close(results)
	for st := range results {
		if !st.Authenticated {
			t.Errorf("released TokenReview = %+v; want authenticated", st)
		}
	}
	if got := s.MaxInFlight(authtest.TokenReviews); got != n {
		t.Errorf("MaxInFlight(TokenReviews) = %d; want %d", got, n)
	}
	if got := s.InFlight(authtest.TokenReviews); got != 0 {
		t.Errorf("InFlight(TokenReviews) after release = %d; want 0", got)
	}
	if got := s.MaxInFlight(authtest.SubjectAccessReviews); got != 0 {
		t.Errorf("MaxInFlight(SubjectAccessReviews) = %d; want 0", got)
	}
	s.Reset()
	if got := s.MaxInFlight(authtest.TokenReviews); got != 0 {
		t.Errorf("MaxInFlight after Reset = %d; want 0", got)
	}
}

func TestCloseReleasesWaitingRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(*authtest.Server)
	}{
		{"blocked", func(s *authtest.Server) { s.Block(authtest.SubjectAccessReviews) }},
		{"delayed", func(s *authtest.Server) {
			s.InjectFault(authtest.SubjectAccessReviews, authtest.Fault{Delay: time.Hour})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := authtest.NewServer()
			tt.setup(s)
			cs := clientset(t, s)
			errc := make(chan error, 1)
			go func() {
				_, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{Spec: nonResourceSpec("u", nil, "get", "/")}, metav1.CreateOptions{})
				errc <- err
			}()
			waitFor(t, "the request to wait", func() bool { return s.InFlight(authtest.SubjectAccessReviews) == 1 })
			s.Close()
			s.Close() // idempotent
			if err := <-errc; err == nil {
				t.Errorf("SAR waiting across Close = nil error; want an error")
			}
		})
	}
}

// post sends body to path with the admin token and returns the response and
// its body.
func post(t testing.TB, s *authtest.Server, path, contentType, body string) (*http.Response, []byte) {
	t.Helper()
	return do(t, s, s.Config(), http.MethodPost, path, contentType, body)
}

func do(t testing.TB, s *authtest.Server, cfg *rest.Config, method, path, contentType, body string) (*http.Response, []byte) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatalf("rest.HTTPClientFor() = %v", err)
	}
	req, err := http.NewRequest(method, s.URL()+path, stringsReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s = %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := readAll(resp)
	if err != nil {
		t.Fatalf("reading %s %s: %v", method, path, err)
	}
	return resp, b
}
