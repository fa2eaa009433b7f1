package reliability_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/authn"
	"github.com/reviewauth/reviewauth/authtest"
	"github.com/reviewauth/reviewauth/authz"
	"github.com/reviewauth/reviewauth/grpcauth"
	"github.com/reviewauth/reviewauth/httpauth"
)

func TestMain(m *testing.M) {
	// Every log line of the library, up to V(5), goes through logs, which
	// looks for tokens in it. (client-go itself dumps request bodies,
	// tokens included, from -v=8 on.)
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", "5")
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(&logs)
	goleak.VerifyTestMain(m)
}

// logs receives every klog line and counts those that carry a JWT: a
// base64url JSON header and payload, as every token authtest mints has.
var logs leakDetector

type leakDetector struct {
	lines, leaks atomic.Int64
	mu           sync.Mutex
	first        string
}

var jwtPattern = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}`)

func (d *leakDetector) Write(p []byte) (int, error) {
	d.lines.Add(1)
	if bytes.Contains(p, []byte("eyJ")) && jwtPattern.Match(p) {
		if d.leaks.Add(1) == 1 {
			d.mu.Lock()
			d.first = string(p)
			d.mu.Unlock()
		}
	}
	return len(p), nil
}

// checkLogs fails t if any log line so far carried a token.
func checkLogs(t testing.TB) {
	t.Helper()
	klog.Flush()
	if n := logs.leaks.Load(); n != 0 {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		t.Errorf("%d log lines carry a token; the first: %s", n, logs.first)
	}
}

// audience is the audience of the protected service.
const audience = "things.reliability.example"

// The identities the fake API server knows. allowedUsers may get things in
// namespace default, except those whose name starts with deniedPrefix, which
// the policy explicitly denies; every other user gets NoOpinion (RBAC with no
// binding).
var (
	clientSA = &user.DefaultInfo{
		Name:   "system:serviceaccount:default:client",
		UID:    "7c0e9a52-0000-4000-8000-000000000001",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"},
	}
	strangerSA = &user.DefaultInfo{
		Name:   "system:serviceaccount:other:stranger",
		UID:    "7c0e9a52-0000-4000-8000-000000000002",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:other", "system:authenticated"},
	}
	allowedUsers = []string{clientSA.Name}
)

const deniedPrefix = "deny-"

// policy is the authtest policy of the whole suite; wantCode mirrors it.
func policy(spec authorizationv1.SubjectAccessReviewSpec) (allowed, denied bool, reason, evaluationError string) {
	ra := spec.ResourceAttributes
	if ra == nil || ra.Verb != "get" || ra.Group != "example.com" || ra.Resource != "things" || ra.Namespace != "default" {
		return false, false, "", ""
	}
	if !slices.Contains(allowedUsers, spec.User) {
		return false, false, "", ""
	}
	if strings.HasPrefix(ra.Name, deniedPrefix) {
		return false, true, "reliability: things named deny-* are off limits", ""
	}
	return true, false, "reliability: allowed", ""
}

// outcome is a decision as a caller sees it, whatever the transport.
type outcome string

const (
	allowed         outcome = "OK"
	unauthenticated outcome = "Unauthenticated"
	denied          outcome = "PermissionDenied"
	unavailable     outcome = "Unavailable"
)

// result is what one call returned.
type result struct {
	code       outcome
	user       string // the identity the handler saw, when it ran
	retryAfter string // HTTP only
	message    string // the error body or status message
}

// transport calls the protected "get things/<name> in default" operation.
type transport interface {
	// call asks for thing name with token ("" sends no credential).
	call(ctx context.Context, token, name string) result
	// handled is how many calls reached the handler.
	handled() int64
}

// stack is an authenticator and an authorizer talking to one fake API
// server.
type stack struct {
	authn *authn.Authenticator
	authz *authz.Authorizer
}

func newStack(t testing.TB, s *authtest.Server, ao authn.Options, zo authz.Options) stack {
	t.Helper()
	if ao.Audiences == nil {
		ao.Audiences = []string{audience}
	}
	an, err := authn.NewForConfig(s.Config(), ao)
	if err != nil {
		t.Fatalf("authn.NewForConfig() = %v", err)
	}
	az, err := authz.NewForConfig(s.Config(), zo)
	if err != nil {
		t.Fatalf("authz.NewForConfig() = %v", err)
	}
	return stack{authn: an, authz: az}
}

// thingsMapper maps GET /things/<name> to "get things <name> in default".
var thingsMapper = httpauth.AttributesMapperFunc(func(r *http.Request, u user.Info) ([]authorizer.Attributes, error) {
	name, ok := strings.CutPrefix(r.URL.Path, "/things/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return nil, errors.New("reliability: not a thing")
	}
	return []authorizer.Attributes{authorizer.AttributesRecord{
		User: u, Verb: "get", APIGroup: "example.com", Resource: "things", Namespace: "default", Name: name, ResourceRequest: true,
	}}, nil
})

// middleware returns the HTTP middleware of st around a handler that answers
// with the caller's name and counts its calls in n.
func (st stack) handler(t testing.TB, n *atomic.Int64) http.Handler {
	t.Helper()
	mw, err := httpauth.New(httpauth.Options{Authenticator: st.authn, Authorizer: st.authz, Attributes: thingsMapper})
	if err != nil {
		t.Fatalf("httpauth.New() = %v", err)
	}
	return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		u, _ := request.UserFrom(r.Context())
		if u == nil {
			http.Error(w, "no user", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, u.GetName())
	}))
}

// httpTransport is the middleware behind a loopback httptest server, called
// with a real client.
type httpTransport struct {
	srv    *httptest.Server
	client *http.Client
	n      atomic.Int64
}

func newHTTP(t testing.TB, st stack) *httpTransport {
	t.Helper()
	h := &httpTransport{}
	h.srv = httptest.NewServer(st.handler(t, &h.n))
	h.client = h.srv.Client()
	h.client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	t.Cleanup(h.close)
	return h
}

func (h *httpTransport) close() {
	h.client.CloseIdleConnections()
	h.srv.Close()
}

func (h *httpTransport) handled() int64 { return h.n.Load() }

func (h *httpTransport) call(ctx context.Context, token, name string) result {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL+"/things/"+name, nil)
	if err != nil {
		return result{code: outcome("bad request: " + err.Error())}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return result{code: outcome("transport error: " + err.Error())}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	r := result{retryAfter: resp.Header.Get("Retry-After"), message: string(body)}
	switch resp.StatusCode {
	case http.StatusOK:
		r.code, r.user, r.message = allowed, string(body), ""
	case http.StatusUnauthorized:
		r.code = unauthenticated
	case http.StatusForbidden:
		r.code = denied
	case http.StatusServiceUnavailable:
		r.code = unavailable
	default:
		r.code = outcome(fmt.Sprintf("HTTP %d", resp.StatusCode))
	}
	return r
}

// healthCheck is the protected gRPC method: grpc.health.v1.Health/Check,
// whose "service" field names the thing.
const healthCheck = "/grpc.health.v1.Health/Check"

// thingsRule authorizes Check as "get things <service> in default".
var thingsRule = grpcauth.Rule{Attributes: grpcauth.Resource{
	Verb: "get", APIGroup: "example.com", Resource: "things", Namespace: "default", NameField: "service",
}.Attributes}

// healthServer answers SERVING and sends the caller's name in the "x-user"
// header.
type healthServer struct {
	healthpb.UnimplementedHealthServer
	n *atomic.Int64
}

func (h healthServer) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.n.Add(1)
	u, ok := request.UserFrom(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "no user")
	}
	if err := grpc.SetHeader(ctx, metadata.Pairs("x-user", u.GetName())); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// grpcTransport is a gRPC server with the grpcauth interceptor, over bufconn
// or a real loopback TCP listener.
type grpcTransport struct {
	srv    *grpc.Server
	conn   *grpc.ClientConn
	client healthpb.HealthClient
	n      atomic.Int64
}

// newGRPC serves st's interceptor on bufconn, or on 127.0.0.1 when tcp is
// set.
func newGRPC(t testing.TB, st stack, tcp bool) *grpcTransport {
	t.Helper()
	g := &grpcTransport{}
	opts := grpcauth.Options{Authenticator: st.authn, Authorizer: st.authz, Rules: map[string]grpcauth.Rule{healthCheck: thingsRule}}
	ic, err := grpcauth.New(opts)
	if err != nil {
		t.Fatalf("grpcauth.New() = %v", err)
	}
	g.srv = grpc.NewServer(grpc.ChainUnaryInterceptor(ic.UnaryServerInterceptor()))
	healthpb.RegisterHealthServer(g.srv, healthServer{n: &g.n})
	var (
		lis    net.Listener
		target string
		dial   []grpc.DialOption
	)
	if tcp {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("net.Listen() = %v", err)
		}
		lis, target = l, l.Addr().String()
	} else {
		bl := bufconn.Listen(1 << 20)
		lis, target = bl, "passthrough:///bufnet"
		dial = append(dial, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }))
	}
	go func() { _ = g.srv.Serve(lis) }()
	dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		t.Fatalf("grpc.NewClient() = %v", err)
	}
	g.conn, g.client = conn, healthpb.NewHealthClient(conn)
	t.Cleanup(g.close)
	return g
}

func (g *grpcTransport) close() {
	_ = g.conn.Close()
	g.srv.Stop()
}

func (g *grpcTransport) handled() int64 { return g.n.Load() }

func (g *grpcTransport) call(ctx context.Context, token, name string) result {
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	var hdr metadata.MD
	_, err := g.client.Check(ctx, &healthpb.HealthCheckRequest{Service: name}, grpc.Header(&hdr))
	st := status.Convert(err)
	r := result{message: st.Message()}
	switch st.Code() {
	case codes.OK:
		r.code = allowed
		if u := hdr.Get("x-user"); len(u) == 1 {
			r.user = u[0]
		}
	case codes.Unauthenticated:
		r.code = unauthenticated
	case codes.PermissionDenied:
		r.code = denied
	case codes.Unavailable:
		r.code = unavailable
	default:
		r.code = outcome(st.Code().String() + ": " + st.Message())
	}
	return r
}

// transports lists the transports the suite runs every case through.
var transports = []struct {
	name string
	new  func(t testing.TB, st stack) transport
}{
	{"http", func(t testing.TB, st stack) transport { return newHTTP(t, st) }},
	{"grpc", func(t testing.TB, st stack) transport { return newGRPC(t, st, false) }},
}

// callCtx is the context of one test call: generous, so that only the
// library's own budgets decide.
func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestLeakDetector checks that the log check can fail: a line with a minted
// token is caught, lines with its parts alone are not.
func TestLeakDetector(t *testing.T) {
	t.Parallel()
	s := authtest.Start(t)
	tok := s.MintToken(clientSA, []string{audience}, time.Now().Add(time.Hour))
	header, rest, _ := strings.Cut(tok, ".")
	payload, _, _ := strings.Cut(rest, ".")
	tests := []struct {
		line string
		want int64
	}{
		{"I1129 reviewed token " + tok + "\n", 1},
		{"I1129 header only " + header + "\n", 0},
		{"I1129 payload only " + payload + "\n", 0},
		{"I1129 nothing\n", 0},
	}
	for _, tt := range tests {
		var d leakDetector
		_, _ = d.Write([]byte(tt.line))
		if got := d.leaks.Load(); got != tt.want {
			t.Errorf("leakDetector.Write(%.40q...) leaks = %d; want %d", tt.line, got, tt.want)
		}
	}
}
