package httpauth

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"
)

// ErrBadPath is matched (with errors.Is) by every error [CleanPath] returns.
var ErrBadPath = errors.New("httpauth: bad request path")

type pathError struct{ reason string }

func (e *pathError) Error() string        { return "httpauth: bad request path: " + e.reason }
func (e *pathError) Is(target error) bool { return target == ErrBadPath }

// CleanPath returns the canonical form of escaped, the escaped (on-the-wire)
// path of a request URL as returned by [url.URL.EscapedPath]. The result is
// unescaped and absolute. CleanPath resolves "." and ".." segments and
// collapses repeated slashes like [path.Clean], but keeps a trailing slash,
// as net/http's ServeMux does: "/metrics/../logs/" is "/logs/".
//
// Encodings that servers disagree about are refused rather than guessed at:
// a percent-encoded '/', '.', '\', '%' or control character, a raw backslash
// or control character, a malformed escape, a segment such as "..;x" that
// some servers read as "..", a path whose bytes, once decoded, are not valid
// UTF-8 (such as the overlong "%C0%AE%C0%AE", which legacy decoders read as
// ".."), and a path that does not start with '/'. The error then matches
// [ErrBadPath]. An empty path is "/". The result is always valid UTF-8.
//
// CleanPath is a pure function, safe for concurrent use.
func CleanPath(escaped string) (string, error) {
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

// cleanURL returns the cleaned path of u, or an error matching ErrBadPath.
func cleanURL(u *url.URL) (string, error) {
	if u.Opaque != "" {
		return "", &pathError{"opaque request target"}
	}
	return CleanPath(u.EscapedPath())
}

// pathMatcher matches cleaned paths against exact patterns and patterns with
// a trailing "*" (prefix match), like apiserver's always-allow paths.
type pathMatcher struct {
	exact    map[string]struct{}
	prefixes []string
}

func newPathMatcher(what string, patterns []string) (*pathMatcher, error) {
	m := &pathMatcher{exact: map[string]struct{}{}}
	for _, p := range patterns {
		prefix, isPrefix := strings.CutSuffix(p, "*")
		if strings.Contains(prefix, "*") {
			return nil, fmt.Errorf("httpauth: %s %q: '*' is only allowed at the end", what, p)
		}
		if c, err := CleanPath(prefix); err != nil || (c != prefix && !(isPrefix && prefix == "")) {
			return nil, fmt.Errorf("httpauth: %s %q is not a clean absolute path", what, p)
		}
		if isPrefix {
			m.prefixes = append(m.prefixes, prefix)
		} else {
			m.exact[prefix] = struct{}{}
		}
	}
	return m, nil
}

func (m *pathMatcher) match(p string) bool {
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
