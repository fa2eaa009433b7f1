package authtest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Extra keys a real kube-apiserver puts on service account identities.
const (
	extraPodName      = "authentication.kubernetes.io/pod-name"
	extraPodUID       = "authentication.kubernetes.io/pod-uid"
	extraNodeName     = "authentication.kubernetes.io/node-name"
	extraNodeUID      = "authentication.kubernetes.io/node-uid"
	extraCredentialID = "authentication.kubernetes.io/credential-id"
)

// issuer is the iss claim of minted tokens, the default of a real cluster.
const issuer = "https://kubernetes.default.svc.cluster.local"

type tokenEntry struct {
	user      *user.DefaultInfo
	audiences []string
	exp       time.Time
}

type saEntry struct {
	uid string
}

// AddToken registers token: a TokenReview of it authenticates as u when the
// reviewed audiences intersect audiences and the server's clock is before
// exp. Empty audiences mean the server's API audiences (see
// [WithAPIAudiences]), like a real token without an aud claim. A zero exp
// never expires. u is copied. Registering a token again replaces it and
// undoes [Server.RevokeToken]. AddToken panics if token is empty or u is
// nil.
func (s *Server) AddToken(token string, u user.Info, audiences []string, exp time.Time) {
	if token == "" {
		panic("authtest: AddToken with an empty token")
	}
	if u == nil {
		panic("authtest: AddToken with a nil user.Info")
	}
	e := &tokenEntry{user: copyUser(u), audiences: slices.Clone(audiences), exp: exp}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[token] = e
	delete(s.revoked, token)
}

// RevokeToken unregisters token. Reviews of it then fail with the message a
// real server gives for an invalidated service account token. Revoking an
// unknown token is a no-op.
func (s *Server) RevokeToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tokens[token]; ok {
		delete(s.tokens, token)
		s.revoked[token] = true
	}
}

// MintToken returns a new JWT-shaped token for u, registered as with
// [Server.AddToken]. Its payload carries iss, sub (the user name), aud
// (audiences, or the API audiences when empty), iat, nbf, exp (unless exp
// is zero), jti and, for a service account user name, the kubernetes.io
// claim with the namespace, service account and the pod and node named by
// u's extras. It is signed with ES256 under the server's signing key, whose
// public half the server serves at /openid/v1/jwks ([JWKS]).
func (s *Server) MintToken(u user.Info, audiences []string, exp time.Time) string {
	if u == nil {
		panic("authtest: MintToken with a nil user.Info")
	}
	auds := audiences
	if len(auds) == 0 {
		auds = s.apiAudiences
	}
	token := s.signer().sign(s.claims(u, auds, exp, string(uuid.NewUUID())))
	s.AddToken(token, u, audiences, exp)
	return token
}

func (s *Server) claims(u user.Info, auds []string, exp time.Time, jti string) map[string]any {
	now := s.now()
	c := map[string]any{
		"iss": issuer,
		"sub": u.GetName(),
		"aud": auds,
		"iat": now.Unix(),
		"nbf": now.Unix(),
		"jti": jti,
	}
	if !exp.IsZero() {
		c["exp"] = exp.Unix()
	}
	if ns, name, err := serviceaccount.SplitUsername(u.GetName()); err == nil {
		k := map[string]any{
			"namespace":      ns,
			"serviceaccount": map[string]string{"name": name, "uid": u.GetUID()},
		}
		extra := u.GetExtra()
		first := func(key string) string {
			if v := extra[key]; len(v) > 0 {
				return v[0]
			}
			return ""
		}
		if n := first(extraPodName); n != "" {
			k["pod"] = map[string]string{"name": n, "uid": first(extraPodUID)}
		}
		if n := first(extraNodeName); n != "" {
			k["node"] = map[string]string{"name": n, "uid": first(extraNodeUID)}
		}
		c["kubernetes.io"] = k
	}
	return c
}

// MintJWT returns a JWT-shaped token (base64url header.payload.signature)
// with claims as its payload and a random signature. It registers nothing:
// use it for well-formed tokens that a [Server] does not know. It panics if
// claims cannot be encoded as JSON.
func MintJWT(claims map[string]any) string {
	header := `{"alg":"RS256","kid":"authtest","typ":"JWT"}`
	if claims == nil {
		claims = map[string]any{}
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		panic("authtest: MintJWT: " + err.Error())
	}
	enc := base64.RawURLEncoding
	sig := make([]byte, 256) // the size of an RS256 signature
	copy(sig, randomString(192))
	return enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString(payload) + "." + enc.EncodeToString(sig)
}

// AddServiceAccount registers the service account namespace/name, so that
// TokenRequests for it succeed. Registering it again keeps its UID.
func (s *Server) AddServiceAccount(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := namespace + "/" + name
	if _, ok := s.serviceAccounts[key]; !ok {
		s.serviceAccounts[key] = saEntry{uid: string(uuid.NewUUID())}
	}
}

func copyUser(u user.Info) *user.DefaultInfo {
	c := &user.DefaultInfo{Name: u.GetName(), UID: u.GetUID(), Groups: slices.Clone(u.GetGroups())}
	if extra := u.GetExtra(); extra != nil {
		c.Extra = make(map[string][]string, len(extra))
		for k, v := range extra {
			c.Extra[k] = slices.Clone(v)
		}
	}
	return c
}

func userInfo(u *user.DefaultInfo) authenticationv1.UserInfo {
	ui := authenticationv1.UserInfo{Username: u.Name, UID: u.UID, Groups: slices.Clone(u.Groups)}
	if u.Extra != nil {
		ui.Extra = make(map[string]authenticationv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			ui.Extra[k] = slices.Clone(v)
		}
	}
	return ui
}

