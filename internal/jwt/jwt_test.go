package jwt_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/reviewauth/reviewauth/internal/jwt"
)

// mint returns an unsigned JWT with claims.
func mint(claims map[string]any) string {
	b, _ := json.Marshal(claims)
	return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString(b) + ".sig"
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		token  string
		want   time.Time
		wantOK bool
	}{
		{"integer exp", mint(map[string]any{"exp": 1700000000}), time.Unix(1700000000, 0), true},
		{"fractional exp", mint(map[string]any{"exp": 1700000000.5}), time.Unix(1700000000, 5e8), true},
		{"zero exp", mint(map[string]any{"exp": 0}), time.Unix(0, 0), true},
		{"exp at the bound", mint(map[string]any{"exp": 1 << 40}), time.Unix(1<<40, 0), true},
		{"exp past the bound", mint(map[string]any{"exp": 1<<40 + 1}), time.Time{}, false},
		{"string exp", mint(map[string]any{"exp": "1700000000"}), time.Time{}, false},
		{"no exp", mint(map[string]any{"sub": "x"}), time.Time{}, false},
		{"negative exp", mint(map[string]any{"exp": -5}), time.Time{}, false},
		{"padded payload", "h." + base64.URLEncoding.EncodeToString([]byte(`{"exp":7}`)) + ".s", time.Unix(7, 0), true},
		{"opaque token", "0123456789abcdef", time.Time{}, false},
		{"four segments", "a.b.c.d", time.Time{}, false},
		{"bad base64", "a.!!!.c", time.Time{}, false},
		{"payload not an object", "a." + base64.RawURLEncoding.EncodeToString([]byte(`[1]`)) + ".c", time.Time{}, false},
	}
	for _, tt := range tests {
		got, ok := jwt.Expiry(tt.token)
		if ok != tt.wantOK || !got.Equal(tt.want) {
			t.Errorf("%s: Expiry() = (%v, %v); want (%v, %v)", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

// TestMaxPart: a payload of MaxPart bytes decoded is read, one more is
// not.
func TestMaxPart(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		size int
		ok   bool
	}{{jwt.MaxPart, true}, {jwt.MaxPart + 1, false}} {
		head := `{"exp":7,"pad":"`
		body := head + strings.Repeat("x", tt.size-len(head)-2) + `"}`
		if len(body) != tt.size {
			t.Fatalf("payload is %d bytes; want %d", len(body), tt.size)
		}
		_, ok := jwt.Expiry("h." + base64.RawURLEncoding.EncodeToString([]byte(body)) + ".s")
		if ok != tt.ok {
			t.Errorf("Expiry(payload of %d bytes) ok = %v; want %v", tt.size, ok, tt.ok)
		}
	}
}

func TestLifetime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		claims           map[string]any
		wantIssued, want time.Time
		wantOK           bool
	}{
		{"iat and exp", map[string]any{"iat": 100, "exp": 700}, time.Unix(100, 0), time.Unix(700, 0), true},
		{"nbf without iat", map[string]any{"nbf": 200, "exp": 700}, time.Unix(200, 0), time.Unix(700, 0), true},
		{"iat wins over nbf", map[string]any{"iat": 100, "nbf": 200, "exp": 700}, time.Unix(100, 0), time.Unix(700, 0), true},
		{"iat not before exp", map[string]any{"iat": 700, "exp": 700}, time.Time{}, time.Unix(700, 0), true},
		{"no exp", map[string]any{"iat": 100}, time.Time{}, time.Time{}, false},
	}
	for _, tt := range tests {
		issued, exp, ok := jwt.Lifetime(mint(tt.claims))
		if ok != tt.wantOK || !issued.Equal(tt.wantIssued) || !exp.Equal(tt.want) {
			t.Errorf("%s: Lifetime() = (%v, %v, %v); want (%v, %v, %v)", tt.name, issued, exp, ok, tt.wantIssued, tt.want, tt.wantOK)
		}
	}
}

