package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/httpauth"
)

// draproxy acts as its node. Every request it forwards for a driver, and
// every read it makes for its own checks, impersonates system:node:NODE
// through the API server's constrained impersonation (KEP-5284, beta and
// on by default since Kubernetes 1.36) in its associated-node mode: a
// ServiceAccount whose token is bound to a pod may impersonate the node
// that pod runs on, and only that node, with the verbs and resources its
// RBAC names (impersonate:associated-node on nodes,
// impersonate-on:associated-node:VERB on each resource). The API server
// sets every other field of the impersonated user (groups system:nodes
// and system:authenticated, no extras), so the Node authorizer and the
// NodeRestriction admission plugin, the code that holds a kubelet to its
// node, hold draproxy (and whoever steals its token) to the same node.
// draproxy holds no legacy impersonate verb.

// nodeUserPrefix is the user name prefix of nodes (user.NodesGroup's
// members): system:node:NAME.
const nodeUserPrefix = "system:node:"

// nodeImpersonation is draproxy's httpauth.IdentityHeaders: the forwarded
// request impersonates the node, whoever the authenticated driver is (the
// driver is named in the User-Agent, forwardedUserAgent, and in draproxy's
// log of every forwarded write). The middleware deletes every
// client-sent Impersonate-* header, in every spelling, and keeps their
// names out of the client's Connection header. Read-only after
// newNodeImpersonation; safe for concurrent use.
type nodeImpersonation struct {
	// user is the header value, system:node:NODE, shared: the transports
	// read header values and never write them.
	user []string
}

var _ httpauth.IdentityHeaders = nodeImpersonation{}

func newNodeImpersonation(node string) nodeImpersonation {
	return nodeImpersonation{user: []string{nodeUserPrefix + node}}
}

// name is the impersonated user, system:node:NODE.
func (n nodeImpersonation) name() string { return n.user[0] }

// Names returns the impersonation headers: Impersonate-User, -Uid, -Group
// and -Extra-*. Set writes the first only; the others are named so that
// no client can send them.
func (nodeImpersonation) Names() []string {
	return []string{transport.ImpersonateUserHeader, transport.ImpersonateUIDHeader, transport.ImpersonateGroupHeader,
		transport.ImpersonateUserExtraHeaderPrefix + "*"}
}

// Set sets Impersonate-User to the node on h. The associated-node mode
// takes a user name alone: a UID, a group or an extra would make the API
// server try the other modes, which draproxy's RBAC does not grant.
func (n nodeImpersonation) Set(h http.Header, _ user.Info) {
	h[transport.ImpersonateUserHeader] = n.user
}

// setOn sets the impersonation of the node on h (draproxy's own reads).
func (n nodeImpersonation) setOn(h http.Header) { n.Set(h, nil) }

// impersonating sends each forwarded request with draproxy's own
// credentials (base) as the node: a request without an authenticated
// driver, or whose impersonation is not exactly the node's, is never
// sent.
type impersonating struct {
	base http.RoundTripper
	node nodeImpersonation
}

func (t impersonating) RoundTrip(req *http.Request) (*http.Response, error) {
	u, ok := request.UserFrom(req.Context())
	if !ok || u == nil || u.GetName() == "" || !t.node.only(req.Header) {
		return nil, errors.New("draproxy: refusing to forward a request that does not impersonate this node alone, for an authenticated driver")
	}
	return t.base.RoundTrip(req)
}

// only reports whether h impersonates the node and nothing else.
func (n nodeImpersonation) only(h http.Header) bool {
	v := h[transport.ImpersonateUserHeader]
	if len(v) != 1 || v[0] != n.name() {
		return false
	}
	for k := range h {
		if k != transport.ImpersonateUserHeader && strings.HasPrefix(strings.ToLower(k), "impersonate-") {
			return false
		}
	}
	return true
}

// maxDriverUserAgent bounds the driver's own User-Agent in the forwarded
// one.
const maxDriverUserAgent = 256

