package suite_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// TestDRAProxyStolenToken is issue #28's proof that a compromised node
// stays one node, on kube-apiserver v1.37.2 with the Node authorizer and
// NodeRestriction, from examples/draproxy/deploy as users apply it: the
// token of draproxy's ServiceAccount that the kubelet mounts into
// draproxy's pod on node A, read as root on node A would read it, is used
// straight against the API server. Impersonating node B, a driver (with
// node B's extras or without), any user, system:masters, or node A with
// anything but its name; draproxy's own identity, with no impersonation;
// and node A itself (what the token is for) against node B's objects:
// creating, patching, deleting a slice of node B (one by one and by
// collection), writing or reading the status of a claim of a pod on node
// B, reading node B's pods, any secret, any pod list: all refused (403,
// from the Node authorizer, NodeRestriction, or RBAC of the impersonation
// itself). The same token reaches node A's slices (the control: the token
// works, and its power is node A's); a token of the same ServiceAccount
// bound to no pod cannot act as any node. Node B's slice and claim are
// unchanged at the end.
func TestDRAProxyStolenToken(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	m := deployDRAProxy(t, c)
	e := &draEnv{c: c, driver: cluster.UniqueName("gpu") + ".example.com"}
	e.nodeA, e.nodeB = c.CreateNode(t, cluster.UniqueName("node-a")), c.CreateNode(t, cluster.UniqueName("node-b"))
	nodeA, nodeB := e.nodeA.Name, e.nodeB.Name
	e.ns = cluster.UniqueName("dra-stolen")
	_, sa := deployDriver(t, c, e.ns, e.driver, "", false)
	e.sa = sa
	driverUser := serviceAccountUser(e.ns, sa)

	// What root on node A reads: draproxy's pod's projected token.
	pod := c.CreatePodFromTemplate(t, m, "DaemonSet", draProxyWorkload, cluster.PodOptions{NodeName: nodeA})
	ct := c.PrepareContainer(t, pod, pod.Spec.Containers[0].Name)
	raw, err := os.ReadFile(filepath.Join(ct.Volumes["/var/run/secrets/kubernetes.io/serviceaccount"], "token"))
	if err != nil {
		t.Fatal(err)
	}
	stolen := string(raw)
	unbound := c.RequestToken(t, pod.Namespace, pod.Spec.ServiceAccountName, cluster.TokenOptions{})

	// Node B's objects (and one slice of node A), the admin's.
	ctx := t.Context()
	admin := c.Clientset()
	sliceB, err := admin.ResourceV1().ResourceSlices().Create(ctx, e.slice("b-"+e.driver, nodeB, "dev"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ResourceV1().ResourceSlices().Create(ctx, e.slice("a-"+e.driver, nodeA, "dev"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	jobB := e.consumer(t, "job-b", nodeB, "claim-b")
	claimB := e.claim(t, "claim-b", jobB)
	if _, err := admin.CoreV1().Secrets(e.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "secret"}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	as := func(token string, imp rest.ImpersonationConfig) *kubernetes.Clientset {
		cfg := c.TokenConfig(token)
		cfg.ContentType = "application/json"
		cfg.QPS = -1
		cfg.Impersonate = imp
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	self := as(stolen, rest.ImpersonationConfig{})
	asA := as(stolen, rest.ImpersonationConfig{UserName: "system:node:" + nodeA})
	asB := as(stolen, rest.ImpersonationConfig{UserName: "system:node:" + nodeB})
	asDriverOnB := as(stolen, rest.ImpersonationConfig{UserName: driverUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + e.ns},
		Extra: map[string][]string{"authentication.kubernetes.io/node-name": {nodeB}, "authentication.kubernetes.io/pod-name": {"x"}, "authentication.kubernetes.io/pod-uid": {"x"}}})
	asDriver := as(stolen, rest.ImpersonationConfig{UserName: driverUser})
	asUser := as(stolen, rest.ImpersonationConfig{UserName: "alice"})
	asMasters := as(stolen, rest.ImpersonationConfig{UserName: "admin", Groups: []string{"system:masters"}})
	asAMasters := as(stolen, rest.ImpersonationConfig{UserName: "system:node:" + nodeA, Groups: []string{"system:masters"}})
	asAExtra := as(stolen, rest.ImpersonationConfig{UserName: "system:node:" + nodeA, Extra: map[string][]string{"authentication.kubernetes.io/node-name": {nodeB}}})
	unboundA := as(unbound, rest.ImpersonationConfig{UserName: "system:node:" + nodeA})

	onB := func(name string) *resourcev1.ResourceSlice { return e.slice(name, nodeB, "dev") }
	create := func(cs *kubernetes.Clientset, s *resourcev1.ResourceSlice) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := cs.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{})
			return err
		}
	}
	patchSlice := func(cs *kubernetes.Clientset, name string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := cs.ResourceV1().ResourceSlices().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"stolen":"yes"}}}`), metav1.PatchOptions{})
			return err
		}
	}
	listSlices := func(cs *kubernetes.Clientset, node string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
			return err
		}
	}
	devices, _ := json.Marshal(map[string]any{"status": map[string]any{"devices": []any{map[string]any{"driver": e.driver, "pool": "pool", "device": "gpu-0"}}}})
	attempts := []struct {
		name string
		do   func(context.Context) error
	}{
		{"impersonating node B: list node B's slices", listSlices(asB, nodeB)},
		{"impersonating node B: create a slice of node B", create(asB, onB(cluster.UniqueName("b")))},
		{"impersonating node B: get node B's claim", func(ctx context.Context) error {
			_, err := asB.ResourceV1().ResourceClaims(e.ns).Get(ctx, claimB.Name, metav1.GetOptions{})
			return err
		}},
		{"impersonating the driver on node B (its groups and node B's extras): create a slice of node B", create(asDriverOnB, onB(cluster.UniqueName("b")))},
		{"impersonating the driver on node B: patch the status of node B's claim", func(ctx context.Context) error {
			_, err := asDriverOnB.ResourceV1().ResourceClaims(e.ns).Patch(ctx, claimB.Name, types.MergePatchType, devices, metav1.PatchOptions{}, "status")
			return err
		}},
		{"impersonating the driver: create a slice of node B", create(asDriver, onB(cluster.UniqueName("b")))},
		{"impersonating the driver: list every slice", func(ctx context.Context) error {
			_, err := asDriver.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
			return err
		}},
		{"impersonating any user: list pods", func(ctx context.Context) error {
			_, err := asUser.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"impersonating system:masters: get a secret", func(ctx context.Context) error {
			_, err := asMasters.CoreV1().Secrets(e.ns).Get(ctx, "secret", metav1.GetOptions{})
			return err
		}},
		{"impersonating node A in system:masters: create a slice of node B", create(asAMasters, onB(cluster.UniqueName("b")))},
		{"impersonating node A with node B's extra: create a slice of node B", create(asAExtra, onB(cluster.UniqueName("b")))},
		{"as itself: create a slice of node B", create(self, onB(cluster.UniqueName("b")))},
		{"as itself: list every slice", func(ctx context.Context) error {
			_, err := self.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
			return err
		}},
		{"as itself: get node B's claim", func(ctx context.Context) error {
			_, err := self.ResourceV1().ResourceClaims(e.ns).Get(ctx, claimB.Name, metav1.GetOptions{})
			return err
		}},
		{"as itself: get node B's pod", func(ctx context.Context) error {
			_, err := self.CoreV1().Pods(e.ns).Get(ctx, jobB.Name, metav1.GetOptions{})
			return err
		}},
		{"as itself: get a secret", func(ctx context.Context) error {
			_, err := self.CoreV1().Secrets(e.ns).Get(ctx, "secret", metav1.GetOptions{})
			return err
		}},
		{"as node A: create a slice of node B", create(asA, onB(cluster.UniqueName("b")))},
		{"as node A: patch node B's slice", patchSlice(asA, sliceB.Name)},
		{"as node A: update node B's slice", func(ctx context.Context) error {
			s := sliceB.DeepCopy()
			s.Labels = map[string]string{"stolen": "yes"}
			_, err := asA.ResourceV1().ResourceSlices().Update(ctx, s, metav1.UpdateOptions{})
			return err
		}},
		{"as node A: apply node B's slice", func(ctx context.Context) error {
			body, _ := json.Marshal(map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": map[string]any{"name": sliceB.Name, "labels": map[string]any{"stolen": "yes"}}})
			_, err := asA.ResourceV1().ResourceSlices().Patch(ctx, sliceB.Name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "stolen", Force: ptr.To(true)})
			return err
		}},
		{"as node A: delete node B's slice", func(ctx context.Context) error {
			return asA.ResourceV1().ResourceSlices().Delete(ctx, sliceB.Name, metav1.DeleteOptions{})
		}},
		{"as node A: delete node B's slices by collection", func(ctx context.Context) error {
			return asA.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeB})
		}},
		{"as node A: list node B's slices", listSlices(asA, nodeB)},
		{"as node A: get node B's slice", func(ctx context.Context) error {
			_, err := asA.ResourceV1().ResourceSlices().Get(ctx, sliceB.Name, metav1.GetOptions{})
			return err
		}},
		{"as node A: get node B's claim", func(ctx context.Context) error {
			_, err := asA.ResourceV1().ResourceClaims(e.ns).Get(ctx, claimB.Name, metav1.GetOptions{})
			return err
		}},
		{"as node A: patch the status of node B's claim", func(ctx context.Context) error {
			_, err := asA.ResourceV1().ResourceClaims(e.ns).Patch(ctx, claimB.Name, types.MergePatchType, devices, metav1.PatchOptions{}, "status")
			return err
		}},
		{"as node A: update the status of node B's claim", func(ctx context.Context) error {
			cl := claimB.DeepCopy()
			cl.Status.Devices = []resourcev1.AllocatedDeviceStatus{{Driver: e.driver, Pool: "pool", Device: "gpu-0"}}
			_, err := asA.ResourceV1().ResourceClaims(e.ns).UpdateStatus(ctx, cl, metav1.UpdateOptions{})
			return err
		}},
		{"as node A: get node B's pod", func(ctx context.Context) error {
			_, err := asA.CoreV1().Pods(e.ns).Get(ctx, jobB.Name, metav1.GetOptions{})
			return err
		}},
		{"as node A: list node B's pods", func(ctx context.Context) error {
			_, err := asA.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeB})
			return err
		}},
		{"as node A: get a secret", func(ctx context.Context) error {
			_, err := asA.CoreV1().Secrets(e.ns).Get(ctx, "secret", metav1.GetOptions{})
			return err
		}},
		{"as node A: get node B", func(ctx context.Context) error {
			_, err := asA.CoreV1().Nodes().Get(ctx, nodeB, metav1.GetOptions{})
			return err
		}},
		{"bound to no pod, impersonating node A: list node A's slices", listSlices(unboundA, nodeA)},
	}
	for _, a := range attempts {
		ctx, cancel := ctxFor(t, callTimeout)
		err := a.do(ctx)
		cancel()
		t.Logf("observed: stolen token, %s: %d %v", a.name, code(err), err)
		if code(err) != http.StatusForbidden {
			t.Errorf("stolen token, %s = %v; want 403", a.name, err)
		}
	}

	// The control: the token is node A's, and works for node A's slices.
	if err := listSlices(asA, nodeA)(ctx); err != nil {
		t.Errorf("stolen token as node A: list node A's slices = %v; want its node's slices", err)
	}
	if _, err := asA.ResourceV1().ResourceSlices().Create(ctx, e.slice("", nodeA, "dev"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("stolen token as node A: create a slice of node A (dry run) = %v; want allowed", err)
	}

	// Nothing of node B changed.
	if s, err := admin.ResourceV1().ResourceSlices().Get(ctx, sliceB.Name, metav1.GetOptions{}); err != nil || s.ResourceVersion != sliceB.ResourceVersion {
		t.Errorf("node B's slice after the attempts: %v, %v; want it unchanged", s, err)
	}
	if l, err := admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeB}); err != nil || len(l.Items) != 1 {
		t.Errorf("node B's slices after the attempts: %v, %v; want its one slice", l, err)
	}
	if cl, err := admin.ResourceV1().ResourceClaims(e.ns).Get(ctx, claimB.Name, metav1.GetOptions{}); err != nil || cl.ResourceVersion != claimB.ResourceVersion {
		t.Errorf("node B's claim after the attempts: %v, %v; want it unchanged", cl, err)
	}
}
