package grpcauth_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/reviewauth/reviewauth/grpcauth"
)

func FuzzFromMetadata(f *testing.F) {
	for _, s := range []string{
		"Bearer abc", "bearer abc", "BEARER   abc", "Bearer", "Bearer ", "Bearer  ", "Basic abc",
		"Bearerabc", "Bearer a b", "Bearer\tabc", "", " Bearer abc", "Bearer \u00e9t\u00e9",
	} {
		f.Add(s)
	}
	extract := grpcauth.FromMetadata()
	f.Fuzz(func(t *testing.T, header string) {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", header))
		tok, ok := extract.Token(ctx, nil)
		if !ok {
			if tok != "" {
				t.Fatalf("FromMetadata(%q) = %q, false; want no token when not ok", header, tok)
			}
			return
		}
		if tok == "" {
			t.Fatalf("FromMetadata(%q) = \"\", true; want ok only with a token", header)
		}
		if len(header) < 7 || !strings.EqualFold(header[:7], "bearer ") {
			t.Fatalf("FromMetadata(%q) = %q, true; want a token only for the Bearer scheme", header, tok)
		}
		if strings.TrimLeft(header[7:], " ") != tok {
			t.Fatalf("FromMetadata(%q) = %q; want the rest of the header after the scheme and spaces", header, tok)
		}
		// Two authorization entries are ambiguous: no token.
		ctx = metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", header, "authorization", header))
		if tok, ok := extract.Token(ctx, nil); ok {
			t.Fatalf("FromMetadata(two entries %q) = %q, true; want false", header, tok)
		}
	})
}

func FuzzFromField(f *testing.F) {
	seed := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(seed(newRequest("tok", "ns", "name")))
	f.Add(seed(newRequest("", "ns", "name")))
	f.Add(seed(wrapperspb.String("value")))
	f.Add([]byte{0x0a, 0x03, 'a', 'b', 'c', 0x0a, 0x01, 'x'}) // the field twice: last one wins
	f.Add([]byte{0x0a, 0x02, 0xff, 0xfe})                     // invalid UTF-8
	f.Add([]byte{0x08, 0x01})                                 // wrong wire type for field 1
	extract := grpcauth.FromField("security_token")
	f.Fuzz(func(t *testing.T, wire []byte) {
		m := dynamicpb.NewMessage(requestDesc)
		if err := proto.Unmarshal(wire, m); err != nil {
			// Not a message the server would accept; the extractor
			// must still not panic on what was decoded.
			_, _ = extract.Token(context.Background(), m)
			return
		}
		want := m.Get(requestDesc.Fields().ByName("security_token")).String()
		tok, ok := extract.Token(context.Background(), m)
		if ok != (want != "") || tok != want {
			t.Fatalf("FromField(security_token)(%x) = %q, %v; want %q", wire, tok, ok, want)
		}
		if !utf8.ValidString(tok) {
			t.Fatalf("FromField(security_token)(%x) = %q; want valid UTF-8 (proto3 strings are validated)", wire, tok)
		}
		// A message without the field, or with a field of that name of
		// another type, never yields a token.
		var sv wrapperspb.StringValue
		if proto.Unmarshal(wire, &sv) == nil {
			if tok, ok := extract.Token(context.Background(), &sv); ok {
				t.Fatalf("FromField(security_token)(StringValue %x) = %q, true; want false", wire, tok)
			}
			if v, ok := grpcauth.FromField("value").Token(context.Background(), &sv); ok != (sv.GetValue() != "") || v != sv.GetValue() {
				t.Fatalf("FromField(value)(StringValue %x) = %q, %v; want %q", wire, v, ok, sv.GetValue())
			}
		}
		var iv wrapperspb.Int64Value
		if proto.Unmarshal(wire, &iv) == nil {
			if tok, ok := grpcauth.FromField("value").Token(context.Background(), &iv); ok {
				t.Fatalf("FromField(value)(Int64Value %x) = %q, true; want false for a non-string field", wire, tok)
			}
		}
	})
}

