package authn_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "gopkg.in/go-jose/go-jose.v2"
	josejwt "gopkg.in/go-jose/go-jose.v2/jwt"
)

// clusterKey is a signing key as the API server holds one: its kid is the
// base64url SHA-256 of the PKIX public key (pkg/serviceaccount
// keyIDFromPublicKey), its algorithm the one the API server signs with.
type clusterKey struct {
	priv crypto.Signer
	kid  string
	alg  jose.SignatureAlgorithm
}

func newClusterKey(priv crypto.Signer, alg jose.SignatureAlgorithm) clusterKey {
	der, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(der)
	return clusterKey{priv: priv, kid: base64.RawURLEncoding.EncodeToString(sum[:]), alg: alg}
}

// testKeys are generated once: RSA generation is slow under -race.
var testKeys = sync.OnceValue(func() (k struct{ rsa, p256, p384, p521, rsa2 clusterKey }) {
	gen := func(c elliptic.Curve) *ecdsa.PrivateKey {
		key, err := ecdsa.GenerateKey(c, rand.Reader)
		if err != nil {
			panic(err)
		}
		return key
	}
	genRSA := func() *rsa.PrivateKey {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		return key
	}
	k.rsa = newClusterKey(genRSA(), jose.RS256)
	k.rsa2 = newClusterKey(genRSA(), jose.RS256)
	k.p256 = newClusterKey(gen(elliptic.P256()), jose.ES256)
	k.p384 = newClusterKey(gen(elliptic.P384()), jose.ES384)
	k.p521 = newClusterKey(gen(elliptic.P521()), jose.ES512)
	return k
})

// jwksOf serves keys as the API server does (pkg/serviceaccount
// publicJWKSFromKeys): a go-jose JSONWebKeySet with alg, kid and use=sig.
func jwksOf(keys ...clusterKey) []byte {
	var set jose.JSONWebKeySet
	for _, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Algorithm: string(k.alg), Key: k.priv.Public(), KeyID: k.kid, Use: "sig"})
	}
	raw, err := json.Marshal(set)
	if err != nil {
		panic(err)
	}
	return raw
}

// signGenuine signs claims as the API server does (pkg/serviceaccount
// JWTTokenGenerator): go-jose's signer over a JWK carrying the kid.
func signGenuine(k clusterKey, claims any) string {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: &jose.JSONWebKey{Algorithm: string(k.alg), Key: k.priv, KeyID: k.kid, Use: "sig"}}, nil)
	if err != nil {
		panic(err)
	}
	payload, _ := json.Marshal(claims)
	jws, err := signer.Sign(payload)
	if err != nil {
		panic(err)
	}
	token, err := jws.CompactSerialize()
	if err != nil {
		panic(err)
	}
	return token
}

var b64 = base64.RawURLEncoding

// signRaw builds a token by hand: header is used as given, and the
// signature is made with priv under hash h whatever the header says, in the
// JWS encoding for priv's type (RSA PKCS#1 v1.5 or PSS, ECDSA r||s at the
// curve's size, HMAC with a []byte secret). It makes the tokens a careless
// verifier would accept.
func signRaw(header string, claims any, priv any, h crypto.Hash, pss bool) string {
	payload, _ := json.Marshal(claims)
	input := b64.EncodeToString([]byte(header)) + "." + b64.EncodeToString(payload)
	var digest []byte
	switch h {
	case crypto.SHA256:
		s := sha256.Sum256([]byte(input))
		digest = s[:]
	case crypto.SHA384:
		s := sha512.Sum384([]byte(input))
		digest = s[:]
	case crypto.SHA512:
		s := sha512.Sum512([]byte(input))
		digest = s[:]
	}
	var sig []byte
	var err error
	switch k := priv.(type) {
	case *rsa.PrivateKey:
		if pss {
			sig, err = rsa.SignPSS(rand.Reader, k, h, digest, nil)
		} else {
			sig, err = rsa.SignPKCS1v15(rand.Reader, k, h, digest)
		}
	case *ecdsa.PrivateKey:
		r, s, e := ecdsa.Sign(rand.Reader, k, digest)
		if e != nil {
			panic(e)
		}
		size := (k.Curve.Params().BitSize + 7) / 8
		sig = make([]byte, 2*size)
		r.FillBytes(sig[:size])
		s.FillBytes(sig[size:])
	case []byte:
		mac := hmac.New(sha256.New, k)
		mac.Write([]byte(input))
		sig = mac.Sum(nil)
	case nil:
	}
	if err != nil {
		panic(err)
	}
	return input + "." + b64.EncodeToString(sig)
}

