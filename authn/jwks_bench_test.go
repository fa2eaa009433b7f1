package authn_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/reviewauth/reviewauth/authn"
)

// saClaims are the claims of a pod-bound service-account token as a real
// API server mints them; signed, they make a token of about 866 bytes with
// RS256, like the one in CONTEXT.md.
func saClaims() map[string]any {
	now := time.Now().Unix()
	return map[string]any{
		"aud": []string{"snap.example"}, "exp": now + 600, "iat": now, "nbf": now,
		"iss": "https://kubernetes.default.svc.cluster.local",
		"jti": "8d0f5c51-2a3b-4d3e-9c61-0d5a3e8f1b2c",
		"kubernetes.io": map[string]any{
			"namespace":      "default",
			"node":           map[string]string{"name": "node-a", "uid": "0b6f1c7e-7f0e-4b4e-8a3e-5d4c3b2a1f00"},
			"pod":            map[string]string{"name": "backup-0", "uid": "6a2c1e8d-4b1f-4d7a-9a2e-3c5b7d9e1f20"},
			"serviceaccount": map[string]string{"name": "backup", "uid": "1f2e3d4c-5b6a-4789-8a7b-6c5d4e3f2a10"},
		},
		"sub": "system:serviceaccount:default:backup",
	}
}

// BenchmarkJWKSVerify compares JWKSVerifier (go-jose) with the hand-written
// JOSE it replaced (handVerifier below, the verifier as it was before
// go-jose), on the paths a flood takes: a forged token naming the cluster's
// key (refused after a signature check), a genuine one (verified: also its
// spelling and claims are read), another spelling of it (its signature
// checked, then not verified), a token naming an unknown key, and junk.
func BenchmarkJWKSVerify(b *testing.B) {
	k := testKeys()
	raw := jwksOf(k.rsa, k.p256)
	v := mustJWKS(b, func(context.Context) ([]byte, error) { return raw, nil },
		authn.JWKSOptions{Clock: clocktesting.NewFakeClock(time.Now())})
	hand := newHandVerifier(b, raw)
	ctx := context.Background()
	rs := signGenuine(k.rsa, saClaims())
	es := signGenuine(k.p256, saClaims())
	b.Logf("RS256 token: %d bytes", len(rs))
	for _, tt := range []struct {
		name, token string
		want        outcome
	}{
		{"RS256 forged", swapPayload(rs, signGenuine(k.rsa, claims)), refused},
		{"ES256 forged", swapPayload(es, signGenuine(k.p256, claims)), refused},
		{"RS256 genuine", rs, accepted},
		{"ES256 genuine", es, accepted},
		{"ES256 re-spelled", respellings(es)[0], cannotTell},
		{"unknown kid", signGenuine(k.rsa2, saClaims()), cannotTell},
		{"not a JWT", strings.Repeat("x", 866), cannotTell},
	} {
		if got := outcomeOf(v.Verify(ctx, tt.token)); got != tt.want {
			b.Fatalf("%s: go-jose Verify() %s; want %s", tt.name, got, tt.want)
		}
		b.Run(tt.name+"/go-jose", func(b *testing.B) {
			b.ReportAllocs()
			start := processCPU()
			for b.Loop() {
				v.Verify(ctx, tt.token)
			}
			reportCPU(b, start)
		})
		b.Run(tt.name+"/handwritten", func(b *testing.B) {
			b.ReportAllocs()
			start := processCPU()
			for b.Loop() {
				hand.verify(tt.token)
			}
			reportCPU(b, start)
		})
	}
}

// reportCPU reports the process CPU time per op since start, which a busy
// machine inflates less than ns/op. Run with -cpu 1 for it to be the cost
// of one op.
func reportCPU(b *testing.B, start time.Duration) {
	if cpu := processCPU() - start; cpu > 0 && b.N > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// handVerifier is the hand-written JWS verification that JWKSVerifier used
// before go-jose, kept only as the benchmark's baseline. Its known faults
// (it accepted PS256 and an ES256 header over a P-384 key) are why it is
// not used.
type handVerifier struct{ keys map[string]crypto.PublicKey }

func newHandVerifier(b *testing.B, raw []byte) *handVerifier {
	var set struct {
		Keys []struct{ Kty, Kid, Crv, X, Y, N, E string }
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		b.Fatal(err)
	}
	h := &handVerifier{keys: map[string]crypto.PublicKey{}}
	enc := base64.RawURLEncoding
	for _, k := range set.Keys {
		switch k.Kty {
		case "RSA":
			n, _ := enc.DecodeString(k.N)
			e, _ := enc.DecodeString(k.E)
			h.keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		case "EC":
			x, _ := enc.DecodeString(k.X)
			y, _ := enc.DecodeString(k.Y)
			pub, err := ecdsa.ParseUncompressedPublicKey(testKeys().p256.priv.Public().(*ecdsa.PublicKey).Curve, append([]byte{4}, append(x, y...)...))
			if err != nil {
				b.Fatal(err)
			}
			h.keys[k.Kid] = pub
		}
	}
	return h
}

func (h *handVerifier) verify(token string) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return errors.New("not a JWT")
	}
	enc := base64.RawURLEncoding
	rawHeader, err := enc.DecodeString(parts[0])
	if err != nil || len(rawHeader) > 1024 {
		return errors.New("malformed JWT header")
	}
	var hdr struct{ Alg, Kid string }
	if err := json.Unmarshal(rawHeader, &hdr); err != nil {
		return errors.New("malformed JWT header")
	}
	sig, err := enc.DecodeString(parts[2])
	if err != nil {
		return errors.New("malformed JWT signature")
	}
	key, ok := h.keys[hdr.Kid]
	if !ok {
		return errors.New("unknown kid")
	}
	input := parts[0] + "." + parts[1]
	var hashed []byte
	var hash crypto.Hash
	switch hdr.Alg {
	case "RS256", "ES256":
		s := sha256.Sum256([]byte(input))
		hashed, hash = s[:], crypto.SHA256
	case "ES384":
		s := sha512.Sum384([]byte(input))
		hashed, hash = s[:], crypto.SHA384
	default:
		return errors.New("unsupported algorithm")
	}
	switch k := key.(type) {
	case *rsa.PublicKey:
		return rsa.VerifyPKCS1v15(k, hash, hashed, sig)
	case *ecdsa.PublicKey:
		size := (k.Curve.Params().BitSize + 7) / 8
		if len(sig) != 2*size {
			return errors.New("bad signature")
		}
		if !ecdsa.Verify(k, hashed, new(big.Int).SetBytes(sig[:size]), new(big.Int).SetBytes(sig[size:])) {
			return errors.New("bad signature")
		}
	}
	return nil
}
