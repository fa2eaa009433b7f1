// Package jwt is the one JWT parser of reviewauth for what it reads
// without verifying: the shape of a compact JWT, whether it is spelled
// canonically, and the times in its payload (exp, iat, nbf). authn caps an
// identity's cache TTL at exp, grpcauth's token sources refresh at 80% of
// [iat, exp], and authn's JWKS verifier checks the shape and the size of a
// token's parts before go-jose (the API server's parser) reads its header,
// and its spelling before calling it verified. Nothing here checks a
// signature: a time read here may only shorten how long something is
// trusted, never grant trust.
package jwt

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
)

// MaxPart bounds each decoded part of a token read without verifying it:
// the payload [ReadTimes] reads, and the header authn's JWKS verifier
// parses. A service-account token's header is under 100 bytes and its
// payload under 1 KiB; a header with an x5c chain of three certificates
// is about 4 KiB. A larger part is not read (ReadTimes reports no times;
// the verifier cannot tell, and the token is reviewed), so junk costs
// little and nothing genuine is refused.
const MaxPart = 8 << 10

// Split returns the three base64url parts of a compact JWT (JWS):
// "header.payload.signature". ok is false unless token has exactly two
// dots. The parts are not decoded.
func Split(token string) (header, payload, signature string, ok bool) {
	first := strings.IndexByte(token, '.')
	if first < 0 {
		return "", "", "", false
	}
	rest := token[first+1:]
	second := strings.IndexByte(rest, '.')
	if second < 0 || strings.IndexByte(rest[second+1:], '.') >= 0 {
		return "", "", "", false
	}
	return token[:first], rest[:second], rest[second+1:], true
}

// Canonical reports whether token is a compact JWT spelled the one way its
// bytes encode: three parts of unpadded base64url, each of which
// re-encodes to itself. A signature covers the decoded bytes, not their
// spelling, and base64url's last character carries unused low bits (4 in
// a part whose length is 2 mod 4, 2 in one of 3 mod 4) that decoders,
// go-jose and so the API server among them, ignore: one signed token has
// up to 4,096 spellings, each a different string (a different cache key,
// a different review), and only the one whose unused bits are zero is
// canonical.
func Canonical(token string) bool {
	h, p, s, ok := Split(token)
	return ok && canonicalPart(h) && canonicalPart(p) && canonicalPart(s)
}

// canonicalPart reports whether p is unpadded base64url that re-encodes to
// itself.
func canonicalPart(p string) bool {
	for i := 0; i < len(p); i++ {
		if b64url[p[i]] < 0 {
			return false
		}
	}
	if len(p) == 0 {
		return true
	}
	last := b64url[p[len(p)-1]]
	switch len(p) % 4 {
	case 1:
		return false // no whole byte
	case 2:
		return last&0xf == 0
	case 3:
		return last&0x3 == 0
	}
	return true
}

// b64url maps a byte to its value in the base64url alphabet, or -1.
var b64url = func() (t [256]int8) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := range t {
		t[i] = -1
	}
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = int8(i)
	}
	return t
}()

// Times are the NumericDate claims of a JWT payload. A claim that is
// absent, or not a NumericDate (a JSON number, finite, from 0 to 2^40
// seconds), is the zero time.
type Times struct {
	Exp, Iat, Nbf time.Time
}

// ReadTimes decodes the payload of a JWT-shaped token and returns its exp,
// iat and nbf claims, without verifying anything. ok is false when token
// is not a compact JWT, its payload is not base64url (padding is
// tolerated), is larger than [MaxPart] decoded, or is not a JSON
// object. A quoted number is not a NumericDate.
func ReadTimes(token string) (t Times, ok bool) {
	_, payload, _, ok := Split(token)
	if !ok {
		return Times{}, false
	}
	payload = strings.TrimRight(payload, "=")
	if len(payload) == 0 || base64.RawURLEncoding.DecodedLen(len(payload)) > MaxPart {
		return Times{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return Times{}, false
	}
	var claims struct {
		Exp json.RawMessage `json:"exp"`
		Iat json.RawMessage `json:"iat"`
		Nbf json.RawMessage `json:"nbf"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil {
		return Times{}, false
	}
	return Times{Exp: numericDate(claims.Exp), Iat: numericDate(claims.Iat), Nbf: numericDate(claims.Nbf)}, true
}

// numericDate reads a JSON number of seconds since the epoch (RFC 7519),
// or returns the zero time.
func numericDate(v json.RawMessage) time.Time {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return time.Time{}
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1<<40 {
		return time.Time{}
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9))
}

// Expiry returns the exp claim of a JWT-shaped token, and false when it
// has none (see [ReadTimes]).
func Expiry(token string) (time.Time, bool) {
	t, ok := ReadTimes(token)
	return t.Exp, ok && !t.Exp.IsZero()
}

// Lifetime returns when a JWT-shaped token was issued and when it expires:
// iat, or nbf without iat, or the zero time when neither is before exp;
// ok is false when it has no exp (see [ReadTimes]).
func Lifetime(token string) (issued, exp time.Time, ok bool) {
	t, ok := ReadTimes(token)
	if !ok || t.Exp.IsZero() {
		return time.Time{}, time.Time{}, false
	}
	issued = t.Iat
	if issued.IsZero() {
		issued = t.Nbf
	}
	if !issued.Before(t.Exp) {
		issued = time.Time{}
	}
	return issued, t.Exp, true
}
