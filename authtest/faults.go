package authtest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Endpoint names one of the requests a [Server] serves, for faults, blocking
// and observation.
type Endpoint string

// The endpoints a [Server] serves.
const (
	// TokenReviews is POST /apis/authentication.k8s.io/v1/tokenreviews.
	TokenReviews Endpoint = "tokenreviews"
	// SubjectAccessReviews is POST /apis/authorization.k8s.io/v1/subjectaccessreviews.
	SubjectAccessReviews Endpoint = "subjectaccessreviews"
	// TokenRequests is POST /api/v1/namespaces/{namespace}/serviceaccounts/{name}/token.
	TokenRequests Endpoint = "tokenrequests"
)

// Fault describes a failure a [Server] injects into answers of one
// [Endpoint]; see [Server.InjectFault]. The zero Fault changes nothing (it
// still consumes one of its Times). When several fields are set, Delay
// applies first, then the first of DropConnection, Status, MalformedBody,
// WrongKind, EmptyStatus and BothAllowedAndDenied that is set.
type Fault struct {
	// Status, when 400 or more, answers with this HTTP status code and a
	// metav1.Status body, like a real server (429 TooManyRequests, 500
	// InternalError, 503 ServiceUnavailable, 403 Forbidden...).
	Status int
	// RetryAfter, when positive and Status is set, adds a Retry-After header
	// with the duration rounded up to whole seconds, and the same value in
	// the Status details. client-go's REST client itself retries 429 and
	// 5xx answers that carry Retry-After (up to 10 times, sleeping as told,
	// for POST too), so through a clientset bound it with Times.
	RetryAfter time.Duration
	// Delay waits this long (real time) before answering. The wait ends
	// early, without an answer, when the client goes away or the server is
	// closed.
	Delay time.Duration
	// DropConnection closes the connection without answering (a TCP reset).
	DropConnection bool
	// MalformedBody answers 201 with a body that cannot be decoded: broken
	// JSON, or broken protobuf when the client prefers protobuf.
	MalformedBody bool
	// WrongKind answers 201 with a well-formed object of another kind: a
	// SubjectAccessReview with allowed=true for a TokenReview, and a
	// TokenReview with authenticated=true otherwise. Note that client-go's
	// typed clients do not check the kind of an answer: they return an
	// empty object of the kind they expected, and no error.
	WrongKind bool
	// EmptyStatus answers 201 with the right kind and an empty status.
	EmptyStatus bool
	// BothAllowedAndDenied answers a SubjectAccessReview with 201 and a
	// status that has both allowed and denied set. Other endpoints ignore
	// it.
	BothAllowedAndDenied bool
	// BodyBytes, when positive, pads the JSON body of a TokenReview or
	// SubjectAccessReview answer (201, the server's own verdict) with
	// trailing spaces to exactly this many bytes, which JSON decoders
	// ignore: an answer of a chosen size, to test a client's size limit. An
	// answer already larger is sent as it is; protobuf answers are not
	// padded.
	BodyBytes int
	// Times is how many requests the fault applies to; 0 (or less) means
	// every request until [Server.ClearFaults].
	Times int
}

type faultEntry struct {
	f         Fault
	remaining int // 0 = forever
}

// InjectFault queues f for requests to e. Faults of one endpoint form a
// queue: each request takes the first; a fault with Times N leaves the queue
// after N requests; a fault with Times 0 stays until [Server.ClearFaults], so
// faults queued after it never apply. Requests that fail authentication, or
// whose body cannot be decoded, take no fault. It is safe for concurrent use.
func (s *Server) InjectFault(e Endpoint, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[e] = append(s.faults[e], &faultEntry{f: f, remaining: f.Times})
}

// ClearFaults removes every queued fault of every endpoint. Requests already
// being faulted (for example delayed) are not affected.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.faults)
}

// takeFault pops the fault for the next request to e, if any.
func (s *Server) takeFault(e Endpoint) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.faults[e]
	if len(q) == 0 {
		return Fault{}, false
	}
	fe := q[0]
	if fe.remaining > 0 {
		fe.remaining--
		if fe.remaining == 0 {
			s.faults[e] = q[1:]
		}
	}
	return fe.f, true
}

// Block makes requests to e that arrive after the call wait, after their
// body has been decoded and recorded, until release is called, the client
// goes away or the server is closed. Blocked requests count in
// [Server.Count] and [Server.InFlight]. release is idempotent. A second
// Block on the same endpoint replaces the first for requests arriving after
// it; requests already waiting keep waiting for their own release.
func (s *Server) Block(e Endpoint) (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.blocks[e] = ch
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.blocks[e] == ch {
				delete(s.blocks, e)
			}
			s.mu.Unlock()
			close(ch)
		})
	}
}

type endpointStats struct {
	count, inFlight, maxInFlight int
}

func (s *Server) statsLocked(e Endpoint) *endpointStats {
	st := s.stats[e]
	if st == nil {
		st = &endpointStats{}
		s.stats[e] = st
	}
	return st
}

// begin counts a request to e and returns the function that ends it.
func (s *Server) begin(e Endpoint) (done func()) {
	s.mu.Lock()
	st := s.statsLocked(e)
	st.count++
	st.inFlight++
	st.maxInFlight = max(st.maxInFlight, st.inFlight)
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.statsLocked(e).inFlight--
		s.mu.Unlock()
	}
}

// Count returns how many requests to e the server received since it started
// or since [Server.Reset], including faulted, blocked and malformed ones but
// not requests that failed administrator authentication.
func (s *Server) Count(e Endpoint) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statsLocked(e).count
}

// InFlight returns how many requests to e are being served right now.
func (s *Server) InFlight(e Endpoint) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statsLocked(e).inFlight
}

