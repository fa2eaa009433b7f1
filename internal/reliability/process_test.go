package reliability_test

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/reviewauth/reviewauth/internal/reliability"
)

// TestJunkRequest decodes JunkRequest's message with protobuf's own wire
// decoder: the junk-token attack's calls must be well-formed requests (the
// CSI SnapshotMetadata API's security_token, namespace, snapshot_name), or
// a server that checks its arguments first refuses them without looking
// at the token and the attack measures nothing.
func TestJunkRequest(t *testing.T) {
	t.Parallel()
	long := string(make([]byte, 300)) // a length past one varint byte
	for _, tc := range []struct {
		name   string
		token  string
		fields []string
		want   map[protowire.Number]string
	}{
		{"token alone", "t", nil, map[protowire.Number]string{1: "t"}},
		{"namespace and name", "tok", []string{"apps", "snap-1"}, map[protowire.Number]string{1: "tok", 2: "apps", 3: "snap-1"}},
		{"empty field left out", "tok", []string{"", "snap-1"}, map[protowire.Number]string{1: "tok", 3: "snap-1"}},
		{"long token", long, []string{"ns"}, map[protowire.Number]string{1: long, 2: "ns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := reliability.JunkRequest(tc.token, tc.fields...)
			got := map[protowire.Number]string{}
			for len(b) > 0 {
				num, typ, n := protowire.ConsumeTag(b)
				if n < 0 {
					t.Fatalf("tag: %v", protowire.ParseError(n))
				}
				if typ != protowire.BytesType {
					t.Fatalf("field %d: wire type %d, want bytes", num, typ)
				}
				b = b[n:]
				v, n := protowire.ConsumeBytes(b)
				if n < 0 {
					t.Fatalf("field %d: %v", num, protowire.ParseError(n))
				}
				if _, dup := got[num]; dup {
					t.Fatalf("field %d twice", num)
				}
				got[num] = string(v)
				b = b[n:]
			}
			if len(got) != len(tc.want) {
				t.Fatalf("fields %v, want %v", keys(got), keys(tc.want))
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("field %d = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func keys(m map[protowire.Number]string) []protowire.Number {
	var out []protowire.Number
	for k := range m {
		out = append(out, k)
	}
	return out
}
