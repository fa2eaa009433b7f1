package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The helpers below take a testing.TB, call t.Helper and end the test with
// t.Fatalf on any error, each API call bounded by [CallTimeout] and by the
// test's context. Call them from the test goroutine only; from other
// goroutines use the context-taking forms ([Cluster.IssueToken],
// [Cluster.TokenReview], [Cluster.SubjectAccessReview]) or
// [Cluster.Clientset]. Created objects are not deleted: use unique names
// ([Cluster.UniqueNamespace], [UniqueName]) so tests sharing the cluster do
// not collide.

// CallTimeout bounds each API call made by a helper.
const CallTimeout = 30 * time.Second

// PauseImage is the container image of pods from [Cluster.CreatePod]. It is
// never pulled: the cluster has no kubelet and pods never run.
const PauseImage = "registry.k8s.io/pause:3.10"

func callCtx(t testing.TB) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), CallTimeout)
}

// UniqueName returns prefix followed by "-" and 8 random hex characters,
// for cluster-scoped objects such as Nodes and ClusterRoles.
func UniqueName(prefix string) string { return prefix + "-" + randomHex(4) }

// CreateNamespace creates the namespace name and, as kube-controller-manager
// would (it does not run here), its "default" ServiceAccount. Namespaces
// are never deleted: nothing would finalize them.
func (c *Cluster) CreateNamespace(t testing.TB, name string) *corev1.Namespace {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	ns, err := c.clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("cluster: create namespace %q: %v", name, err)
	}
	c.CreateServiceAccount(t, name, "default")
	return ns
}

// UniqueNamespace creates a namespace named prefix plus a random suffix
// (see [Cluster.CreateNamespace]) and returns its name.
func (c *Cluster) UniqueNamespace(t testing.TB, prefix string) string {
	t.Helper()
	name := UniqueName(prefix)
	c.CreateNamespace(t, name)
	return name
}

// CreateServiceAccount creates the ServiceAccount ns/name.
func (c *Cluster) CreateServiceAccount(t testing.TB, ns, name string) *corev1.ServiceAccount {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	sa, err := c.clientset.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("cluster: create service account %s/%s: %v", ns, name, err)
	}
	return sa
}

// DeleteServiceAccount deletes the ServiceAccount ns/name; its tokens stop
// validating.
func (c *Cluster) DeleteServiceAccount(t testing.TB, ns, name string) {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	if err := c.clientset.CoreV1().ServiceAccounts(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("cluster: delete service account %s/%s: %v", ns, name, err)
	}
}

// ServiceAccountSubject returns the RBAC subject for the ServiceAccount ns/name.
func ServiceAccountSubject(ns, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
}

// UserSubject returns the RBAC subject for a user, such as the CN of a
// client certificate from [Cluster.ClientCA].
func UserSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

// GroupSubject returns the RBAC subject for a group.
func GroupSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
}

// CreateRole creates the Role ns/name with rules.
func (c *Cluster) CreateRole(t testing.TB, ns, name string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	r, err := c.clientset.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("cluster: create role %s/%s: %v", ns, name, err)
	}
	return r
}

// CreateClusterRole creates the ClusterRole name with rules.
func (c *Cluster) CreateClusterRole(t testing.TB, name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	r, err := c.clientset.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("cluster: create cluster role %s: %v", name, err)
	}
	return r
}

// BindRole binds the Role ns/role to subjects with a RoleBinding of a
// generated name. RBAC applies it within milliseconds, not at once: see
// [Cluster.WaitForAccess].
func (c *Cluster) BindRole(t testing.TB, ns, role string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	t.Helper()
	return c.createRoleBinding(t, ns, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role}, subjects)
}

// BindClusterRole binds the ClusterRole clusterRole to subjects: in
// namespace ns with a RoleBinding, or cluster-wide with a
// ClusterRoleBinding when ns is "". The binding's name is generated. See
// [Cluster.WaitForAccess]. Built-in roles work too, for example
// "system:auth-delegator" (create tokenreviews and subjectaccessreviews).
func (c *Cluster) BindClusterRole(t testing.TB, ns, clusterRole string, subjects ...rbacv1.Subject) {
	t.Helper()
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole}
	if ns != "" {
		c.createRoleBinding(t, ns, ref, subjects)
		return
	}
	ctx, cancel := callCtx(t)
	defer cancel()
	b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: clusterRole + "-"}, RoleRef: ref, Subjects: subjects}
	if _, err := c.clientset.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatalf("cluster: bind cluster role %s: %v", clusterRole, err)
	}
}

func (c *Cluster) createRoleBinding(t testing.TB, ns string, ref rbacv1.RoleRef, subjects []rbacv1.Subject) *rbacv1.RoleBinding {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	b := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: ref.Name + "-"}, RoleRef: ref, Subjects: subjects}
	rb, err := c.clientset.RbacV1().RoleBindings(ns).Create(ctx, b, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("cluster: bind %s %s in %s: %v", ref.Kind, ref.Name, ns, err)
	}
	return rb
}

// SubjectAccessReview asks the API server whether spec is allowed, as the
// admin, and returns the status.
func (c *Cluster) SubjectAccessReview(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	r, err := c.clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return authorizationv1.SubjectAccessReviewStatus{}, fmt.Errorf("cluster: subject access review: %w", err)
	}
	return r.Status, nil
}