// MaxInFlight returns the largest number of concurrent requests to e seen
// since the server started or since [Server.Reset].
func (s *Server) MaxInFlight(e Endpoint) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statsLocked(e).maxInFlight
}

// TokenReviews returns a copy of the TokenReviews the server decoded, in
// arrival order, including faulted ones. They hold the reviewed tokens in
// spec.token, as sent.
func (s *Server) TokenReviews() []authenticationv1.TokenReview {
	s.mu.Lock()
	defer s.mu.Unlock()
	return deepCopies(s.tokenReviews)
}

// SubjectAccessReviews returns a copy of the SubjectAccessReviews the server
// decoded, in arrival order, including faulted ones.
func (s *Server) SubjectAccessReviews() []authorizationv1.SubjectAccessReview {
	s.mu.Lock()
	defer s.mu.Unlock()
	return deepCopies(s.sars)
}

// deepCopies returns deep copies of in.
func deepCopies[T any, PT interface {
	*T
	DeepCopy() *T
}](in []T) []T {
	out := make([]T, len(in))
	for i := range in {
		out[i] = *PT(&in[i]).DeepCopy()
	}
	return out
}

// Reset zeroes the counters and forgets the recorded reviews. Tokens,
// service accounts, the policy, faults and blocks are kept. Requests in
// flight stay in [Server.InFlight], and MaxInFlight restarts from their
// number.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.stats {
		st.count = 0
		st.maxInFlight = st.inFlight
	}
	s.tokenReviews = nil
	s.sars = nil
}

// intercept waits for blocks and applies the next fault of e. It returns
// handled=true when the answer has been written or the connection dropped.
// A wait that ends because the client went away or the server closed
// aborts the request, so that the client never sees an empty answer. Otherwise f holds the body-shape
// fault, if any, for the endpoint handler to apply.
func (s *Server) intercept(w http.ResponseWriter, r *http.Request, e Endpoint) (f Fault, handled bool) {
	s.mu.Lock()
	block := s.blocks[e]
	s.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-r.Context().Done():
			abortRequest()
		case <-s.closed:
			abortRequest()
		}
	}
	f, ok := s.takeFault(e)
	if !ok {
		return Fault{}, false
	}
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			abortRequest()
		case <-s.closed:
			t.Stop()
			abortRequest()
		}
	}
	switch {
	case f.DropConnection:
		dropConnection(w)
		return Fault{}, true
	case f.Status >= 400:
		st := faultStatus(f.Status, f.RetryAfter)
		if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
		}
		writeStatus(w, st)
		return Fault{}, true
	}
	return f, false
}

// abortRequest ends the handler without an answer: net/http closes the
// connection (HTTP/1.1) or resets the stream (HTTP/2) and logs nothing.
func abortRequest() {
	panic(http.ErrAbortHandler)
}

func dropConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		abortRequest() // HTTP/2: reset the stream
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		abortRequest()
	}
	type netConner interface{ NetConn() net.Conn }
	raw := conn
	if nc, ok := conn.(netConner); ok {
		raw = nc.NetConn()
	}
	if tcp, ok := raw.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0) // reset, not an orderly close
	}
	_ = raw.Close()
}

func faultStatus(code int, retryAfter time.Duration) *metav1.Status {
	reasons := map[int]metav1.StatusReason{
		http.StatusBadRequest:          metav1.StatusReasonBadRequest,
		http.StatusUnauthorized:        metav1.StatusReasonUnauthorized,
		http.StatusForbidden:           metav1.StatusReasonForbidden,
		http.StatusNotFound:            metav1.StatusReasonNotFound,
		http.StatusConflict:            metav1.StatusReasonConflict,
		http.StatusUnprocessableEntity: metav1.StatusReasonInvalid,
		http.StatusTooManyRequests:     metav1.StatusReasonTooManyRequests,
		http.StatusInternalServerError: metav1.StatusReasonInternalError,
		http.StatusServiceUnavailable:  metav1.StatusReasonServiceUnavailable,
		http.StatusGatewayTimeout:      metav1.StatusReasonTimeout,
	}
	st := &metav1.Status{
		Status:  metav1.StatusFailure,
		Message: fmt.Sprintf("authtest: injected fault: %d %s", code, http.StatusText(code)),
		Reason:  reasons[code],
		Code:    int32(code),
	}
	if retryAfter > 0 {
		secs := int32((retryAfter + time.Second - 1) / time.Second)
		st.Details = &metav1.StatusDetails{RetryAfterSeconds: secs}
	}
	return st
}

func writeStatus(w http.ResponseWriter, st *metav1.Status) {
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	writeJSON(w, int(st.Code), st)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		body = []byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"authtest: cannot encode response","reason":"InternalError","code":500}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func statusOf(err *apierrors.StatusError) *metav1.Status {
	st := err.Status()
	return &st
}

func unauthorizedStatus() *metav1.Status {
	return statusOf(apierrors.NewUnauthorized("Unauthorized"))
}

func notFoundStatus() *metav1.Status {
	return &metav1.Status{
		Status:  metav1.StatusFailure,
		Message: "the server could not find the requested resource",
		Reason:  metav1.StatusReasonNotFound,
		Details: &metav1.StatusDetails{},
		Code:    http.StatusNotFound,
	}
}

func methodNotAllowedStatus(method, path string) *metav1.Status {
	return &metav1.Status{
		Status:  metav1.StatusFailure,
		Message: fmt.Sprintf("the server does not allow this method on the requested resource (%s %s)", method, path),
		Reason:  metav1.StatusReasonMethodNotAllowed,
		Code:    http.StatusMethodNotAllowed,
	}
}
