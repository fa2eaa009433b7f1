// Package pathmatch is the one path matcher of reviewauth: clean absolute
// paths against patterns that are exact, or prefixes when they end in "*",
// as k8s.io/apiserver's --authorization-always-allow-paths and RBAC's
// nonResourceURLs read them. httpauth's always-allow paths and static
// routes, authz's static rules and grpcauth's skipped methods use it, and
// [Clean] is the canonical form of a request path that httpauth serves.
package pathmatch

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"
)

// ErrBadPath is matched (with errors.Is) by every error [Clean] returns.
// httpauth exports it as httpauth.ErrBadPath.
var ErrBadPath = errors.New("httpauth: bad request path")

type pathError struct{ reason string }

func (e *pathError) Error() string        { return "httpauth: bad request path: " + e.reason }
func (e *pathError) Is(target error) bool { return target == ErrBadPath }

// Clean returns the canonical form of escaped, the escaped (on-the-wire)
// path of a request URL as returned by [url.URL.EscapedPath]. The result is
// unescaped and absolute. Clean resolves "." and ".." segments and
// collapses repeated slashes like [path.Clean], but keeps a trailing slash,
// as net/http's ServeMux does: "/metrics/../logs/" is "/logs/".
//
// Encodings that servers disagree about are refused rather than guessed at:
// a percent-encoded '/', '.', '\', '%' or control character, a raw backslash
// or control character, a malformed escape, a segment such as "..;x" that
// some servers read as "..", a path whose bytes, once decoded, are not valid
// UTF-8 (such as the overlong "%C0%AE%C0%AE", which legacy decoders read as
// ".."), and a path that does not start with '/'. The error then matches
// [ErrBadPath]. An empty path is "/". The result is always valid UTF-8, and
// cleans to itself.
//
// Clean is a pure function, safe for concurrent use. A path that is
// already clean (ASCII, no escapes, no "//", no segment starting with '.')
// is returned as it is, without allocating.
func Clean(escaped string) (string, error) {
	if escaped == "" {
		return "/", nil
	}
	if escaped[0] != '/' {
		return "", &pathError{"path must start with /"}
	}
	encoded, dirty, high := false, false, false
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		switch {
		case c >= utf8.RuneSelf:
			high = true
		case c == '/':
			if i+1 < len(escaped) && (escaped[i+1] == '/' || escaped[i+1] == '.') {
				dirty = true
			}
		case c == '%':
			if i+2 >= len(escaped) || !ishex(escaped[i+1]) || !ishex(escaped[i+2]) {
				return "", &pathError{"malformed percent-encoding"}
			}
			b := unhex(escaped[i+1])<<4 | unhex(escaped[i+2])
			switch {
			case b == '/', b == '.', b == '\\', b == '%':
				return "", &pathError{fmt.Sprintf("ambiguous percent-encoding %q", escaped[i:i+3])}
			case b < 0x20, b == 0x7f:
				return "", &pathError{"encoded control character"}
			case b >= utf8.RuneSelf:
				high = true
			}
			encoded = true
			i += 2
		case c == '\\':
			return "", &pathError{"backslash in path"}
		case c < 0x20, c == 0x7f:
			return "", &pathError{"control character in path"}
		}
	}
	if !encoded && !dirty && !high {
		// ASCII, no escapes, no "//", no segment starting with '.':
		// already clean.
		return escaped, nil
	}
	p := escaped
	if encoded {
		var err error
		if p, err = url.PathUnescape(escaped); err != nil {
			return "", &pathError{"malformed percent-encoding"}
		}
	}
	if high && !utf8.ValidString(p) {
		// Overlong forms (%C0%AE is '.' to a lenient decoder), surrogates
		// and stray bytes: a server that decodes them differently would
		// serve another path than the one authorized.
		return "", &pathError{"not valid UTF-8"}
	}
	for seg := range strings.SplitSeq(p, "/") {
		if strings.HasPrefix(seg, ".;") || strings.HasPrefix(seg, "..;") {
			return "", &pathError{"dot segment with parameters"}
		}
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		if len(p) == len(np)+1 && strings.HasPrefix(p, np) {
			np = p
		} else {
			np += "/"
		}
	}
	return np, nil
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// IsClean reports whether p is a clean absolute path: one that [Clean]
// returns unchanged.
func IsClean(p string) bool {
	c, err := Clean(p)
	return err == nil && c == p && p != ""
}

// Matcher matches clean paths against a list of patterns. A Matcher is
// immutable and safe for concurrent use. The zero value and a nil *Matcher
// match nothing.
type Matcher struct {
	exact    map[string]struct{}
	prefixes []string
}

// New returns the Matcher of patterns. Each pattern is a clean absolute
// path (see [IsClean]) matched exactly ("/healthz" matches "/healthz" and
// not "/healthz/"), or such a path followed by "*" matched as a prefix
// ("/logs/*" matches "/logs/a" and not "/logs"; "/metrics*" matches
// "/metrics" and "/metricsx"); "*" alone matches every path. A pattern
// with a "*" anywhere but at its end, or whose path is not clean, is an
// error naming it, as "<what> %q ...". No patterns give a Matcher that
// matches nothing.
func New(what string, patterns []string) (*Matcher, error) {
	m := &Matcher{}
	for _, p := range patterns {
		prefix, isPrefix := strings.CutSuffix(p, "*")
		if strings.Contains(prefix, "*") {
			return nil, fmt.Errorf("%s %q: '*' is only allowed at the end", what, p)
		}
		if !IsClean(prefix) && !(isPrefix && prefix == "") {
			return nil, fmt.Errorf("%s %q is not a clean absolute path", what, p)
		}
		if isPrefix {
			m.prefixes = append(m.prefixes, prefix)
			continue
		}
		if m.exact == nil {
			m.exact = map[string]struct{}{}
		}
		m.exact[prefix] = struct{}{}
	}
	return m, nil
}

// Match reports whether p matches one of the patterns. p must be clean, as
// [Clean] returns it: a path that is not (relative, with "//" or dot
// segments, escapes, a backslash, ...) matches nothing, so that a path
// another component would read differently is never matched by accident.
func (m *Matcher) Match(p string) bool {
	if m == nil || (len(m.exact) == 0 && len(m.prefixes) == 0) || !IsClean(p) {
		return false
	}
	if _, ok := m.exact[p]; ok {
		return true
	}
	for _, prefix := range m.prefixes {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	return false
}
