package authn

import (
	"encoding/base64"
	"encoding/json"
	"math"
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
		Exp *json.Number `json:"exp"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	f, err := claims.Exp.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1<<40 {
		return time.Time{}, false
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), true
}
