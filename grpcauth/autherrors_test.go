package grpcauth_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/grpcauth"
	"github.com/reviewauth/reviewauth/httpauth"
)

// TestAuthenticatorErrorsAgreeWithHTTP plugs k8s.io/apiserver's own token
// authenticators into both transports. apiserver (its bearertoken reading
// the same token) is the oracle: a plain error, or no authenticator
// accepting the token, is a rejection. grpcauth must answer
// Unauthenticated where httpauth answers 401, and Unavailable only where
// httpauth answers 503: for an error matching reviewauth.ErrUnavailable.
func TestAuthenticatorErrorsAgreeWithHTTP(t *testing.T) {
	t.Parallel()
	tokenErr := func(err error) authenticator.Token {
		return authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
			return nil, false, err
		})
	}
	notMine := tokenErr(nil)
	cached := func(t authenticator.Token) authenticator.Token {
		return tokencache.New(t, false, time.Minute, 10*time.Second)
	}
	unavailable := &reviewauth.ReviewError{Review: "TokenReview", Code: 503, Attempts: 1}
	allow := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	})
	tests := []struct {
		name     string
		tokens   authenticator.Token
		wantHTTP int
		wantGRPC codes.Code
	}{
		{"a plain error", tokenErr(errors.New("invalid token")), 401, codes.Unauthenticated},
		{"no token authenticator accepts it", notMine, 401, codes.Unauthenticated},
		{"the token cache over a plain error", cached(tokenErr(errors.New("token expired"))), 401, codes.Unauthenticated},
		{"a token union", tokenunion.New(notMine, tokenErr(errors.New("bad signature"))), 401, codes.Unauthenticated},
		{"a context error is a plain error too", tokenErr(context.DeadlineExceeded), 401, codes.Unauthenticated},
		{"a RejectedError", tokenErr(&reviewauth.RejectedError{Reason: "no"}), 401, codes.Unauthenticated},
		{"a ReviewError", tokenErr(unavailable), 503, codes.Unavailable},
		{"a ReviewError through the token cache", cached(tokenErr(unavailable)), 503, codes.Unavailable},
		{"a ReviewError through a token union", tokenunion.New(tokenErr(unavailable)), 503, codes.Unavailable},
		{"a wrapped ErrUnavailable", tokenErr(fmt.Errorf("my backend is down: %w", reviewauth.ErrUnavailable)), 503, codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The oracle: apiserver's bearertoken fails the request.
			r := httptest.NewRequest("GET", "/metrics", nil)
			r.Header.Set("Authorization", "Bearer "+aliceToken)
			if _, ok, err := bearertoken.New(tt.tokens).AuthenticateRequest(r); ok || err == nil {
				t.Fatalf("bearertoken = %v, %v; want an error", ok, err)
			}
			mw, err := httpauth.New(httpauth.Options{Authenticator: tt.tokens, Authorizer: allow, Attributes: httpauth.NonResource()})
			if err != nil {
				t.Fatal(err)
			}
			w := httptest.NewRecorder()
			mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, r)
			if w.Code != tt.wantHTTP {
				t.Fatalf("httpauth = %d; want %d", w.Code, tt.wantHTTP)
			}
			opts := testOptions(nil)
			opts.Authenticator, opts.Authorizer = tt.tokens, allow
			conn := serve(t, opts)
			err = conn.Invoke(withBearer(t.Context(), aliceToken), methodGet, newRequest("", "ns", "a"), new(wrapperspb.StringValue))
			if status.Code(err) != tt.wantGRPC {
				t.Errorf("grpcauth = %v; want code %v (httpauth: %d)", err, tt.wantGRPC, tt.wantHTTP)
			}
			if strings.Contains(status.Convert(err).Message(), aliceToken) {
				t.Errorf("status message %q carries the token", status.Convert(err).Message())
			}
		})
	}
}

// TestAttributesDeniedError: an AttributesFunc that returns a
// *reviewauth.DeniedError (the request itself shows the call may not
// proceed, such as a CSI delta whose base snapshot is bound in another
// namespace) ends the call with PermissionDenied and its reason, without
// asking the authorizer, on unary and streaming calls.
func TestAttributesDeniedError(t *testing.T) {
	t.Parallel()
	var asked atomic.Int32
	opts := testOptions(grpcauth.FromField("security_token"))
	opts.Authorizer = authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		asked.Add(1)
		return authorizer.DecisionAllow, "", nil
	})
	denied := func(_ context.Context, req any, u user.Info) ([]authorizer.Attributes, error) {
		return nil, &reviewauth.DeniedError{Reason: "the base snapshot is in another namespace"}
	}
	for m, r := range opts.Rules {
		r.Attributes = denied
		opts.Rules[m] = r
	}
	conn := serve(t, opts)
	check := func(what string, err error) {
		t.Helper()
		st := status.Convert(err)
		if st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "the base snapshot is in another namespace") {
			t.Errorf("%s = %v %q; want PermissionDenied with the reason", what, st.Code(), st.Message())
		}
	}
	check("unary", conn.Invoke(t.Context(), methodGet, newRequest(aliceToken, "ns", "a"), new(wrapperspb.StringValue)))
	stream, err := conn.NewStream(t.Context(), &svcDesc.Streams[0], methodList)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(newRequest(aliceToken, "ns", "a")); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	check("stream", stream.RecvMsg(new(wrapperspb.StringValue)))
	if n := asked.Load(); n != 0 {
		t.Errorf("authorizer asked %d times; want 0", n)
	}
}

// metadataFunc is a TokenExtractor of the caller's own that reads the
// metadata, and says so.
type metadataFunc struct{}

func (metadataFunc) FromMessage() bool { return false }
func (metadataFunc) Token(ctx context.Context, req any) (string, bool) {
	if req != nil {
		panic("a metadata extractor was handed the message")
	}
	return grpcauth.FromMetadata().Token(ctx, nil)
}

// TestTokenExtractorSaysWhereItReads: an extractor of one's own that says
// it does not read the message is treated as FromMetadata is: a stream is
// authenticated before any message arrives, and the extractor is never
// given one.
func TestTokenExtractorSaysWhereItReads(t *testing.T) {
	t.Parallel()
	if grpcauth.FromMetadata().FromMessage() || !grpcauth.FromField("x").FromMessage() {
		t.Fatal("FromMetadata reads the message, or FromField does not")
	}
	opts := testOptions(metadataFunc{})
	for m, r := range opts.Rules {
		r.AttributesIgnoreMessage = true
		r.Attributes = func(context.Context, any, user.Info) ([]authorizer.Attributes, error) {
			return []authorizer.Attributes{authorizer.AttributesRecord{Name: "a", Verb: "get"}}, nil
		}
		opts.Rules[m] = r
	}
	conn := serve(t, opts)
	// Refused before a message is sent: the stream's status arrives with
	// nothing sent by the caller (an interceptor waiting for a message
	// would wait until this deadline).
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	stream, err := conn.NewStream(withBearer(ctx, "mallory-token-0123456789"), &svcDesc.Streams[0], methodList)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.RecvMsg(new(wrapperspb.StringValue)); status.Code(err) != codes.Unauthenticated {
		t.Errorf("stream with a bad token in the metadata, no message sent = %v; want Unauthenticated", err)
	}
}
