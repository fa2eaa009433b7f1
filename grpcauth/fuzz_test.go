package grpcauth_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

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
		tok, ok := extract(ctx, nil)
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
		if tok, ok := extract(ctx, nil); ok {
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
			_, _ = extract(context.Background(), m)
			return
		}
		want := m.Get(requestDesc.Fields().ByName("security_token")).String()
		tok, ok := extract(context.Background(), m)
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
			if tok, ok := extract(context.Background(), &sv); ok {
				t.Fatalf("FromField(security_token)(StringValue %x) = %q, true; want false", wire, tok)
			}
			if v, ok := grpcauth.FromField("value")(context.Background(), &sv); ok != (sv.GetValue() != "") || v != sv.GetValue() {
				t.Fatalf("FromField(value)(StringValue %x) = %q, %v; want %q", wire, v, ok, sv.GetValue())
			}
		}
		var iv wrapperspb.Int64Value
		if proto.Unmarshal(wire, &iv) == nil {
			if tok, ok := grpcauth.FromField("value")(context.Background(), &iv); ok {
				t.Fatalf("FromField(value)(Int64Value %x) = %q, true; want false for a non-string field", wire, tok)
			}
		}
	})
}
