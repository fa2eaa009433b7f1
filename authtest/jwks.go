package authtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
)

// JWKS is GET /openid/v1/jwks: the public keys that verify the service
// account tokens the server mints, as a real kube-apiserver serves them.
const JWKS Endpoint = "jwks"

// signingKey is an ES256 key, like a cluster started with an ECDSA
// --service-account-signing-key-file. ECDSA keeps server start-up fast.
type signingKey struct {
	key *ecdsa.PrivateKey
	kid string
}

func newSigningKey() signingKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic("authtest: generating a signing key: " + err.Error())
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		panic("authtest: encoding a public key: " + err.Error())
	}
	sum := sha256.Sum256(der)
	// The real server's kid is the base64url SHA-256 of the public key DER.
	return signingKey{key: k, kid: base64.RawURLEncoding.EncodeToString(sum[:])}
}

// sign returns claims as a JWT signed with ES256 under the key.
func (k signingKey) sign(claims map[string]any) string {
	header, _ := json.Marshal(map[string]string{"alg": "ES256", "kid": k.kid, "typ": "JWT"})
	payload, err := json.Marshal(claims)
	if err != nil {
		panic("authtest: encoding claims: " + err.Error())
	}
	enc := base64.RawURLEncoding
	signingInput := enc.EncodeToString(header) + "." + enc.EncodeToString(payload)
	digest := sha256.Sum256([]byte(signingInput))
	r, s, err := ecdsa.Sign(rand.Reader, k.key, digest[:])
	if err != nil {
		panic("authtest: signing: " + err.Error())
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signingInput + "." + enc.EncodeToString(sig)
}

func (k signingKey) jwk() map[string]string {
	enc := base64.RawURLEncoding
	x := make([]byte, 32)
	y := make([]byte, 32)
	k.key.PublicKey.X.FillBytes(x)
	k.key.PublicKey.Y.FillBytes(y)
	return map[string]string{"use": "sig", "kty": "EC", "kid": k.kid, "crv": "P-256", "alg": "ES256",
		"x": enc.EncodeToString(x), "y": enc.EncodeToString(y)}
}

// RotateSigningKey makes the server sign new tokens with a fresh key. The
// JWKS lists the new key and, like a cluster that keeps old public keys in
// --service-account-key-file while tokens signed with them live, the
// previous ones; tokens minted before keep working.
func (s *Server) RotateSigningKey() {
	k := newSigningKey()
	s.mu.Lock()
	s.keys = append([]signingKey{k}, s.keys...)
	s.mu.Unlock()
}

// RetireOldKeys removes every key but the newest from the JWKS.
func (s *Server) RetireOldKeys() {
	s.mu.Lock()
	s.keys = s.keys[:1]
	s.mu.Unlock()
}

func (s *Server) signer() signingKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[0]
}

// mediaJWKS is the only media type the API server serves its key set as
// (k8s.io/kubernetes pkg/routes/openidmetadata.go).
const mediaJWKS = "application/jwk-set+json"

func (s *Server) serveJWKS(w http.ResponseWriter, r *http.Request) {
	if !accepts(r.Header.Get("Accept"), mediaJWKS) {
		// What go-restful answers for a route that produces only
		// mediaJWKS.
		http.Error(w, "406: Not Acceptable", http.StatusNotAcceptable)
		return
	}
	s.mu.Lock()
	keys := make([]map[string]string, 0, len(s.keys))
	for _, k := range s.keys {
		keys = append(keys, k.jwk())
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", mediaJWKS)
	json.NewEncoder(w).Encode(map[string]any{"keys": keys})
}

// accepts reports whether an Accept header admits media type mt ("type/sub"):
// no header, or a media range that is mt, "type/*" or "*/*".
func accepts(header, mt string) bool {
	if strings.TrimSpace(header) == "" {
		return true
	}
	typ, _, _ := strings.Cut(mt, "/")
	for part := range strings.SplitSeq(header, ",") {
		r, _, _ := strings.Cut(part, ";")
		switch strings.ToLower(strings.TrimSpace(r)) {
		case mt, typ + "/*", "*/*":
			return true
		}
	}
	return false
}
