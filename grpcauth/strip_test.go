package grpcauth_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/reviewauth/reviewauth/grpcauth"
)

// TestIncomingKeyFound: with the grpc this module pins, the interceptors
// strip the token without copying the metadata. Should grpc's metadata
// package change how it stores the incoming metadata, they fall back to
// copying (TestStripAuthorization covers both) and this test says so.
func TestIncomingKeyFound(t *testing.T) {
	t.Parallel()
	if !grpcauth.IncomingKeyFound() {
		t.Error("IncomingKeyFound() = false; want true: the interceptors copy the metadata of every call")
	}
}

// TestStripAuthorization: the handler of an allowed call finds no
// "authorization" entry (in any letter case) through either of grpc's
// accessors, finds every other entry, cannot change the caller's metadata
// or what a later read of its own returns, and shares nothing it can modify
// with the caller. Both ways of stripping (without copying, and the copying
// fallback) are checked, on the unary interceptor for the first.
func TestStripAuthorization(t *testing.T) {
	t.Parallel()
	strips := []struct {
		name  string
		strip func(context.Context) context.Context
	}{
		{name: "unary interceptor", strip: func(ctx context.Context) context.Context {
			ic := mustNew(t, testOptions(nil)).UnaryServerInterceptor()
			var got context.Context
			_, err := ic(ctx, newRequest("", "ns", "a"), &grpc.UnaryServerInfo{FullMethod: methodGet},
				func(ctx context.Context, _ any) (any, error) {
					got = ctx
					return nil, nil
				})
			if err != nil {
				t.Fatalf("interceptor() = %v", err)
			}
			if u, ok := request.UserFrom(got); !ok || u.GetName() != "alice" {
				t.Errorf("request.UserFrom() = %v, %t; want alice", u, ok)
			}
			return got
		}},
		{name: "without copying", strip: grpcauth.StripAuthorization},
		{name: "copying", strip: grpcauth.StripAuthorizationCopying},
	}
	mds := []struct {
		name string
		md   metadata.MD
	}{
		{name: "grpc's lowercase key", md: metadata.Pairs("authorization", "Bearer "+aliceToken,
			"user-agent", "grpc-go/1.85.0", "x-trace", "a", "x-trace", "b")},
		// A context built by hand: ValueFromIncomingContext would find
		// the key in any case.
		{name: "mixed-case key", md: metadata.MD{"Authorization": {"Bearer " + aliceToken},
			"user-agent": {"grpc-go/1.85.0"}, "x-trace": {"a", "b"}}},
		{name: "both", md: metadata.MD{"authorization": {"Bearer " + aliceToken}, "AUTHORIZATION": {"Bearer x"},
			"user-agent": {"grpc-go/1.85.0"}, "x-trace": {"a", "b"}}},
	}
	for _, st := range strips {
		for _, mt := range mds {
			t.Run(st.name+"/"+mt.name, func(t *testing.T) {
				t.Parallel()
				if st.name == "unary interceptor" && mt.name == "both" {
					t.Skip("two authorization entries carry no token")
				}
				caller := mt.md.Copy()
				ctx := st.strip(metadata.NewIncomingContext(t.Context(), caller))

				md, ok := metadata.FromIncomingContext(ctx)
				if !ok {
					t.Fatal("FromIncomingContext() = false; want the other entries")
				}
				for k := range md {
					if strings.EqualFold(k, "authorization") {
						t.Errorf("FromIncomingContext()[%q] = %q; want no such entry", k, md[k])
					}
				}
				for _, k := range []string{"authorization", "Authorization", "AUTHORIZATION"} {
					if v := metadata.ValueFromIncomingContext(ctx, k); v != nil {
						t.Errorf("ValueFromIncomingContext(%q) = %q; want nil", k, v)
					}
				}
				want := metadata.MD{"user-agent": {"grpc-go/1.85.0"}, "x-trace": {"a", "b"}}
				if fmt.Sprint(md) != fmt.Sprint(want) {
					t.Errorf("FromIncomingContext() = %v; want %v", md, want)
				}

				// The handler changes its copies; nothing else changes.
				md["x-trace"][0] = "changed"
				md.Set("x-new", "v")
				metadata.ValueFromIncomingContext(ctx, "x-trace")[1] = "changed"
				again, _ := metadata.FromIncomingContext(ctx)
				if fmt.Sprint(again) != fmt.Sprint(want) {
					t.Errorf("FromIncomingContext() after the handler changed its copy = %v; want %v", again, want)
				}
				if fmt.Sprint(caller) != fmt.Sprint(mt.md) {
					t.Errorf("caller's metadata = %v; want %v, unchanged", caller, mt.md)
				}
			})
		}
	}
}

