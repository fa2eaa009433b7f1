package httpauth_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/reviewauth/reviewauth/httpauth"
)

func TestCleanPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "empty", in: "", want: "/"},
		{name: "root", in: "/", want: "/"},
		{name: "plain", in: "/metrics", want: "/metrics"},
		{name: "trailing slash kept", in: "/logs/", want: "/logs/"},
		{name: "double slash", in: "//logs", want: "/logs"},
		{name: "inner double slash", in: "/metrics//cadvisor", want: "/metrics/cadvisor"},
		{name: "dot", in: "/./metrics", want: "/metrics"},
		{name: "dot dot", in: "/metrics/../logs/x", want: "/logs/x"},
		{name: "dot dot keeps trailing slash", in: "/metrics/../logs/", want: "/logs/"},
		{name: "dot dot above root", in: "/../../logs", want: "/logs"},
		{name: "trailing dot dot", in: "/logs/x/..", want: "/logs"},
		{name: "trailing dot", in: "/metrics/.", want: "/metrics"},
		{name: "harmless escape decoded", in: "/containerLogs/ns/pod%20a/c", want: "/containerLogs/ns/pod a/c"},
		{name: "escaped letter decoded", in: "/%6Cogs/x", want: "/logs/x"},
		{name: "three dots are a name", in: "/.../x", want: "/.../x"},
		{name: "encoded dot dot", in: "/metrics/%2e%2e/logs/x", wantErr: true},
		{name: "encoded dot dot upper", in: "/metrics/%2E%2E/logs/x", wantErr: true},
		{name: "encoded single dot", in: "/metrics/%2e/x", wantErr: true},
		{name: "encoded slash", in: "/metrics%2f..%2flogs", wantErr: true},
		{name: "encoded slash upper", in: "/metrics%2F..%2Flogs", wantErr: true},
		{name: "encoded backslash", in: "/metrics%5c..%5clogs", wantErr: true},
		{name: "double encoding", in: "/metrics/%252e%252e/logs", wantErr: true},
		{name: "encoded NUL", in: "/metrics%00", wantErr: true},
		{name: "raw backslash", in: "/metrics\\..\\logs", wantErr: true},
		{name: "raw control", in: "/metrics\n", wantErr: true},
		{name: "truncated escape", in: "/metrics%2", wantErr: true},
		{name: "bad escape", in: "/metrics%zz", wantErr: true},
		{name: "dot dot with params", in: "/logs/..;/metrics", wantErr: true},
		{name: "dot with params", in: "/.;x/metrics", wantErr: true},
		{name: "relative", in: "metrics", wantErr: true},
		{name: "valid UTF-8 decoded", in: "/logs/%C3%A9t%C3%A9", want: "/logs/\u00e9t\u00e9"},
		{name: "raw valid UTF-8 kept", in: "/logs/\u00e9t\u00e9", want: "/logs/\u00e9t\u00e9"},
		{name: "overlong dot dot", in: "/metrics/%C0%AE%C0%AE/logs/x", wantErr: true},
		{name: "overlong dot dot lower", in: "/metrics/%c0%ae%c0%ae/logs/x", wantErr: true},
		{name: "overlong slash", in: "/metrics%C0%AFlogs", wantErr: true},
		{name: "three-byte overlong dot", in: "/metrics/%E0%80%AE%E0%80%AE/logs", wantErr: true},
		{name: "raw overlong dot dot", in: "/metrics/\xc0\xae\xc0\xae/logs/x", wantErr: true},
		{name: "encoded surrogate", in: "/metrics/%ED%A0%80", wantErr: true},
		{name: "stray continuation byte", in: "/metrics/%80", wantErr: true},
		{name: "invalid byte", in: "/metrics/%FF", wantErr: true},
		{name: "truncated sequence", in: "/metrics/%C3", wantErr: true},
		{name: "asterisk", in: "*", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := httpauth.CleanPath(tt.in)
			if tt.wantErr {
				if !errors.Is(err, httpauth.ErrBadPath) {
					t.Errorf("CleanPath(%q) = %q, %v; want an error matching ErrBadPath", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("CleanPath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{
		"", "/", "/metrics", "//logs", "/metrics/../logs/x", "/metrics/%2e%2e/logs", "/a%2fb",
		"/logs/", "/./x/./", "/%41", "/..;/x", "/a/b/../../..", "/%c3%a9", "/a\\b",
		"/%C0%AE%C0%AE/x", "/\xc0\xae\xc0\xae/x", "/%E0%80%AE", "/%ED%A0%80", "/\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := httpauth.CleanPath(in)
		if err != nil {
			if !errors.Is(err, httpauth.ErrBadPath) {
				t.Fatalf("CleanPath(%q) error %v does not match ErrBadPath", in, err)
			}
			return
		}
		if !strings.HasPrefix(got, "/") {
			t.Fatalf("CleanPath(%q) = %q; want an absolute path", in, got)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("CleanPath(%q) = %q; want valid UTF-8", in, got)
		}
		if strings.Contains(got, "//") || strings.Contains(got, "\\") {
			t.Fatalf("CleanPath(%q) = %q; want no // and no backslash", in, got)
		}
		for seg := range strings.SplitSeq(got, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("CleanPath(%q) = %q; want no dot segments", in, got)
			}
		}
		// What a handler or proxy would send on: the cleaned path escaped
		// again must clean to itself.
		again, err := httpauth.CleanPath((&url.URL{Path: got}).EscapedPath())
		if err != nil || again != got {
			t.Fatalf("CleanPath(escape(%q)) = %q, %v; want %q (idempotent)", got, again, err, got)
		}
	})
}
