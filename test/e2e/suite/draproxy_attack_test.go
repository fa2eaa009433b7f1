package suite_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// attacker is a hostile DRA driver: raw writes of ResourceSlices, through
// draproxy or straight to the API server, as its REST client sends them.
type attacker struct {
	rc      rest.Interface
	name    string
	driver  string // the driver name it writes (its own, or another's)
	nodeA   string
	nodeB   string
	applyBy string // its field manager
}

func (a *attacker) do(ctx context.Context, r *rest.Request) error {
	return r.Do(ctx).Error()
}

// sliceJSON is a whole ResourceSlice of a's driver: bound by nodeName
// (when node is not empty) and by the extra fields in spec. Its pool is
// pool-NODE (pool-all without a node), as draEnv.slice names them, so
// that a write to an existing slice of node is valid but for what binds
// it, and only the checks under test can refuse it.
func (a *attacker) sliceJSON(name, node string, spec map[string]any) []byte {
	pool := "pool-" + node
	if node == "" {
		pool = "pool-all"
	}
	s := map[string]any{"driver": a.driver, "pool": map[string]any{"name": pool, "resourceSliceCount": 1}, "devices": []any{map[string]any{"name": "dev"}}}
	if node != "" {
		s["nodeName"] = node
	}
	for k, v := range spec {
		s[k] = v
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
		"metadata": map[string]any{"name": name, "labels": map[string]string{"attack": "true"}}, "spec": s})
	return b
}

func (a *attacker) create(ctx context.Context, body []byte) error {
	return a.do(ctx, a.rc.Post().Resource("resourceslices").SetHeader("Content-Type", "application/json").Body(body))
}

func (a *attacker) update(ctx context.Context, name string, body []byte) error {
	return a.do(ctx, a.rc.Put().Resource("resourceslices").Name(name).SetHeader("Content-Type", "application/json").Body(body))
}

func (a *attacker) patch(ctx context.Context, pt types.PatchType, name string, body []byte) error {
	r := a.rc.Patch(pt).Resource("resourceslices").Name(name).Body(body)
	if pt == types.ApplyYAMLPatchType {
		r = r.Param("fieldManager", a.applyBy).Param("force", "true")
	}
	return a.do(ctx, r)
}

func (a *attacker) get(ctx context.Context, name string) error {
	return a.do(ctx, a.rc.Get().Resource("resourceslices").Name(name))
}

func (a *attacker) delete(ctx context.Context, name string) error {
	return a.do(ctx, a.rc.Delete().Resource("resourceslices").Name(name).SetHeader("Content-Type", "application/json").Body([]byte(`{"kind":"DeleteOptions","apiVersion":"v1"}`)))
}

func (a *attacker) deleteCollection(ctx context.Context, fieldSelector, labelSelector string) error {
	return a.do(ctx, a.rc.Delete().Resource("resourceslices").Param("fieldSelector", fieldSelector).Param("labelSelector", labelSelector))
}

// code is the HTTP status of err (0 for none, -1 for not a Status).
func code(err error) int {
	var se apierrors.APIStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &se):
		return int(se.Status().Code)
	}
	return -1
}

// TestDRAProxyAdversarial is the attack of issue #20, and every variant we
// know of it, run by a hostile DRA driver of node A against
// kube-apiserver v1.37.2 while the upstream ResourceSlice controller
// (k8s.io/dynamic-resource-allocation v0.37.2) keeps publishing node A's
// slices through draproxy. Each layer must hold on its own:
//
//   - draproxy alone: the driver identities are in no parameter of the
//     admission policy (the API server confines nothing of theirs), the
//     driver talks to draproxy (--require-admission-policy=false);
//   - the admission policy alone: the identities are listed, and the
//     driver bypasses draproxy with its pod-bound API token;
//   - both: listed, through draproxy.
//
// The attacks: the stale-name sequences (a slice of node A, read, then
// deleted by a deletecollection through the driver's own path, or by
// another actor, or deleted and re-created on node B; then written again
// by name with apply, merge, strategic and JSON patches, updates and
// deletes), writes that move a slice of node A to node B or to all nodes
// or create one there, slices of another identity's driver name, and a
// second driver identity on node A writing under the first one's driver
// name. After each, the admin reads the API server's state: node B's
// slices unchanged, nothing off node A. The controller publishes
// throughout, and its slices are as it wants them at the end.
func TestDRAProxyAdversarial(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	for _, layer := range []struct {
		name     string
		noPolicy bool
		direct   bool
	}{
		{name: "draproxy alone", noPolicy: true},
		{name: "admission policy alone", direct: true},
		{name: "draproxy and the admission policy"},
	} {
		t.Run(layer.name, func(t *testing.T) {
			t.Parallel()
			e := setupDRA(t, c, draOptions{noPolicy: layer.noPolicy})
			attackLayer(t, e, layer.direct)
		})
	}
}

