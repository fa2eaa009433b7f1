package authn

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
)

// maxJWTPayload bounds how much of a token's payload is decoded to look for
// exp. Tokens are already bounded by MaxTokenSize; this keeps the work on a
// miss small.
const maxJWTPayload = 8 << 10

// jwtExpiry returns the exp claim of a JWT-shaped token, without verifying
// anything: it is used only to shorten how long a review result is cached,
// never to accept a token. ok is false when token is not a JWT, has no
// numeric exp, or exp is out of range.
func jwtExpiry(token string) (exp time.Time, ok bool) {
	first := strings.IndexByte(token, '.')
	if first < 0 {
		return time.Time{}, false
	}
	rest := token[first+1:]
	second := strings.IndexByte(rest, '.')
	if second < 0 || strings.IndexByte(rest[second+1:], '.') >= 0 {
		return time.Time{}, false
	}
	payload := strings.TrimRight(rest[:second], "=")
	if len(payload) == 0 || base64.RawURLEncoding.DecodedLen(len(payload)) > maxJWTPayload {
		return time.Time{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp json.RawMessage `json:"exp"`
	}
	// NumericDate is a JSON number; a quoted string is not one.
	if err := json.Unmarshal(raw, &claims); err != nil || len(claims.Exp) == 0 || (claims.Exp[0] != '-' && (claims.Exp[0] < '0' || claims.Exp[0] > '9')) {
		return time.Time{}, false
	}
	f, err := strconv.ParseFloat(string(claims.Exp), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1<<40 {
		return time.Time{}, false
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), true
}