func header(alg, kid string) string {
	if kid == "" {
		return `{"alg":"` + alg + `"}`
	}
	return `{"alg":"` + alg + `","kid":"` + kid + `"}`
}

// jwksServer is a fetch func serving a key set that the test changes, and
// counting fetches.
type jwksServer struct {
	mu    sync.Mutex
	raw   []byte
	err   error
	count atomic.Int32
}

func (s *jwksServer) set(raw []byte, err error) {
	s.mu.Lock()
	s.raw, s.err = raw, err
	s.mu.Unlock()
}

func (s *jwksServer) fetch(context.Context) ([]byte, error) {
	s.count.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw, s.err
}

func newJWKSServer(keys ...clusterKey) *jwksServer {
	s := &jwksServer{}
	s.set(jwksOf(keys...), nil)
	return s
}

// apiServerKeys are the keys the API server verifies service-account tokens
// with, as its key getter returns them: by kid, and every key for a token
// without one. For a --service-account-key-file cluster each key's kid is
// derived from it (pkg/serviceaccount StaticPublicKeysGetter); an external
// signer names its keys, and the API server also holds those it excludes
// from discovery (pkg/serviceaccount/externaljwt/plugin keyCache).
type apiServerKeys []clusterKey

// verifies is the signature step of the API server's service-account
// authenticator (k8s.io/kubernetes v1.37.2 pkg/serviceaccount
// jwtTokenAuthenticator.AuthenticateToken): go-jose's jwt.ParseSigned, the
// first header's kid picks the keys (all of them without one), and the
// token passes when one of them verifies it (tok.Claims(key, ...)).
func (ks apiServerKeys) verifies(token string) bool {
	tok, err := josejwt.ParseSigned(token)
	if err != nil {
		return false
	}
	var kid string
	for _, h := range tok.Headers {
		if h.KeyID != "" {
			kid = h.KeyID
			break
		}
	}
	for _, k := range ks {
		if kid != "" && k.kid != kid {
			continue
		}
		var claims josejwt.Claims
		if tok.Claims(k.priv.Public(), &claims) == nil {
			return true
		}
	}
	return false
}

// respellings returns the other spellings of a compact JWT: the last
// base64url character of each part carries unused low bits (4 when the
// part's length is 2 mod 4, 2 when it is 3 mod 4), and every value of
// them decodes to the same bytes. go-jose, and so the API server, reads
// them all as the token itself.
func respellings(token string) []string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	parts := strings.Split(token, ".")
	variants := [3][]string{}
	for i, p := range parts {
		free := map[int]int{2: 4, 3: 2}[len(p)%4]
		last := strings.IndexByte(alphabet, p[len(p)-1])
		for v := range 1 << free {
			variants[i] = append(variants[i], p[:len(p)-1]+string(alphabet[last&^(1<<free-1)|v]))
		}
	}
	var out []string
	for _, h := range variants[0] {
		for _, c := range variants[1] {
			for _, s := range variants[2] {
				if t := h + "." + c + "." + s; t != token {
					out = append(out, t)
				}
			}
		}
	}
	return out
}

// x5cHeader returns a JOSE header with alg, kid and an x5c chain of n
// self-signed RSA 2048 certificates, about 1 KiB each (as an OIDC provider
// may send; go-jose parses the chain, the API server ignores it).
func x5cHeader(alg, kid string, n int) string {
	var chain []string
	for i := range n {
		key := testKeys().rsa.priv
		if i%2 == 1 {
			key = testKeys().rsa2.priv
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 1)), Subject: pkix.Name{CommonName: fmt.Sprintf("x5c test %d", i), Organization: []string{"idp.example"}},
			NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<32, 0), DNSNames: []string{"idp.example", "login.idp.example", "sts.idp.example"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			panic(err)
		}
		chain = append(chain, base64.StdEncoding.EncodeToString(der))
	}
	h := map[string]any{"alg": alg, "x5c": chain}
	if kid != "" {
		h["kid"] = kid
	}
	raw, err := json.Marshal(h)
	if err != nil {
		panic(err)
	}
	return string(raw)
}
