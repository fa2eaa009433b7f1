package pathmatch_test

import (
	"strings"
	"testing"

	"github.com/reviewauth/reviewauth/internal/pathmatch"
)

func TestMatcher(t *testing.T) {
	t.Parallel()
	m, err := pathmatch.New("path", []string{"/healthz", "/readyz/", "/logs/*", "/metrics*", "/grpc.health.v1.Health/*"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		want bool
	}{
		{"/healthz", true},
		{"/healthz/", false},
		{"/readyz/", true},
		{"/readyz", false},
		{"/healthz/etcd", false},
		{"/logs/a", true},
		{"/logs/", true},
		{"/logs", false},
		{"/metrics", true},
		{"/metricsx", true},
		{"/metrics/cadvisor", true},
		{"/grpc.health.v1.Health/Check", true},
		{"/grpc.health.v1.Health", false},
		{"/grpc.health.v1.HealthX/Check", false},
		// Paths that are not clean match nothing, whatever they clean to.
		{"", false},
		{"healthz", false},
		{"//healthz", false},
		{"/x/../healthz", false},
		{"/./healthz", false},
		{"/logs/../etc", false},
		{"/logs/%2e%2e/etc", false},
		{"/logs/a\\b", false},
		{"/metrics%41", false},
	}
	for _, tt := range tests {
		if got := m.Match(tt.path); got != tt.want {
			t.Errorf("Match(%q) = %v; want %v", tt.path, got, tt.want)
		}
	}
	var none *pathmatch.Matcher
	if none.Match("/healthz") {
		t.Error("nil Matcher matched")
	}
	all, err := pathmatch.New("path", []string{"*"})
	if err != nil || !all.Match("/anything/at/all") || all.Match("//x") {
		t.Errorf(`New("*") = %v; want a matcher of every clean path`, err)
	}
}

func TestNewRefusesBadPatterns(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "healthz", "/a*b", "/*/x", "**", "/a/../b", "/a//b", "/a/./b*", "/a%2fb", "/a%41", "/a\\b", "/a\x00"} {
		if _, err := pathmatch.New("always-allow path", []string{"/ok", p}); err == nil || !strings.Contains(err.Error(), "always-allow path") {
			t.Errorf("New(%q) = %v; want an error naming the pattern", p, err)
		}
	}
	for _, p := range []string{"/", "*", "/*", "/a/*", "/a*", "/a/b", "/a/", "/.../x"} {
		if _, err := pathmatch.New("path", []string{p}); err != nil {
			t.Errorf("New(%q) = %v; want nil", p, err)
		}
	}
}

// FuzzMatch: a match is always of a clean path, equal to an exact pattern
// or starting with a prefix pattern; bad patterns are refused.
func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"/healthz", "/healthz"}, {"/healthz", "/healthz/../secret"}, {"/logs/*", "/logs/../etc"},
		{"/metrics*", "/metricsx"}, {"/a/*", "/a"}, {"*", "anything"}, {"/a*b", "/ab"}, {"", ""}, {"/x/", "/x/"},
		{"/logs/*", "/logs/%2e%2e/x"}, {"/a/*", "/a/\xc0\xae"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, p string) {
		m, err := pathmatch.New("path", []string{pattern})
		if err != nil {
			return
		}
		body, prefix := strings.CutSuffix(pattern, "*")
		if strings.Contains(body, "*") || (body != "" && !pathmatch.IsClean(body)) || (body == "" && !prefix) {
			t.Fatalf("New(%q) = nil error; want an error", pattern)
		}
		if !m.Match(p) {
			return
		}
		if !pathmatch.IsClean(p) {
			t.Fatalf("Match(%q) = true for a path that is not clean", p)
		}
		if prefix && !strings.HasPrefix(p, body) || !prefix && p != body {
			t.Fatalf("pattern %q matched %q", pattern, p)
		}
		for seg := range strings.SplitSeq(p, "/") {
			if seg == ".." || seg == "." {
				t.Fatalf("matched %q, which has a dot segment", p)
			}
		}
	})
}
