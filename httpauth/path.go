package httpauth

import (
	"net/url"

	"github.com/reviewauth/reviewauth/internal/pathmatch"
)

// ErrBadPath is matched (with errors.Is) by every error [CleanPath] returns.
var ErrBadPath = pathmatch.ErrBadPath

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
// Every path pattern of this package ([Options].AlwaysAllowPaths,
// [Route].Path) and authz.Rule's NonResourceURLs are matched against paths
// in this form. CleanPath is a pure function, safe for concurrent use.
func CleanPath(escaped string) (string, error) { return pathmatch.Clean(escaped) }

// cleanURL returns the cleaned path of u, or an error matching ErrBadPath.
func cleanURL(u *url.URL) (string, error) {
	if u.Opaque != "" {
		return "", &badPathError{"opaque request target"}
	}
	return pathmatch.Clean(u.EscapedPath())
}

// badPathError is a request target CleanPath cannot read.
type badPathError struct{ reason string }

func (e *badPathError) Error() string        { return "httpauth: bad request path: " + e.reason }
func (e *badPathError) Is(target error) bool { return target == ErrBadPath }
