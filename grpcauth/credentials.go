package grpcauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// PerRPCCredentials returns gRPC call credentials that send a token from
// src in the "authorization: Bearer <token>" metadata of every call, for
// servers whose [Rule] reads the token with [FromMetadata].
//
// The credentials require transport security: gRPC refuses to send them
// over a connection with less than privacy and integrity. TLS qualifies,
// and so do grpc's local credentials (google.golang.org/grpc/credentials/local)
// over a Unix socket, so a node-local client does not need TLS; insecure
// credentials and local credentials over TCP do not. A token source error
// fails the call with codes.Unavailable (or the code of a status error
// returned by src). The credentials are safe for concurrent use if src is.
func PerRPCCredentials(src TokenSource) credentials.PerRPCCredentials {
	return perRPC{src: src}
}

type perRPC struct{ src TokenSource }

func (p perRPC) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	ri, _ := credentials.RequestInfoFromContext(ctx)
	if err := credentials.CheckSecurityLevel(ri.AuthInfo, credentials.PrivacyAndIntegrity); err != nil {
		return nil, fmt.Errorf("grpcauth: refusing to send a bearer token over an insecure connection: %w", err)
	}
	if p.src == nil {
		return nil, errors.New("grpcauth: PerRPCCredentials has no token source")
	}
	tok, err := p.src.Token(ctx)
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		return nil, status.Error(codes.Unavailable, "grpcauth: getting a token: "+err.Error())
	}
	return map[string]string{authorizationKey: "Bearer " + tok}, nil
}

func (perRPC) RequireTransportSecurity() bool { return true }

// RoundTripper returns an http.RoundTripper that sets the Authorization
// header of every request to "Bearer <token>", with a token from src, and
// sends it with base (http.DefaultTransport when nil). A request that
// already has an Authorization header is sent unchanged. The request given
// to RoundTrip is not modified: a clone carries the header. A token source
// error is returned by RoundTrip and nothing is sent. Unlike
// [PerRPCCredentials], it does not check the scheme: send it to https URLs
// only. The RoundTripper is safe for concurrent use if src and base are.
func RoundTripper(src TokenSource, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &roundTripper{src: src, base: base}
}

type roundTripper struct {
	src  TokenSource
	base http.RoundTripper
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") != "" {
		return rt.base.RoundTrip(req)
	}
	if rt.src == nil {
		closeBody(req)
		return nil, errors.New("grpcauth: RoundTripper has no token source")
	}
	tok, err := rt.src.Token(req.Context())
	if err != nil {
		closeBody(req)
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+tok)
	return rt.base.RoundTrip(r)
}

// closeBody honours the RoundTripper contract of closing the body even on
// errors.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// WrappedRoundTripper returns the base RoundTripper, so that client-go's
// utilnet helpers can see through the wrapper.
func (rt *roundTripper) WrappedRoundTripper() http.RoundTripper { return rt.base }