// intersect returns the elements of a that are in b, in a's order.
func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// review answers a TokenReview spec the way a real kube-apiserver does.
func (s *Server) review(spec authenticationv1.TokenReviewSpec) authenticationv1.TokenReviewStatus {
	reject := func(reason string) authenticationv1.TokenReviewStatus {
		return authenticationv1.TokenReviewStatus{Error: "[invalid bearer token, " + reason + "]"}
	}
	wanted := spec.Audiences
	if len(wanted) == 0 {
		wanted = s.apiAudiences
	}
	s.mu.Lock()
	e, revoked := s.tokens[spec.Token], s.revoked[spec.Token]
	s.mu.Unlock()
	if e == nil {
		if revoked {
			return reject("service account token has been invalidated")
		}
		return reject("token lookup failed")
	}
	tokenAuds := e.audiences
	if len(tokenAuds) == 0 {
		tokenAuds = s.apiAudiences
	}
	auds := intersect(tokenAuds, wanted)
	if len(auds) == 0 {
		return reject(fmt.Sprintf("token audiences %q is invalid for the target audiences %q", tokenAuds, wanted))
	}
	if !e.exp.IsZero() && !s.now().Before(e.exp) {
		return reject("service account token has expired")
	}
	return authenticationv1.TokenReviewStatus{Authenticated: true, User: userInfo(e.user), Audiences: auds}
}

func (s *Server) serveTokenReview(w http.ResponseWriter, r *http.Request) {
	var tr authenticationv1.TokenReview
	if !readBody(w, r, authenticationv1.SchemeGroupVersion.WithKind("TokenReview"), &tr) {
		return
	}
	s.mu.Lock()
	s.tokenReviews = append(s.tokenReviews, *tr.DeepCopy())
	s.mu.Unlock()
	if tr.Spec.Token == "" {
		writeStatus(w, statusOf(apierrors.NewBadRequest("token is required for TokenReview in authentication")))
		return
	}
	f, handled := s.intercept(w, r, TokenReviews)
	if handled {
		return
	}
	tr.TypeMeta = metav1.TypeMeta{Kind: "TokenReview", APIVersion: authenticationv1.SchemeGroupVersion.String()}
	respondAs(w, r, f, tr.TypeMeta, &tr, func() { tr.Status = s.review(tr.Spec) })
}

func (s *Server) serveTokenRequest(w http.ResponseWriter, r *http.Request, namespace, name string) {
	var treq authenticationv1.TokenRequest
	if !readBody(w, r, authenticationv1.SchemeGroupVersion.WithKind("TokenRequest"), &treq) {
		return
	}
	f, handled := s.intercept(w, r, TokenRequests)
	if handled {
		return
	}
	s.mu.Lock()
	sa, ok := s.serviceAccounts[namespace+"/"+name]
	s.mu.Unlock()
	if !ok {
		writeStatus(w, statusOf(apierrors.NewNotFound(schema.GroupResource{Resource: "serviceaccounts"}, name)))
		return
	}
	spec := &treq.Spec
	if spec.ExpirationSeconds == nil {
		spec.ExpirationSeconds = new(int64(3600))
	}
	var errs field.ErrorList
	if *spec.ExpirationSeconds < 600 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "expirationSeconds"), *spec.ExpirationSeconds, "may not specify a duration less than 10 minutes"))
	} else if *spec.ExpirationSeconds > 1<<32 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "expirationSeconds"), *spec.ExpirationSeconds, "may not specify a duration larger than 2^32 seconds"))
	}
	username := serviceaccount.MakeUsername(namespace, name)
	u := &user.DefaultInfo{
		Name:   username,
		UID:    sa.uid,
		Groups: []string{serviceaccount.AllServiceAccountsGroup, serviceaccount.MakeNamespaceGroupName(namespace), user.AllAuthenticated},
		Extra:  map[string][]string{},
	}
	if ref := spec.BoundObjectRef; ref != nil {
		uid := string(ref.UID)
		if uid == "" {
			uid = string(uuid.NewUUID())
		}
		switch ref.Kind {
		case "Pod":
			u.Extra[extraPodName] = []string{ref.Name}
			u.Extra[extraPodUID] = []string{uid}
		case "Node":
			u.Extra[extraNodeName] = []string{ref.Name}
			u.Extra[extraNodeUID] = []string{uid}
		case "Secret":
		default:
			errs = append(errs, field.NotSupported(field.NewPath("spec", "boundObjectRef", "kind"), ref.Kind, []string{"Pod", "Node", "Secret"}))
		}
	}
	if len(errs) > 0 {
		writeStatus(w, statusOf(apierrors.NewInvalid(authenticationv1.SchemeGroupVersion.WithKind("TokenRequest").GroupKind(), name, errs)))
		return
	}
	if len(spec.Audiences) == 0 {
		spec.Audiences = slices.Clone(s.apiAudiences)
	}
	jti := string(uuid.NewUUID())
	u.Extra[extraCredentialID] = []string{"JTI=" + jti}
	now := s.now()
	exp := now.Add(time.Duration(*spec.ExpirationSeconds) * time.Second)
	token := s.signer().sign(s.claims(u, spec.Audiences, exp, jti))
	s.AddToken(token, u, spec.Audiences, exp)

	treq.TypeMeta = metav1.TypeMeta{Kind: "TokenRequest", APIVersion: authenticationv1.SchemeGroupVersion.String()}
	treq.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: namespace, CreationTimestamp: metav1.NewTime(now)}
	respondAs(w, r, f, treq.TypeMeta, &treq, func() {
		treq.Status = authenticationv1.TokenRequestStatus{Token: token, ExpirationTimestamp: metav1.NewTime(exp)}
	})
}
