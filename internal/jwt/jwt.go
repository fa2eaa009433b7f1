// Package jwt is the one JWT parser of reviewauth for what it reads
// without verifying: the shape of a compact JWT, and the times in its
// payload (exp, iat, nbf). authn caps an identity's cache TTL at exp,
// grpcauth's token sources refresh at 80% of [iat, exp], and authn's JWKS
// verifier refuses what is not shaped like a JWT before go-jose parses it.
// Nothing here checks a signature: a time read here may only shorten how
// long something is trusted, never grant trust.
package jwt

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
)

// MaxPayload bounds the decoded payload [ReadTimes] reads. A
// service-account token's payload is well under 1 KiB; a larger one is not
// read (ReadTimes reports no times), so junk costs little.
const MaxPayload = 8 << 10

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

// Times are the NumericDate claims of a JWT payload. A claim that is
// absent, or not a NumericDate (a JSON number, finite, from 0 to 2^40
// seconds), is the zero time.
type Times struct {
	Exp, Iat, Nbf time.Time
}

// ReadTimes decodes the payload of a JWT-shaped token and returns its exp,
// iat and nbf claims, without verifying anything. ok is false when token
// is not a compact JWT, its payload is not base64url (padding is
// tolerated), is larger than [MaxPayload] decoded, or is not a JSON
// object. A quoted number is not a NumericDate.
func ReadTimes(token string) (t Times, ok bool) {
	_, payload, _, ok := Split(token)
	if !ok {
		return Times{}, false
	}
	payload = strings.TrimRight(payload, "=")
	if len(payload) == 0 || base64.RawURLEncoding.DecodedLen(len(payload)) > MaxPayload {
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
