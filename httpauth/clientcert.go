package httpauth

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"math"
	"net/http"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/clock"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/internal/authgroup"
	"github.com/reviewauth/reviewauth/internal/cache"
)

// DefaultClientCertCacheSize is the number of verified certificate chains
// [NewClientCertAuthenticator] remembers when ClientCertOptions.CacheSize is
// zero.
const DefaultClientCertCacheSize = 1024

// ClientCertOptions configures [NewClientCertAuthenticator]. ClientCA is
// required; every other field has a safe zero value.
type ClientCertOptions struct {
	// ClientCA holds the certificate authorities that sign client
	// certificates. Required. It is read on every verification and must not
	// be modified afterwards. A verified chain stays cached until its
	// earliest expiry, so rotating away a CA means building a new
	// authenticator.
	ClientCA *x509.CertPool

	// UserConversion turns a verified chain into an identity. Nil means
	// k8s.io/apiserver's x509.CommonNameUserConversion: the subject's CN
	// is the user name, its O values are the groups, and the extra
	// "authentication.kubernetes.io/credential-id" is X509SHA256=<leaf
	// fingerprint>. A chain it reports no identity for (ok false, such as
	// an empty CN) is treated as no credential and is not cached. The
	// group system:authenticated is added to the identity it returns, as
	// the API server's authenticated-group adder adds it (see
	// [NewClientCertAuthenticator]).
	UserConversion x509request.UserConversion

	// CacheSize bounds the verification cache exactly; the least recently
	// used chain is dropped to make room (from 1024 entries, within one of
	// 32 shards, which keeps hits on different chains from contending).
	// It is the same bounded cache as authn's and authz's. Zero means
	// [DefaultClientCertCacheSize]; a negative value turns the cache off,
	// so that every request verifies its chain.
	CacheSize int

	// Clock is the time used to verify chains and to expire cache entries.
	// Nil means the real clock.
	Clock clock.PassiveClock
}

// NewClientCertAuthenticator returns an [authenticator.Request] for TLS
// client certificates: k8s.io/apiserver's x509 authenticator, verifying
// against ClientCA for client authentication, behind a cache of verified
// chains. The cache key is the SHA-256 of the whole presented chain (leaf
// and intermediates), so a hit is for exactly the bytes that were verified,
// and an entry is kept until the earliest NotAfter in the verified chain,
// root included. Only successful verifications are cached: a chain that fails
// is verified again each time it is presented. Concurrent misses on the same
// chain each verify it; there are no background goroutines.
//
// The identity is the API server's, the kubelet's and kube-rbac-proxy's for
// the same certificate: the conversion's, with the group
// system:authenticated appended unless the user is system:anonymous or
// already has system:authenticated or system:unauthenticated, exactly as
// k8s.io/apiserver's AuthenticatedGroupAdder does around their union of
// authenticators (the middleware of [New] does the same for any
// authenticator; here it is done once per verified chain, before caching).
//
// AuthenticateRequest returns (nil, false, nil) when the request has no
// client certificate, and an error matching [reviewauth.ErrUnauthenticated]
// when the certificate fails verification. The returned Response is shared
// between requests and must not be modified. The authenticator is safe for
// concurrent use.
func NewClientCertAuthenticator(opts ClientCertOptions) (authenticator.Request, error) {
	if opts.ClientCA == nil {
		return nil, errors.New("httpauth: ClientCertOptions.ClientCA is required")
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	conv := opts.UserConversion
	if conv == nil {
		conv = x509request.CommonNameUserConversion
	}
	size := opts.CacheSize
	if size == 0 {
		size = DefaultClientCertCacheSize
	}
	verify := x509request.DefaultVerifyOptions()
	verify.Roots = opts.ClientCA
	a := &certAuthenticator{clock: clk}
	if size > 0 {
		a.cache = cache.New[*authenticator.Response](cache.Options{MaxEntries: size, Clock: clk})
	}
	a.x509 = x509request.NewDynamic(func() (x509.VerifyOptions, bool) {
		o := verify
		o.CurrentTime = clk.Now()
		return o, true
	}, x509request.UserConversionFunc(func(chain []*x509.Certificate) (*authenticator.Response, bool, error) {
		resp, ok, err := conv.User(chain)
		if err != nil || !ok || resp == nil || resp.User == nil {
			return resp, ok, err
		}
		notAfter := chain[0].NotAfter
		for _, c := range chain[1:] {
			if c.NotAfter.Before(notAfter) {
				notAfter = c.NotAfter
			}
		}
		out := *resp
		out.User = &chainUser{Info: resp.User, notAfter: notAfter}
		return &out, true, nil
	}))
	return a, nil
}

// chainUser carries the expiry of the verified chain from the user
// conversion back to the cache; it never leaves this file.
type chainUser struct {
	user.Info
	notAfter time.Time
}

type certAuthenticator struct {
	x509  *x509request.Authenticator
	clock clock.PassiveClock
	// cache maps chainKey to the verified identity, until the chain's
	// earliest NotAfter; nil when caching is off.
	cache *cache.Cache[*authenticator.Response]
}

func (a *certAuthenticator) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, false, nil
	}
	var key cache.Key
	if a.cache != nil {
		key = chainKey(r.TLS.PeerCertificates)
		if resp, ok := a.cache.Get(key); ok {
			return resp, true, nil
		}
	}
	resp, ok, err := a.x509.AuthenticateRequest(r)
	if err != nil {
		return nil, false, &reviewauth.RejectedError{Reason: "client certificate: " + err.Error()}
	}
	if !ok || resp == nil {
		return nil, false, nil
	}
	cu, isChain := resp.User.(*chainUser)
	if !isChain {
		// Cannot happen with our conversion; fail closed.
		return nil, false, &reviewauth.RejectedError{Reason: "client certificate: no verified chain"}
	}
	out := &authenticator.Response{User: authgroup.Add(cu.Info), Audiences: resp.Audiences}
	if a.cache != nil {
		a.cache.Set(key, out, chainTTL(cu.notAfter, a.clock.Now()))
	}
	return out, true, nil
}

// chainTTL is how long a chain verified at now stays cached: until 1ns
// after its earliest NotAfter, since x509 accepts a certificate at exactly
// its NotAfter, and so does the cache. A chain that expires before now
// (verified with a clock that moved on) gets a negative TTL and is not
// stored. The arithmetic saturates: time.Time.Sub caps at the largest
// Duration (about 292 years), so a chain that "never expires" (RFC 5280's
// 99991231235959Z) is cached for that long, and adding the 1ns there would
// wrap around to the most negative Duration, which is not cached at all.
func chainTTL(notAfter, now time.Time) time.Duration {
	ttl := notAfter.Sub(now)
	if ttl == math.MaxInt64 {
		return ttl
	}
	return ttl + time.Nanosecond
}

// chainKey is the SHA-256 over the length-prefixed DER of every presented
// certificate, so that different chains cannot collide by concatenation.
func chainKey(certs []*x509.Certificate) cache.Key {
	h := sha256.New()
	var n [4]byte
	for _, c := range certs {
		binary.BigEndian.PutUint32(n[:], uint32(len(c.Raw)))
		h.Write(n[:])
		h.Write(c.Raw)
	}
	var key cache.Key
	h.Sum(key[:0])
	return key
}