// forwardedUserAgent is the User-Agent of a request forwarded for u: the
// API server records it in the audit event of the request (userAgent),
// whose user is draproxy's ServiceAccount and impersonatedUser the node,
// so that an auditor finds the driver there. draproxy's part comes first
// and the driver's own User-Agent (sent, at most maxDriverUserAgent
// bytes) after it, so that a driver cannot write what comes before:
//
//	draproxy/NODE (driver=system:serviceaccount:NS:SA; pod=NS/POD; pod-uid=UID) DRIVER-USER-AGENT
func forwardedUserAgent(node string, u user.Info, sent []string) string {
	name := u.GetName()
	pod, uid := extraValue(u, serviceaccount.PodNameKey), extraValue(u, serviceaccount.PodUIDKey)
	ns := serviceAccountNamespace(name)
	ua := ""
	if len(sent) > 0 {
		ua = sent[0]
		if len(ua) > maxDriverUserAgent {
			ua = ua[:maxDriverUserAgent]
		}
	}
	// One allocation: the exact length first.
	var b strings.Builder
	b.Grow(len("draproxy/ (driver=; pod=/; pod-uid=) ") + len(node) + len(name) + len(ns) + len(pod) + len(uid) + len(ua))
	b.WriteString("draproxy/")
	b.WriteString(node)
	b.WriteString(" (driver=")
	b.WriteString(name)
	if pod != "" {
		b.WriteString("; pod=")
		if ns != "" {
			b.WriteString(ns)
			b.WriteByte('/')
		}
		b.WriteString(pod)
	}
	if uid != "" {
		b.WriteString("; pod-uid=")
		b.WriteString(uid)
	}
	b.WriteByte(')')
	if ua != "" {
		b.WriteByte(' ')
		b.WriteString(ua)
	}
	return b.String()
}

// serviceAccountNamespace is the namespace of the ServiceAccount user
// name (system:serviceaccount:NAMESPACE:NAME), "" for another user, as
// serviceaccount.SplitUsername reads it (the same validations), without
// its allocations.
func serviceAccountNamespace(name string) string {
	rest, ok := strings.CutPrefix(name, serviceaccount.ServiceAccountUsernamePrefix)
	if !ok {
		return ""
	}
	ns, sa, ok := strings.Cut(rest, serviceaccount.ServiceAccountUsernameSeparator)
	if !ok || strings.Contains(sa, serviceaccount.ServiceAccountUsernameSeparator) ||
		len(apimachineryvalidation.ValidateNamespaceName(ns, false)) != 0 || len(apimachineryvalidation.ValidateServiceAccountName(sa, false)) != 0 {
		return ""
	}
	return ns
}

// ownUserAgent is the User-Agent of draproxy's own reads (as the node),
// which the audit log tells from forwarded requests by it.
func ownUserAgent(node string) []string {
	return []string{"draproxy/" + node + " (own check)"}
}