// TestStripAuthorizationNoToken: a call without an authorization entry
// keeps its context as it is (no copy), and so does a call without
// metadata.
func TestStripAuthorizationNoToken(t *testing.T) {
	t.Parallel()
	for _, strip := range []func(context.Context) context.Context{grpcauth.StripAuthorization, grpcauth.StripAuthorizationCopying} {
		for _, ctx := range []context.Context{
			t.Context(),
			metadata.NewIncomingContext(t.Context(), metadata.Pairs("user-agent", "grpc-go/1.85.0")),
			metadata.NewIncomingContext(t.Context(), metadata.MD{}),
		} {
			if got := strip(ctx); got != ctx {
				t.Errorf("strip(%v) = %v; want the same context", ctx, got)
			}
		}
	}
}

// TestStrippedContextIsAContext: the handler's context behaves as any
// other: its cancellation and deadline are the caller's, contexts derived
// from it are cancelled with it (without a goroutine each, as for
// context.WithValue), values set above and below it are found, and its
// metadata may be read concurrently.
func TestStrippedContextIsAContext(t *testing.T) {
	deadline := time.Now().Add(time.Hour)
	parent, cancel := context.WithDeadline(context.Background(), deadline)
	type key struct{}
	parent = context.WithValue(parent, key{}, "below")
	ctx := grpcauth.StripAuthorization(metadata.NewIncomingContext(parent,
		metadata.Pairs("authorization", "Bearer "+aliceToken, "x-a", "1")))
	if d, ok := ctx.Deadline(); !ok || !d.Equal(deadline) {
		t.Errorf("Deadline() = %v, %t; want %v, true", d, ok, deadline)
	}
	if got := ctx.Value(key{}); got != "below" {
		t.Errorf("Value(key) = %v; want below", got)
	}
	type above struct{}
	if got := context.WithValue(ctx, above{}, "above").Value(above{}); got != "above" {
		t.Errorf("Value(above) = %v; want above", got)
	}
	if s := fmt.Sprint(ctx); strings.Contains(s, aliceToken) {
		t.Errorf("String() = %q; want no token", s)
	}

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if v := metadata.ValueFromIncomingContext(ctx, "x-a"); !slices.Equal(v, []string{"1"}) {
				t.Errorf("ValueFromIncomingContext(x-a) = %q; want [1]", v)
			}
		})
	}
	wg.Wait()

	before := runtime.NumGoroutine()
	children := make([]context.Context, 100)
	for i := range children {
		var cancelChild context.CancelFunc
		children[i], cancelChild = context.WithCancel(ctx)
		defer cancelChild()
	}
	if n := runtime.NumGoroutine() - before; n >= len(children) {
		t.Errorf("context.WithCancel() on the handler's context started %d goroutines; want none", n)
	}
	cancel()
	for i, c := range children {
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("child %d not cancelled with its parent", i)
		}
	}
	if ctx.Err() != context.Canceled {
		t.Errorf("Err() = %v; want %v", ctx.Err(), context.Canceled)
	}
}

// TestStripAuthorizationAllocs: stripping the token costs the same whatever
// the number of other metadata entries, since the other entries are
// neither copied nor shared until the handler asks for them.
func TestStripAuthorizationAllocs(t *testing.T) {
	ic := mustNew(t, testOptions(nil)).UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: methodGet}
	req := newRequest("", "ns", "a")
	handler := func(context.Context, any) (any, error) { return nil, nil }
	allocs := func(md metadata.MD) float64 {
		ctx := metadata.NewIncomingContext(t.Context(), md)
		return testing.AllocsPerRun(100, func() {
			if _, err := ic(ctx, req, info, handler); err != nil {
				t.Fatalf("interceptor() = %v", err)
			}
		})
	}
	small := allocs(metadata.Pairs("authorization", "Bearer "+aliceToken))
	large := allocs(metadata.Pairs("authorization", "Bearer "+aliceToken, "user-agent", "grpc-go/1.85.0",
		"content-type", "application/grpc", ":authority", "bufnet", "x-a", "1", "x-b", "2", "x-c", "3"))
	if large != small {
		t.Errorf("allocations per call with 7 more metadata entries = %v; want %v, as with none", large, small)
	}
}