func attackLayer(t *testing.T, e *draEnv, direct bool) {
	ctx := t.Context()
	admin := e.c.Clientset().ResourceV1().ResourceSlices()
	nodeA, nodeB := e.nodeA.Name, e.nodeB.Name

	// The upstream controller, as the driver's kubelet plugin runs it,
	// through draproxy.
	tokA := e.token(t, e.podA)
	var errMu sync.Mutex
	var handlerErrs []string
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	devices := func(names ...string) *resourceslice.DriverResources {
		var s resourceslice.Slice
		for _, d := range names {
			s.Devices = append(s.Devices, resourcev1.Device{Name: d})
		}
		return &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{"pool": {Slices: []resourceslice.Slice{s}}}}
	}
	ctrl, err := resourceslice.StartController(cctx, resourceslice.Options{
		DriverName: e.driver,
		KubeClient: e.client(t, tokA),
		Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: nodeA},
		Resources:  devices("gpu-0", "gpu-1"),
		ErrorHandler: func(_ context.Context, err error, msg string) {
			errMu.Lock()
			defer errMu.Unlock()
			handlerErrs = append(handlerErrs, msg+": "+err.Error())
		},
	})
	if err != nil {
		t.Fatalf("StartController through draproxy: %v", err)
	}
	defer ctrl.Stop()
	controllerSlices := func(ctx context.Context) ([]resourcev1.ResourceSlice, error) {
		l, err := admin.List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + e.driver + ",spec.nodeName=" + nodeA})
		if err != nil {
			return nil, err
		}
		var own []resourcev1.ResourceSlice
		for _, s := range l.Items {
			if s.Labels["attack"] == "" {
				own = append(own, s)
			}
		}
		return own, nil
	}
	waitPublished := func(step string, want ...string) {
		t.Helper()
		var got []string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			own, err := controllerSlices(ctx)
			if err != nil {
				return false, err
			}
			got = nil
			for _, s := range own {
				for _, d := range s.Spec.Devices {
					got = append(got, d.Name)
				}
			}
			slices.Sort(got)
			return slices.Equal(got, want), nil
		})
		if err != nil {
			t.Fatalf("%s: the controller's slices hold %v; want %v", step, got, want)
		}
	}
	waitPublished("published", "gpu-0", "gpu-1")

	// Node B's slices, the admin's: they must never change.
	for _, name := range []string{"b-1", "b-2"} {
		s := e.slice(name+"-"+e.driver, nodeB, "dev")
		if _, err := admin.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("admin: create %s: %v", s.Name, err)
		}
	}
	snapshot := func() map[string]string { // name -> resourceVersion, of every slice not node A's
		t.Helper()
		out := map[string]string{}
		for _, d := range []string{e.driver, e.driver2} {
			l, err := admin.List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + d})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range l.Items {
				if s.Spec.NodeName == nil || *s.Spec.NodeName != nodeA {
					out[s.Name] = s.ResourceVersion
				}
			}
		}
		return out
	}
	offA := snapshot()

	// The hostile driver: its own identity on node A, and the second
	// identity on node A.
	mkAttacker := func(pod *corev1.Pod, sa, driver string) *attacker {
		var cfg *rest.Config
		if direct {
			cfg = e.c.TokenConfig(e.c.RequestToken(t, e.ns, sa, cluster.TokenOptions{BoundPod: pod}))
		} else {
			cfg = e.socketConfig(e.token(t, pod)) // pod's ServiceAccount is sa
		}
		cfg.ContentType = "application/json"
		cfg.QPS = -1
		cfg.GroupVersion = &resourcev1.SchemeGroupVersion
		cfg.APIPath = "/apis"
		cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
		rc, err := rest.RESTClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return &attacker{rc: rc, name: sa, driver: driver, nodeA: nodeA, nodeB: nodeB, applyBy: "hostile"}
	}
	a := mkAttacker(e.podA, e.sa, e.driver)
	a2 := mkAttacker(e.pod2A, e.sa2, e.driver2)

	// check reads the state as the admin after an attack: node B's slices
	// (and every slice not of node A) exactly as before.
	check := func(attack string) {
		t.Helper()
		if now := snapshot(); !mapsEqual(now, offA) {
			t.Errorf("after %s: the slices off node A are %v; want %v, unchanged", attack, now, offA)
		}
	}
	// mustFail runs one hostile write: it must be refused.
	mustFail := func(attack string, err error) {
		t.Helper()
		t.Logf("observed: %s: %d %v", attack, code(err), err)
		if err == nil {
			t.Errorf("%s succeeded; want it refused", attack)
		}
		check(attack)
	}
	mustDo := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s (a legitimate write) = %v", step, err)
		}
		check(step)
	}
	applyYAML := func(name, node string, extra string) []byte {
		pool := "pool-" + node
		if node == "" {
			pool = "pool-all"
		}
		y := "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata:\n  name: " + name + "\n  labels: {attack: \"true\"}\nspec:\n  driver: " + a.driver + "\n  pool: {name: " + pool + ", resourceSliceCount: 1}\n"
		if node != "" {
			y += "  nodeName: " + node + "\n"
		}
		return []byte(y + extra)
	}
	// every is each way of writing an existing name toward node B.
	every := func(who *attacker, name string) {
		t.Helper()
		mustFail(who.name+": merge patch of "+name, who.patch(ctx, types.MergePatchType, name, []byte(`{"metadata":{"labels":{"stolen":"yes"}}}`)))
		mustFail(who.name+": strategic merge patch of "+name, who.patch(ctx, types.StrategicMergePatchType, name, []byte(`{"metadata":{"labels":{"stolen":"yes"}}}`)))
		mustFail(who.name+": JSON patch of "+name, who.patch(ctx, types.JSONPatchType, name, []byte(`[{"op":"add","path":"/metadata/labels","value":{"stolen":"yes"}}]`)))
		mustFail(who.name+": update of "+name+" as node A's", who.update(ctx, name, who.sliceJSON(name, nodeA, nil)))
		mustFail(who.name+": update of "+name+" as node B's", who.update(ctx, name, who.sliceJSON(name, nodeB, nil)))
		mustFail(who.name+": apply of "+name+" as node B's", who.patch(ctx, types.ApplyYAMLPatchType, name, applyYAML(name, nodeB, "")))
		mustFail(who.name+": delete of "+name, who.delete(ctx, name))
		if !direct { // admission cannot confine reads: only draproxy does
			mustFail(who.name+": get of "+name, who.get(ctx, name))
		}
	}

	// 1. The stale-name sequences.
	for _, seq := range []struct {
		name string
		gone func(name string)
		// recreated: the name then belongs to a slice of node B.
		recreated bool
	}{
		{name: "deletecollection through the driver's own path", gone: func(name string) {
			mustDo("deletecollection of node A's "+name, a.deleteCollection(ctx, "spec.nodeName="+nodeA+",spec.driver="+a.driver, "attack=true"))
		}},
		{name: "deleted by another actor", gone: func(name string) {
			if err := admin.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "deleted and re-created on node B", recreated: true, gone: func(name string) {
			if err := admin.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			s := e.slice(name, nodeB, "dev")
			if _, err := admin.Create(ctx, s, metav1.CreateOptions{}); err != nil {
				t.Fatalf("admin: re-create %s on node B: %v", name, err)
			}
		}},
	} {
		name := cluster.UniqueName("stale")
		mustDo("create "+name+" on node A", a.create(ctx, a.sliceJSON(name, nodeA, nil)))
		if !direct {
			mustDo("get "+name, a.get(ctx, name))
		}
		seq.gone(name)
		offA = snapshot() // the re-created slice of node B is now one of node B's
		mustFail(seq.name+": apply of "+name+" as node B's", a.patch(ctx, types.ApplyYAMLPatchType, name, applyYAML(name, nodeB, "")))
		mustFail(seq.name+": apply of "+name+" for all nodes", a.patch(ctx, types.ApplyYAMLPatchType, name, applyYAML(name, "", "  allNodes: true\n")))
		if seq.recreated {
			every(a, name)
			mustFail(seq.name+": apply of "+name+" as node A's", a.patch(ctx, types.ApplyYAMLPatchType, name, applyYAML(name, nodeA, "")))
		} else {
			mustFail(seq.name+": merge patch of "+name, a.patch(ctx, types.MergePatchType, name, []byte(`{"spec":{"nodeName":"`+nodeB+`"}}`)))
			mustFail(seq.name+": update of "+name+" as node B's", a.update(ctx, name, a.sliceJSON(name, nodeB, nil)))
		}
	}

	// 2. Moving a slice of node A, or creating one, off node A.
	own := cluster.UniqueName("own")
	mustDo("create "+own+" on node A", a.create(ctx, a.sliceJSON(own, nodeA, nil)))
	for _, w := range []struct {
		name string
		err  func() error
	}{
		{"merge patch to node B", func() error {
			return a.patch(ctx, types.MergePatchType, own, []byte(`{"spec":{"nodeName":"`+nodeB+`"}}`))
		}},
		{"merge patch to all nodes", func() error {
			return a.patch(ctx, types.MergePatchType, own, []byte(`{"spec":{"nodeName":null,"allNodes":true}}`))
		}},
		{"strategic merge patch to node B", func() error {
			return a.patch(ctx, types.StrategicMergePatchType, own, []byte(`{"spec":{"nodeName":"`+nodeB+`"}}`))
		}},
		{"strategic merge patch replacing spec", func() error {
			return a.patch(ctx, types.StrategicMergePatchType, own, []byte(`{"spec":{"$patch":"replace","driver":"`+a.driver+`","allNodes":true,"pool":{"name":"p","resourceSliceCount":1}}}`))
		}},
		{"JSON patch to node B", func() error {
			return a.patch(ctx, types.JSONPatchType, own, []byte(`[{"op":"replace","path":"/spec/nodeName","value":"`+nodeB+`"}]`))
		}},
		{"JSON patch to all nodes", func() error {
			return a.patch(ctx, types.JSONPatchType, own, []byte(`[{"op":"remove","path":"/spec/nodeName"},{"op":"add","path":"/spec/allNodes","value":true}]`))
		}},
		{"update to node B", func() error { return a.update(ctx, own, a.sliceJSON(own, nodeB, nil)) }},
		{"update to all nodes", func() error { return a.update(ctx, own, a.sliceJSON(own, "", map[string]any{"allNodes": true})) }},
		{"apply to node B", func() error { return a.patch(ctx, types.ApplyYAMLPatchType, own, applyYAML(own, nodeB, "")) }},
		{"apply to all nodes", func() error {
			return a.patch(ctx, types.ApplyYAMLPatchType, own, applyYAML(own, "", "  allNodes: true\n"))
		}},
		{"apply with nodeName said twice", func() error {
			return a.patch(ctx, types.ApplyYAMLPatchType, own, applyYAML(own, nodeA, "  nodeName: "+nodeB+"\n"))
		}},
		{"create on node B", func() error { return a.create(ctx, a.sliceJSON(cluster.UniqueName("b"), nodeB, nil)) }},
		{"create for all nodes", func() error {
			return a.create(ctx, a.sliceJSON(cluster.UniqueName("all"), "", map[string]any{"allNodes": true}))
		}},
		{"create by node selector", func() error {
			return a.create(ctx, a.sliceJSON(cluster.UniqueName("sel"), "", map[string]any{"nodeSelector": map[string]any{"nodeSelectorTerms": []any{map[string]any{"matchFields": []any{map[string]any{"key": "metadata.name", "operator": "In", "values": []any{nodeB}}}}}}}))
		}},
		{"create per-device", func() error {
			return a.create(ctx, a.sliceJSON(cluster.UniqueName("dev"), "", map[string]any{"perDeviceNodeSelection": true, "devices": []any{map[string]any{"name": "d", "nodeName": nodeB}}}))
		}},
		{"create on node A and by selector", func() error {
			return a.create(ctx, a.sliceJSON(cluster.UniqueName("both"), nodeA, map[string]any{"allNodes": true}))
		}},
		{"apply of a new name on node B", func() error {
			n := cluster.UniqueName("new")
			return a.patch(ctx, types.ApplyYAMLPatchType, n, applyYAML(n, nodeB, ""))
		}},
		{"apply of a new name for all nodes", func() error {
			n := cluster.UniqueName("new")
			return a.patch(ctx, types.ApplyYAMLPatchType, n, applyYAML(n, "", "  allNodes: true\n"))
		}},
	} {
		mustFail(w.name, w.err())
	}
	if s, err := admin.Get(ctx, own, metav1.GetOptions{}); err != nil || s.Spec.NodeName == nil || *s.Spec.NodeName != nodeA || s.Spec.AllNodes != nil {
		t.Errorf("%s after the attempts: %v, %v; want it still node A's", own, s, err)
	}

	// 3. Driver names: the first identity may not publish the second's,
	// and the second may not touch the first's, not even the slices the
	// controller publishes under the first's name.
	stranger := &attacker{rc: a.rc, name: "driver (as driver2's driver)", driver: e.driver2, nodeA: nodeA, nodeB: nodeB, applyBy: "hostile"}
	mustFail("create of another identity's driver", stranger.create(ctx, stranger.sliceJSON(cluster.UniqueName("d2"), nodeA, nil)))
	impostor := &attacker{rc: a2.rc, name: "driver2 (as driver's driver)", driver: e.driver, nodeA: nodeA, nodeB: nodeB, applyBy: "hostile"}
	mustFail("create under the first identity's driver by the second", impostor.create(ctx, impostor.sliceJSON(cluster.UniqueName("d1"), nodeA, nil)))
	ctrlSlices, err := controllerSlices(ctx)
	if err != nil || len(ctrlSlices) == 0 {
		t.Fatalf("the controller's slices: %v, %v", ctrlSlices, err)
	}
	before := map[string]string{}
	for _, s := range ctrlSlices {
		before[s.Name] = s.ResourceVersion
	}
	for _, s := range ctrlSlices {
		// As the controller writes them (its pool, its owner), but for the
		// label: valid, so that only the checks under test can refuse it.
		s.Labels = map[string]string{"stolen": "yes"}
		theirs, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		mustFail("driver2: merge patch of the controller's "+s.Name, impostor.patch(ctx, types.MergePatchType, s.Name, []byte(`{"metadata":{"labels":{"stolen":"yes"}}}`)))
		mustFail("driver2: update of the controller's "+s.Name, impostor.update(ctx, s.Name, theirs))
		mustFail("driver2: apply of the controller's "+s.Name, impostor.patch(ctx, types.ApplyYAMLPatchType, s.Name, []byte(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"`+s.Name+`","labels":{"stolen":"yes"}},"spec":{"driver":"`+e.driver+`","nodeName":"`+nodeA+`"}}`)))
		mustFail("driver2: delete of the controller's "+s.Name, impostor.delete(ctx, s.Name))
	}
	mustFail("driver2: deletecollection of the first identity's driver", impostor.deleteCollection(ctx, "spec.nodeName="+nodeA+",spec.driver="+e.driver, ""))
	after := map[string]string{}
	if now, err := controllerSlices(ctx); err == nil {
		for _, s := range now {
			after[s.Name] = s.ResourceVersion
		}
	}
	if !mapsEqual(before, after) {
		t.Errorf("the controller's slices changed under driver2's writes: %v -> %v", before, after)
	}

	// 4. The controller kept publishing through it all, and still does.
	ctrl.Update(devices("gpu-0", "gpu-1", "gpu-2"))
	waitPublished("after the attacks", "gpu-0", "gpu-1", "gpu-2")
	errMu.Lock()
	defer errMu.Unlock()
	for _, msg := range handlerErrs {
		if strings.Contains(msg, "forbidden") || strings.Contains(msg, "Unsupported Media Type") || strings.Contains(msg, "unavailable") {
			t.Errorf("controller error through draproxy: %s", msg)
		}
	}
	t.Logf("observed: controller stats %+v; error handler %q", ctrl.GetStats(), handlerErrs)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestDRAProxyPolicyScope: the second mode (a driver writing with its own
// pod-bound token), against the admission policy of one driver part,
// applied as users apply it with an exemption (central). The policy
// confines every ServiceAccount of the driver's namespace: the driver to
// its node and its driver names; a sibling ServiceAccount bound to the
// driver's ClusterRole to its node and away from the driver's names
// (issue #28: it created a node-B and an allNodes slice); and no one else:
// the exempt central controller of the namespace and a central controller
// elsewhere publish allNodes slices and slices of other nodes. Then each
// tampering of issue #28, by a user with the built-in edit role in
// draproxy's namespace and the driver's (what broke the policy's
// ConfigMap parameters): deleting or changing the policy or its binding
// (refused: cluster-scoped), and the parameters' ConfigMaps with their
// label removed, a trailing space, no data, an extra driver name, one
// deleted (allowed, and meaningless: the policy takes no parameter). After
// each, the writes are confined exactly as before: the driver still
// cannot leave its node or take another's name, the sibling still cannot,
// and nothing outside the drivers is refused.
func TestDRAProxyPolicyScope(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	proxy := deployDRAProxy(t, c)
	e := &draEnv{c: c, driver: cluster.UniqueName("gpu") + ".example.com"}
	e.nodeA, e.nodeB = c.CreateNode(t, cluster.UniqueName("node-a")), c.CreateNode(t, cluster.UniqueName("node-b"))
	e.ns = cluster.UniqueName("dra-policy")
	drv, sa := deployDriver(t, c, e.ns, e.driver, "central", true)
	e.sa = sa
	e.podA = c.CreatePodFromTemplate(t, drv, "DaemonSet", driverWorkload, cluster.PodOptions{NodeName: e.nodeA.Name})
	e.waitPolicy(t, sa, e.podA, e.driver)
	elsewhere := c.UniqueNamespace(t, "central")
	role := drv.Name("gpu-driver-kubelet-plugin") // the driver's ClusterRole
	tokenOf := func(ns, name string) string {
		c.CreateServiceAccount(t, ns, name)
		c.BindClusterRole(t, "", role, cluster.ServiceAccountSubject(ns, name))
		c.WaitForAccess(t, authorizationv1.SubjectAccessReviewSpec{User: serviceAccountUser(ns, name), ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: "create", Group: "resource.k8s.io", Resource: "resourceslices"}}, true)
		pod := c.CreatePod(t, ns, name, cluster.PodOptions{NodeName: e.nodeA.Name, ServiceAccount: name})
		return c.RequestToken(t, ns, name, cluster.TokenOptions{BoundPod: pod})
	}
	driver := e.direct(t, c.RequestToken(t, e.ns, sa, cluster.TokenOptions{BoundPod: e.podA}))
	sibling := e.direct(t, tokenOf(e.ns, "sibling"))
	central := e.direct(t, tokenOf(e.ns, "central"))
	centralElsewhere := e.direct(t, tokenOf(elsewhere, "central"))

	slice := func(node, driverName string) *resourcev1.ResourceSlice {
		s := e.slice(cluster.UniqueName("p"), node, "dev")
		s.Spec.Driver = driverName
		if node == "" {
			s.Spec.NodeName, s.Spec.AllNodes, s.Spec.Pool.Name = nil, ptr.To(true), "pool-all"
		}
		return s
	}
	other := "other-" + e.driver
	nodeA, nodeB := e.nodeA.Name, e.nodeB.Name
	writes := []struct {
		who     string
		cs      *kubernetes.Clientset
		s       *resourcev1.ResourceSlice
		allowed bool
	}{
		{"the driver, its node and name", driver, slice(nodeA, e.driver), true},
		{"the driver, node B", driver, slice(nodeB, e.driver), false},
		{"the driver, all nodes", driver, slice("", e.driver), false},
		{"the driver, another driver's name", driver, slice(nodeA, other), false},
		{"the sibling, node B", sibling, slice(nodeB, other), false},
		{"the sibling, all nodes", sibling, slice("", other), false},
		{"the sibling, the driver's name on its node", sibling, slice(nodeA, e.driver), false},
		{"the sibling, another name on its node", sibling, slice(nodeA, other), true},
		{"the exempt central controller, all nodes", central, slice("", e.driver), true},
		{"the exempt central controller, node B", central, slice(nodeB, e.driver), true},
		{"a central controller elsewhere, all nodes", centralElsewhere, slice("", e.driver), true},
		{"a central controller elsewhere, node B", centralElsewhere, slice(nodeB, e.driver), true},
		{"the admin, node B", c.Clientset(), slice(nodeB, e.driver), true},
	}
	confined := func(after string) {
		t.Helper()
		for _, w := range writes {
			ctx, cancel := ctxFor(t, callTimeout)
			_, err := w.cs.ResourceV1().ResourceSlices().Create(ctx, w.s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			cancel()
			switch {
			case w.allowed && err != nil:
				t.Errorf("%s: %s = %v; want it allowed", after, w.who, err)
			case !w.allowed && (code(err) != http.StatusForbidden || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy")):
				t.Errorf("%s: %s = %v; want the admission policy's refusal", after, w.who, err)
			}
		}
	}
	confined("as applied")

	// The second mode's claim status: the driver's own token writes
	// status.devices of a claim allocated on its node (the driver part's
	// resourceclaims/status and resourceclaims/driver associated-node
	// rules), and the API server refuses it for a claim allocated on node
	// B (associated-node: its token is bound to node A).
	for _, tc := range []struct {
		node string
		ok   bool
	}{{nodeA, true}, {nodeB, false}} {
		claim := e.claim(t, cluster.UniqueName("claim"), e.consumer(t, cluster.UniqueName("job"), tc.node))
		status := []byte(`{"status":{"devices":[{"driver":"` + e.driver + `","pool":"pool","device":"gpu-0"}]}}`)
		ctx, cancel := ctxFor(t, callTimeout)
		_, err := driver.ResourceV1().ResourceClaims(e.ns).Patch(ctx, claim.Name, types.MergePatchType, status, metav1.PatchOptions{}, "status")
		cancel()
		t.Logf("observed: the driver's own token: status.devices of a claim allocated on %s: %d %v", tc.node, code(err), err)
		switch {
		case tc.ok && err != nil:
			t.Errorf("the driver's own token: status.devices of a claim allocated on its node = %v; want it written", err)
		case !tc.ok && code(err) != http.StatusForbidden && code(err) != http.StatusUnprocessableEntity:
			t.Errorf("the driver's own token: status.devices of a claim allocated on node B = %v; want it refused", err)
		}
	}

	// A namespace editor of draproxy's namespace and the driver's: the
	// built-in edit role is the aggregate of these two (this cluster runs
	// no controller-manager to aggregate it).
	editorName := cluster.UniqueName("editor")
	for _, ns := range []string{proxy.Namespace(), e.ns} {
		c.BindClusterRole(t, ns, "system:aggregate-to-edit", cluster.UserSubject(editorName))
		c.BindClusterRole(t, ns, "system:aggregate-to-view", cluster.UserSubject(editorName))
		c.WaitForAccess(t, authorizationv1.SubjectAccessReviewSpec{User: editorName, ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: "create", Resource: "configmaps"}}, true)
	}
	editorCfg, err := c.UserConfig(editorName)
	if err != nil {
		t.Fatal(err)
	}
	editorCfg.QPS = -1
	editor, err := kubernetes.NewForConfig(editorCfg)
	if err != nil {
		t.Fatal(err)
	}
	pol, bind := drv.Name(draProxyPolicy), drv.Name(draProxyPolicy)
	policies := editor.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	bindings := editor.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	param := func(ns, name string, labels map[string]string, data map[string]string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := editor.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: data}, metav1.CreateOptions{})
			return err
		}
	}
	label := map[string]string{"draproxy.reviewauth.io/driver-identity": "true"}
	for _, tamper := range []struct {
		name    string
		do      func(ctx context.Context) error
		refused bool
	}{
		{"delete the policy", func(ctx context.Context) error { return policies.Delete(ctx, pol, metav1.DeleteOptions{}) }, true},
		{"delete the binding", func(ctx context.Context) error { return bindings.Delete(ctx, bind, metav1.DeleteOptions{}) }, true},
		{"add a driver name to the policy", func(ctx context.Context) error {
			_, err := policies.Patch(ctx, pol, types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/variables/2/expression","value":"\"`+e.driver+`,`+other+`\".split(\",\")"}]`), metav1.PatchOptions{})
			return err
		}, true},
		{"exempt the sibling", func(ctx context.Context) error {
			_, err := policies.Patch(ctx, pol, types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/variables/3/expression","value":"[\"sibling\"]"}]`), metav1.PatchOptions{})
			return err
		}, true},
		{"make the binding warn only", func(ctx context.Context) error {
			_, err := bindings.Patch(ctx, bind, types.MergePatchType, []byte(`{"spec":{"validationActions":["Warn"]}}`), metav1.PatchOptions{})
			return err
		}, true},
		{"a parameter with a trailing space", param(proxy.Namespace(), cluster.UniqueName("space"), label, map[string]string{"serviceAccount": e.ns + "/" + sa + " ", "drivers": e.driver}), false},
		{"a parameter with an extra driver name", param(proxy.Namespace(), cluster.UniqueName("extra"), label, map[string]string{"serviceAccount": e.ns + "/" + sa, "drivers": e.driver + "," + other}), false},
		{"a parameter without data", param(proxy.Namespace(), cluster.UniqueName("empty"), label, nil), false},
		{"a parameter without its label, in the driver's namespace", param(e.ns, cluster.UniqueName("unlabelled"), nil, map[string]string{"serviceAccount": e.ns + "/sibling", "drivers": other}), false},
		{"a parameter deleted", func(ctx context.Context) error {
			name := cluster.UniqueName("deleted")
			if err := param(proxy.Namespace(), name, label, map[string]string{"serviceAccount": e.ns + "/" + sa, "drivers": e.driver})(ctx); err != nil {
				return err
			}
			return editor.CoreV1().ConfigMaps(proxy.Namespace()).Delete(ctx, name, metav1.DeleteOptions{})
		}, false},
	} {
		ctx, cancel := ctxFor(t, callTimeout)
		err := tamper.do(ctx)
		cancel()
		t.Logf("observed: namespace editor: %s: %d %v", tamper.name, code(err), err)
		switch {
		case tamper.refused && code(err) != http.StatusForbidden:
			t.Errorf("namespace editor: %s = %v; want 403", tamper.name, err)
		case !tamper.refused && err != nil:
			t.Errorf("namespace editor: %s = %v; want it done (and meaningless)", tamper.name, err)
		}
		confined("after " + tamper.name)
	}
}
