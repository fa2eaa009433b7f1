package bearer_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/internal/bearer"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header    string
		wantToken string
		wantOK    bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BEARER abc", "abc", true},
		{"Bearer   abc", "abc", true},
		{"Bearer ", "", true},
		{"Bearer a b", "a b", true}, // refused later as malformed, never truncated to "a"
		{"Bearer", "", false},
		{"Bearerabc", "", false},
		{"Basic dXNlcjpwYXNz", "", false},
		{"", "", false},
		{"Bear abc", "", false},
	}
	for _, tt := range tests {
		token, ok := bearer.Parse(tt.header)
		if token != tt.wantToken || ok != tt.wantOK {
			t.Errorf("Parse(%q) = (%q, %v); want (%q, %v)", tt.header, token, ok, tt.wantToken, tt.wantOK)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  x.y.z", "Basic a", "", "Bearer", "Bearer \x00", "bEaReR é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		token, ok := bearer.Parse(header)
		if !ok && token != "" {
			t.Fatalf("Parse(%q) = (%q, false); want no token when not ok", header, token)
		}
		if ok {
			if !strings.HasSuffix(header, token) || len(token) >= len(header) {
				t.Fatalf("Parse(%q) = %q; token must be a proper suffix of the header", header, token)
			}
			if !strings.EqualFold(header[:6], "bearer") {
				t.Fatalf("Parse(%q) ok for another scheme", header)
			}
		}
	})
}

func TestFromRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		values    []string
		wantToken string
		wantOK    bool
		wantErr   bool
	}{
		{name: "none"},
		{name: "bearer", values: []string{"Bearer abc"}, wantToken: "abc", wantOK: true},
		{name: "another scheme", values: []string{"Basic abc"}},
		{name: "empty token", values: []string{"Bearer "}, wantErr: true},
		{name: "two headers", values: []string{"Bearer abc", "Bearer def"}, wantErr: true},
	}
	for _, tt := range tests {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		for _, v := range tt.values {
			r.Header.Add("Authorization", v)
		}
		token, ok, err := bearer.FromRequest(r)
		if token != tt.wantToken || ok != tt.wantOK || (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, reviewauth.ErrUnauthenticated)) {
			t.Errorf("%s: FromRequest() = %q, %v, %v; want %q, %v, error %v", tt.name, token, ok, err, tt.wantToken, tt.wantOK, tt.wantErr)
		}
	}
}