// extraValue is u's only value of the extra key, "" unless it has exactly
// one.
func extraValue(u user.Info, key string) string {
	if v := u.GetExtra()[key]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// mutation reports whether a request of verb writes.
func mutation(verb string) bool {
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// logMutation writes the one log line of a forwarded write: who asked
// (the driver's ServiceAccount and pod, from its token), what (verb,
// resource, name), the UID precondition draproxy added (none on a
// create), and the API server's status (0: no answer) and Audit-ID, the
// key of the request's event in the API server's audit log. No token, no
// body.
func (p *proxy) logMutation(ctx context.Context, u user.Info, a authorizer.Attributes, pl *plan, res *http.Response) {
	code, auditID := 0, ""
	if res != nil {
		code, auditID = res.StatusCode, res.Header.Get("Audit-Id")
	}
	pod := extraValue(u, serviceaccount.PodNameKey)
	if ns := serviceAccountNamespace(u.GetName()); ns != "" && pod != "" {
		pod = ns + "/" + pod
	}
	klog.FromContext(ctx).Info("draproxy: forwarded a write as the node",
		"driver", u.GetName(), "pod", pod, "podUID", extraValue(u, serviceaccount.PodUIDKey),
		"verb", a.GetVerb(), "resource", a.GetResource(), "subresource", a.GetSubresource(), "namespace", a.GetNamespace(), "name", a.GetName(),
		"uidPrecondition", pl.uid, "status", code, "auditID", auditID, "as", p.identity.name())
}

// errIdentity: draproxy's own credentials are not a token bound to a pod
// on --node-name, so the API server would not let it act as the node.
var errIdentity = errors.New("draproxy: its own credentials cannot act as this node")

// checkOwnIdentity checks the user the API server says draproxy's own
// credentials are (a SelfSubjectReview's answer): a ServiceAccount whose
// token is bound to a pod on node (the authentication.kubernetes.io/
// node-name extra, one value, node). The API server's associated-node
// impersonation lets it act as that node and no other; a token bound to
// no pod (a legacy Secret, a TokenRequest without a bound object) or to a
// pod elsewhere is refused at start, saying why.
func checkOwnIdentity(u user.Info, node string) error {
	if _, _, err := serviceaccount.SplitUsername(u.GetName()); err != nil {
		return fmt.Errorf("%w: it authenticates as %q, not as a ServiceAccount: give draproxy its pod's projected ServiceAccount token (kube-api-access), which the API server binds to the pod and its node", errIdentity, u.GetName())
	}
	nodes := u.GetExtra()[serviceaccount.NodeNameKey]
	switch {
	case len(nodes) == 0:
		return fmt.Errorf("%w: the token of %s carries no %s extra (it is bound to no pod on a node): give draproxy its pod's projected ServiceAccount token (kube-api-access), not a Secret or an unbound TokenRequest", errIdentity, u.GetName(), serviceaccount.NodeNameKey)
	case len(nodes) != 1 || nodes[0] != node:
		return fmt.Errorf("%w: the token of %s is bound to node %q, and --node-name is %q: draproxy acts as the node its pod runs on (the downward API's spec.nodeName)", errIdentity, u.GetName(), strings.Join(nodes, ","), node)
	}
	return nil
}

// nodeReads are what draproxy reads as the node for its own checks,
// beyond what it forwards: the pods a claim is reserved for.
var nodeReads = []rule{{group: "", resource: "pods", verbs: []string{"get"}}}

// errNodePermission: draproxy's RBAC does not let it act as its node for
// something it forwards or reads.
var errNodePermission = errors.New("draproxy: its RBAC does not let it act as its node")

// selfCheck asks the API server, with draproxy's own credentials (client,
// host), who they are (a SelfSubjectReview, checkOwnIdentity) and whether
// they may act as node for every request of rules and nodeReads (a
// SelfSubjectAccessReview for impersonate:associated-node on nodes, and
// one for impersonate-on:associated-node:VERB for each verb and resource).
// It returns an error matching errIdentity or errNodePermission that
// names what is wrong, or a *lookupError when the API server could not be
// asked.
func selfCheck(ctx context.Context, o *objects, node string, rules []rule) error {
	var ssr authenticationv1.SelfSubjectReview
	if err := o.create(ctx, "a SelfSubjectReview", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
		&authenticationv1.SelfSubjectReview{TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "SelfSubjectReview"}}, &ssr); err != nil {
		return err
	}
	ui := ssr.Status.UserInfo
	extra := map[string][]string{}
	for k, v := range ui.Extra {
		extra[k] = v
	}
	if err := checkOwnIdentity(&user.DefaultInfo{Name: ui.Username, UID: ui.UID, Groups: ui.Groups, Extra: extra}, node); err != nil {
		return err
	}
	checks := []authorizationv1.ResourceAttributes{{Verb: "impersonate:associated-node", Group: "authentication.k8s.io", Resource: "nodes", Name: "*"}}
	for _, r := range append(slices.Clone(rules), nodeReads...) {
		for _, v := range r.verbs {
			checks = append(checks, authorizationv1.ResourceAttributes{Verb: "impersonate-on:associated-node:" + v, Group: r.group, Resource: r.resource, Subresource: r.subresource})
		}
	}
	var missing []string
	for _, ra := range checks {
		var ssar authorizationv1.SelfSubjectAccessReview
		if err := o.create(ctx, "a SelfSubjectAccessReview", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
			&authorizationv1.SelfSubjectAccessReview{TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview"},
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra}}, &ssar); err != nil {
			return err
		}
		if !ssar.Status.Allowed {
			res := ra.Resource
			if ra.Group != "" {
				res += "." + ra.Group
			}
			if ra.Subresource != "" {
				res += "/" + ra.Subresource
			}
			missing = append(missing, ra.Verb+" on "+res)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s (as %s) may not %s; draproxy forwards those requests as the node (deploy/rbac.yaml grants them)", errNodePermission, ui.Username, nodeUserPrefix+node, strings.Join(missing, ", "))
	}
	return nil
}