// WaitForAccess polls SubjectAccessReviews every 50ms until spec's
// decision is allowed (or, with allowed false, not allowed), for at most
// 10s; use it after creating or deleting bindings.
func (c *Cluster) WaitForAccess(t testing.TB, spec authorizationv1.SubjectAccessReviewSpec, allowed bool) {
	t.Helper()
	var last authorizationv1.SubjectAccessReviewStatus
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		st, err := c.SubjectAccessReview(ctx, spec)
		if err != nil {
			return false, err
		}
		last = st
		return st.Allowed == allowed, nil
	})
	if err != nil {
		t.Fatalf("cluster: wait for access allowed=%v for %+v: %v (last status %+v)", allowed, spec, err, last)
	}
}

// CreateNode creates the Node name. Nothing runs on it; it exists so
// node-bound and pod-bound tokens carry its name and UID.
func (c *Cluster) CreateNode(t testing.TB, name string) *corev1.Node {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	n, err := c.clientset.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("cluster: create node %s: %v", name, err)
	}
	return n
}

// DeleteNode deletes the Node name.
func (c *Cluster) DeleteNode(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	if err := c.clientset.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("cluster: delete node %s: %v", name, err)
	}
}

// PodOptions describes a pod made by [Cluster.CreatePod]. The zero value
// is an unscheduled pod of the "default" ServiceAccount.
type PodOptions struct {
	// NodeName is spec.nodeName: the pod counts as running there, and tokens
	// bound to it carry the node's name (and UID if the Node exists).
	NodeName string
	// ServiceAccount is spec.serviceAccountName; empty means "default". It
	// must exist (ServiceAccount admission checks it).
	ServiceAccount string
}

// CreatePod creates the pod ns/name with one container of [PauseImage]. It
// never runs: there is no kubelet.
func (c *Cluster) CreatePod(t testing.TB, ns, name string, o PodOptions) *corev1.Pod {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:           o.NodeName,
			ServiceAccountName: o.ServiceAccount,
			Containers:         []corev1.Container{{Name: "main", Image: PauseImage}},
		},
	}
	p, err := c.clientset.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("cluster: create pod %s/%s: %v", ns, name, err)
	}
	return p
}

// DeletePod deletes the pod ns/name at once (grace period 0: no kubelet
// would confirm a graceful deletion) and waits until it is gone. Tokens
// bound to it stop validating.
func (c *Cluster) DeletePod(t testing.TB, ns, name string) {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	pods := c.clientset.CoreV1().Pods(ns)
	if err := pods.Delete(ctx, name, *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatalf("cluster: delete pod %s/%s: %v", ns, name, err)
	}
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("cluster: wait for pod %s/%s to go: %v", ns, name, err)
	}
}

// TokenOptions describes a TokenRequest. The zero value asks for a token
// for the API server's own audiences with the server's default lifetime
// (one hour), bound to nothing but the ServiceAccount.
type TokenOptions struct {
	// Audiences is spec.audiences; empty means the API server's audiences.
	Audiences []string
	// ExpirationSeconds is spec.expirationSeconds (at least 600); 0 leaves
	// it to the server (3600).
	ExpirationSeconds int64
	// BoundPod binds the token to this pod (name and UID): it carries the
	// pod-name, pod-uid and, if the pod has spec.nodeName, node-name (and
	// node-uid) extras, and stops validating when the pod is deleted.
	BoundPod *corev1.Pod
	// BoundNode binds the token to this node directly (ignored with BoundPod).
	BoundNode *corev1.Node
}

// IssueToken runs a TokenRequest for the ServiceAccount ns/sa as the admin
// and returns the result; the token is in Status.Token. It is safe for
// concurrent use.
func (c *Cluster) IssueToken(ctx context.Context, ns, sa string, o TokenOptions) (*authenticationv1.TokenRequest, error) {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: o.Audiences}}
	if o.ExpirationSeconds != 0 {
		req.Spec.ExpirationSeconds = &o.ExpirationSeconds
	}
	switch {
	case o.BoundPod != nil:
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: o.BoundPod.Name, UID: o.BoundPod.UID}
	case o.BoundNode != nil:
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: o.BoundNode.Name, UID: o.BoundNode.UID}
	}
	tr, err := c.clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("cluster: token request for %s/%s: %w", ns, sa, err)
	}
	return tr, nil
}

// RequestToken is [Cluster.IssueToken] for tests: it returns the token.
func (c *Cluster) RequestToken(t testing.TB, ns, sa string, o TokenOptions) string {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	tr, err := c.IssueToken(ctx, ns, sa, o)
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// TokenReview asks the API server, as the admin, to review token for
// audiences (none: the server's own) and returns the status: the ground
// truth a reviewer gets. A rejected token is a status with Error set, not an
// error. It is safe for concurrent use.
func (c *Cluster) TokenReview(ctx context.Context, token string, audiences ...string) (authenticationv1.TokenReviewStatus, error) {
	r := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences}}
	out, err := c.clientset.AuthenticationV1().TokenReviews().Create(ctx, r, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.TokenReviewStatus{}, fmt.Errorf("cluster: token review: %w", err)
	}
	return out.Status, nil
}

// ReviewToken is [Cluster.TokenReview] for tests.
func (c *Cluster) ReviewToken(t testing.TB, token string, audiences ...string) authenticationv1.TokenReviewStatus {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	st, err := c.TokenReview(ctx, token, audiences...)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