// FuzzReadTimes feeds any string to the readers of this package: ReadTimes
// and Lifetime stay in range and agree with Split, and Canonical is
// exactly "each of the three parts decodes and re-encodes to itself".
func FuzzReadTimes(f *testing.F) {
	f.Add(mint(map[string]any{"exp": 1700000000, "iat": 1}))
	f.Add(mint(map[string]any{"exp": 1.5}))
	f.Add(mint(map[string]any{"exp": "soon"}))
	f.Add(mint(map[string]any{}))
	f.Add("a.b.c")
	f.Add("not a jwt")
	f.Add("a..c")
	f.Add("..")
	f.Add("YQ.YWI.YWJj")
	f.Add("YR.YWJ.YWJj")
	f.Add("YQ==.YWI.YWJj")
	f.Add("YQ.YW\nI.YWJj")
	f.Fuzz(func(t *testing.T, token string) {
		if got, want := jwt.Canonical(token), canonicalByReencoding(token); got != want {
			t.Fatalf("Canonical(%q) = %v; re-encoding says %v", token, got, want)
		}
		times, ok := jwt.ReadTimes(token)
		if !ok && times != (jwt.Times{}) {
			t.Fatalf("ReadTimes(%q) = (%v, false); want zero times when not ok", token, times)
		}
		for _, v := range []time.Time{times.Exp, times.Iat, times.Nbf} {
			if !v.IsZero() && (v.Unix() < 0 || v.Unix() > 1<<40) {
				t.Fatalf("ReadTimes(%q) = %v; out of range", token, v)
			}
		}
		if _, _, _, split := jwt.Split(token); ok && !split {
			t.Fatalf("ReadTimes(%q) ok for a token Split refuses", token)
		}
		issued, exp, ok := jwt.Lifetime(token)
		if ok && !issued.IsZero() && !issued.Before(exp) {
			t.Fatalf("Lifetime(%q) = %v, %v; issued must be before exp", token, issued, exp)
		}
	})
}

// canonicalByReencoding is Canonical as its doc states it: three parts,
// each of which decodes as unpadded base64url and re-encodes to itself.
func canonicalByReencoding(token string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		b, err := base64.RawURLEncoding.DecodeString(p)
		if err != nil || base64.RawURLEncoding.EncodeToString(b) != p {
			return false
		}
	}
	return true
}

// TestCanonical (issue #30): of the spellings of one token that decode to
// the same bytes (the unused low bits of each part's last character), only
// the one whose unused bits are zero is canonical: 4 bits when a part's
// length is 2 mod 4, 2 when it is 3 mod 4, none when it is 0 mod 4.
func TestCanonical(t *testing.T) {
	t.Parallel()
	enc := base64.RawURLEncoding.EncodeToString
	for _, tt := range []struct {
		name  string
		token string
		want  bool
	}{
		{"canonical, lengths 2, 3 and 0 mod 4", enc([]byte("a")) + "." + enc([]byte("ab")) + "." + enc([]byte("abc")), true},
		{"empty parts", "..", true},
		{"header re-spelled (4 free bits)", "YR." + enc([]byte("ab")) + ".YWJj", false},
		{"payload re-spelled (2 free bits)", "YQ.YWJ." + "YWJj", false},
		{"payload re-spelled, canonical", "YQ.YWI." + "YWJj", true},
		{"signature re-spelled", "YQ.YWI.YR", false},
		{"padded", "YQ==.YWI.YWJj", false},
		{"standard alphabet", "YQ.YWI.+/+/", false},
		{"length 1 mod 4", "YQ.YWI.Y", false},
		{"two parts", "YQ.YWI", false},
		{"four parts", "YQ.YWI.YWJj.YQ", false},
		{"newline", "YQ.YW\nI.YWJj", false},
	} {
		if got := jwt.Canonical(tt.token); got != tt.want {
			t.Errorf("%s: Canonical(%q) = %v; want %v", tt.name, tt.token, got, tt.want)
		}
		if got := canonicalByReencoding(tt.token); got != tt.want {
			t.Errorf("%s: the reference says %v; want %v (the table is wrong)", tt.name, got, tt.want)
		}
	}
}