// FuzzOnlyTo parses OnlyTo entries and request hosts: the token goes to a
// host only if its name is the entry's, ignoring case, and always goes to
// the very host named.
func FuzzOnlyTo(f *testing.F) {
	for _, s := range [][2]string{
		{"a.example", "a.example"}, {"a.example", "A.EXAMPLE:443"}, {"a.example:443", "a.example"},
		{"a.example", "x.a.example"}, {"[::1]:8443", "[::1]:8443"}, {"::1", "[::1]"}, {"a.example:", "a.example"},
		{"a.example:8443", "a.example:8443"}, {"", "a.example"}, {"a.example/", "a.example"}, {"a.example:https", "a.example"},
		{"%61.example", "a.example"}, {"a.example.", "a.example"}, {"A.example", "a.example:0443"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, entry, host string) {
		u, err := url.Parse("https://" + host + "/")
		if err != nil || u.Host != host {
			return
		}
		base := &hostsTransport{}
		rt := grpcauth.RoundTripper(staticToken("tok-1"), base, grpcauth.OnlyTo(entry))
		resp, err := rt.RoundTrip(&http.Request{Method: http.MethodGet, URL: u, Header: http.Header{}})
		if err != nil {
			t.Fatalf("RoundTrip(%q) = %v", host, err)
		}
		_ = resp.Body.Close()
		sent := strings.HasSuffix(base.seen[0], " Bearer tok-1")
		e := url.URL{Host: entry}
		if sent && !strings.EqualFold(e.Hostname(), u.Hostname()) {
			t.Fatalf("OnlyTo(%q) sent the token to host %q", entry, host)
		}
		if sent && strings.ContainsAny(entry, "/?#@ ") {
			t.Fatalf("OnlyTo(%q), not a host[:port], sent the token to %q", entry, host)
		}
		if entry == host && !sent && u.Hostname() != "" && (u.Port() == "" || strings.Trim(u.Port(), "0123456789") == "") &&
			!strings.ContainsAny(u.Hostname(), "[]:") {
			t.Fatalf("OnlyTo(%q) did not send the token to the very host %q", entry, host)
		}
	})
}

// FuzzStreamContentType: the interceptor receives the first message itself
// (so nothing the handler sends before its first RecvMsg is held) only for
// the proto codec's content types.
func FuzzStreamContentType(f *testing.F) {
	for _, s := range []string{
		"application/grpc", "application/grpc+proto", "application/grpc;proto", "APPLICATION/GRPC+PROTO",
		"application/grpc+json", "application/grpc+", "application/grpcx", "application/grpc+protox", "text/plain", "",
	} {
		f.Add(s)
	}
	interceptor := mustNew(f, testOptions(grpcauth.FromField("security_token"))).StreamServerInterceptor()
	info := &grpc.StreamServerInfo{FullMethod: methodChat, IsClientStream: true, IsServerStream: true}
	f.Fuzz(func(t *testing.T, contentType string) {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{"content-type": []string{contentType}})
		ss := &fakeStream{ctx: ctx, msgs: []string{aliceToken}}
		var early bool
		err := interceptor(nil, ss, info, func(_ any, s grpc.ServerStream) error {
			_ = s.SendMsg("early")
			early = len(ss.ops) == 1
			return s.RecvMsg(newRequest("", "", ""))
		})
		if err != nil {
			t.Fatalf("interceptor(content-type %q) = %v", contentType, err)
		}
		if strings.Join(ss.ops, ",") != "early" {
			t.Fatalf("interceptor(content-type %q) sent %q; want the one message", contentType, ss.ops)
		}
		want := false
		switch strings.ToLower(contentType) {
		case "application/grpc", "application/grpc+proto", "application/grpc;proto":
			want = true
		}
		if early != want {
			t.Fatalf("content-type %q: handler started after the check = %v; want %v", contentType, early, want)
		}
	})
}
