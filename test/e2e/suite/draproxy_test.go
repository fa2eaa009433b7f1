package suite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// draEnv is a DRA setup from the manifests users apply: draproxy's
// examples/draproxy/deploy (applied once per run: its namespace and
// ClusterRoles are one per cluster), and two drivers' parts,
// examples/draproxy/deploy/driver rendered twice into one namespace of the
// test's own (each with a name suffix and a driver name of its own, and
// its admission policy: driver identities 1 and 2), two Nodes, pods made
// from the drivers' DaemonSet templates (identity 1 on node A and on node
// B, identity 2 on node A), and draproxy for node A, run from its
// DaemonSet's pod template on node A (its ServiceAccount's token bound to
// that pod, so that it acts as node A) with the --driver flags of the two
// identities. No RBAC is written here: draproxy and the drivers have what
// the manifests grant.
type draEnv struct {
	c            *cluster.Cluster
	nodeA, nodeB *corev1.Node
	ns           string // the drivers' namespace
	sa, sa2      string // the drivers' ServiceAccounts (identities 1 and 2)
	driverUser   string // identity 1's user name
	proxyUser    string
	podA, podB   *corev1.Pod // identity 1's pods on node A and node B
	pod2A        *corev1.Pod // identity 2's pod on node A
	driver       string      // identity 1's DRA driver name, unique per test
	driver2      string      // identity 2's
	audience     string
	socket       string
	tlsAddr      string
	caFile       string
	proxy        *server
	// policy: each driver part's admission policy is applied, and
	// draproxy requires them (--require-admission-policy).
	policy bool
}

// draOptions are setupDRA's choices.
type draOptions struct {
	// noPolicy applies the driver parts without their admission policy
	// (the API server confines nothing of the drivers' own tokens), and
	// starts draproxy without --require-admission-policy: draproxy alone.
	noPolicy bool
}

// The names examples/draproxy/deploy and its driver part give the objects
// the tests use.
const (
	draProxyPolicy   = "draproxy-resourceslices" // each driver part's policy and binding (with its name suffix)
	draProxyWorkload = "draproxy"                // the DaemonSet and the ServiceAccount
	driverWorkload   = "kubelet-plugin"          // the driver part's DaemonSet and ServiceAccount
	driverTokenMount = "/var/run/secrets/draproxy"
)

var (
	draProxyDeployOnce sync.Once
	draProxyDeployed   *cluster.Manifests
)

// deployDRAProxy applies examples/draproxy/deploy as users apply it (no
// edits: its namespace, its names), once per run, and returns what it
// applied: its ClusterRoles are one per cluster, and each test runs a
// draproxy of its own node from the one DaemonSet, with
// admission-policy-check.yaml's RBAC too (the flows that set
// --require-admission-policy).
func deployDRAProxy(t testing.TB, c *cluster.Cluster) *cluster.Manifests {
	t.Helper()
	draProxyDeployOnce.Do(func() {
		m, err := cluster.Render(deployDir("draproxy"), cluster.RenderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		check, err := manifestFile(deployDir("draproxy", "admission-policy-check.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		c.Apply(t, m) // t.Fatal leaves draProxyDeployed nil
		c.Apply(t, check)
		draProxyDeployed = m
	})
	if draProxyDeployed == nil {
		t.Fatal("examples/draproxy/deploy was not applied (see the first test that applied it)")
	}
	return draProxyDeployed
}

// deployDriver applies the driver part examples/draproxy/deploy/driver
// into ns with a name suffix of its own, for the DRA driver name driver
// (values.yaml's drivers, which its admission policy and RBAC follow),
// exempting the ServiceAccounts exempt from its policy, without the policy
// and its binding when withPolicy is false, and returns what it applied
// and the name of its ServiceAccount.
func deployDriver(t testing.TB, c *cluster.Cluster, ns, driver, exempt string, withPolicy bool) (*cluster.Manifests, string) {
	t.Helper()
	o := deployOptions{namespace: ns, values: map[string]map[string]any{"values.yaml": {"spec.drivers": driver, "spec.exempt": exempt}}}
	if !withPolicy {
		o.omit = []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
	}
	m := deploy(t, c, deployDir("draproxy", "driver"), o)
	return m, m.Name(driverWorkload)
}

func setupDRA(t *testing.T, c *cluster.Cluster, opts ...draOptions) *draEnv {
	t.Helper()
	var o draOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	core := deployDRAProxy(t, c)
	e := &draEnv{c: c, driver: cluster.UniqueName("gpu") + ".example.com", policy: !o.noPolicy}
	e.driver2 = "second-" + e.driver
	e.nodeA, e.nodeB = c.CreateNode(t, cluster.UniqueName("node-a")), c.CreateNode(t, cluster.UniqueName("node-b"))
	e.ns = cluster.UniqueName("dra-driver")
	drv1, sa := deployDriver(t, c, e.ns, e.driver, "", e.policy)
	drv2, sa2 := deployDriver(t, c, e.ns, e.driver2, "", e.policy)
	e.sa, e.sa2 = sa, sa2
	e.driverUser = serviceAccountUser(e.ns, sa)
	e.podA = c.CreatePodFromTemplate(t, drv1, "DaemonSet", driverWorkload, cluster.PodOptions{NodeName: e.nodeA.Name})
	e.podB = c.CreatePodFromTemplate(t, drv1, "DaemonSet", driverWorkload, cluster.PodOptions{NodeName: e.nodeB.Name})
	e.pod2A = c.CreatePodFromTemplate(t, drv2, "DaemonSet", driverWorkload, cluster.PodOptions{NodeName: e.nodeA.Name})
	if e.policy {
		e.waitPolicy(t, sa, e.podA, e.driver)
		e.waitPolicy(t, sa2, e.pod2A, e.driver2)
	}

	// draproxy for node A: the DaemonSet's container on a pod of node A,
	// with the drivers' identities in place of the example's, a loopback
	// TLS port and metrics port of the test's own. Its socket is in its
	// hostPath directory, which the drivers' pods of node A mount.
	e.caFile = filepath.Join(t.TempDir(), "draproxy-ca.crt")
	flags := []string{"--driver=" + e.driver + "=" + e.ns + "/" + sa, "--driver=" + e.driver2 + "=" + e.ns + "/" + sa2,
		"--tls-listen=127.0.0.1:0", "--self-signed-ca-file=" + e.caFile, "--metrics-listen=127.0.0.1:0"}
	if e.policy {
		flags = append(flags, "--require-admission-policy")
	}
	e.proxy = startServer(t, c, core, "DaemonSet", draProxyWorkload, e.nodeA.Name, flags...)
	e.proxyUser = serviceAccountUser(e.proxy.pod.Namespace, e.proxy.pod.Spec.ServiceAccountName)
	if got := e.proxy.arg(t, "node-name"); got != e.nodeA.Name {
		t.Fatalf("--node-name=%q from the downward API; want the pod's node %q", got, e.nodeA.Name)
	}
	e.audience = e.proxy.arg(t, "audience")
	e.socket = e.proxy.arg(t, "socket")
	// The drivers of node A reach the socket through their own mount of
	// the same host directory.
	driverMounts := c.PrepareContainer(t, e.podA, e.podA.Spec.Containers[0].Name).Volumes
	if !slices.Contains(slices.Collect(maps.Values(driverMounts)), filepath.Dir(e.socket)) {
		t.Fatalf("draproxy's socket %s is in no directory the driver's pod on node A mounts (%v)", e.socket, driverMounts)
	}
	e.tlsAddr = strings.TrimPrefix(e.proxy.lineAfter(t, "serving "), "https://")
	metrics := strings.TrimSuffix(strings.TrimPrefix(e.proxy.lineAfter(t, "metrics on "), "http://"), "/metrics")
	e.proxy.checkProbes(t, map[int32]string{9090: metrics})
	return e
}

// waitPolicy waits until the API server enforces the admission policy of
// the driver part of the ServiceAccount sa of e's namespace, publishing
// driver: a create of a slice of node B by sa's API token bound to pod,
// on node A, is refused by the policy (a dry run, which admission sees as
// a create).
func (e *draEnv) waitPolicy(t *testing.T, sa string, pod *corev1.Pod, driver string) {
	t.Helper()
	ctx, cancel := ctxFor(t, callTimeout)
	defer cancel()
	direct := e.direct(t, e.c.RequestToken(t, e.ns, sa, cluster.TokenOptions{BoundPod: pod}))
	s := e.slice("", e.nodeB.Name, "dev")
	s.Spec.Driver = driver
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, callTimeout, true, func(ctx context.Context) (bool, error) {
		_, last = direct.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "ValidatingAdmissionPolicy"), nil
	})
	if err != nil {
		t.Fatalf("the admission policy does not refuse %s's slice of node B: %v", sa, last)
	}
}

// direct is client-go straight to the API server with token (a driver
// that bypasses draproxy), JSON bodies.
func (e *draEnv) direct(t testing.TB, token string) *kubernetes.Clientset {
	t.Helper()
	cfg := e.c.TokenConfig(token)
	cfg.ContentType = "application/json"
	cfg.QPS = -1
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// token is a token for draproxy, as the kubelet projects it into the
// driver's container of pod (the driver part's DaemonSet): for the pod's
// ServiceAccount, with the audience and lifetime the manifest asks for,
// bound to the pod. Each call is a new token.
func (e *draEnv) token(t testing.TB, pod *corev1.Pod) string {
	t.Helper()
	return podProjectedToken(t, e.c, pod, driverTokenMount)
}

// socketConfig is the rest.Config a driver uses to reach draproxy's
// socket: client-go unmodified, JSON bodies.
func (e *draEnv) socketConfig(token string) *rest.Config {
	cfg := &rest.Config{
		Host:        "http://localhost",
		BearerToken: token,
		Timeout:     callTimeout,
		QPS:         -1,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", e.socket)
		},
	}
	cfg.ContentType = "application/json"
	return cfg
}

func (e *draEnv) client(t testing.TB, token string) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.socketConfig(token))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// slice is a ResourceSlice of e's driver for node.
func (e *draEnv) slice(name, node string, devices ...string) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   e.driver,
			Pool:     resourcev1.ResourcePool{Name: "pool-" + node, ResourceSliceCount: 1},
			NodeName: ptr.To(node),
		},
	}
	if name == "" {
		s.GenerateName = "test-"
	}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: d})
	}
	return s
}

// adminSlices lists the slices of e's driver on node, as the admin.
func (e *draEnv) adminSlices(ctx context.Context, node string) ([]resourcev1.ResourceSlice, error) {
	l, err := e.c.Clientset().ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + e.driver + ",spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// wantAPIStatus checks that err is a Kubernetes Status with code whose
// message contains msg, and that no token leaked into it.
func wantAPIStatus(t testing.TB, call string, err error, code int32, msg string, tokens ...string) {
	t.Helper()
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		t.Errorf("%s = %v; want a Status %d", call, err, code)
		return
	}
	st := se.Status()
	t.Logf("observed: %s = %d %s", call, st.Code, st.Message)
	if st.Code != code || !strings.Contains(st.Message, msg) {
		t.Errorf("%s = %d %q; want %d containing %q", call, st.Code, st.Message, code, msg)
	}
	for _, tok := range tokens {
		if strings.Contains(st.Message, tok) {
			t.Errorf("%s: the status message contains a token", call)
		}
	}
}

// TestDRAProxy runs the upstream ResourceSlice controller and plain
// client-go through draproxy for node A, against the real API server.
func TestDRAProxy(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	e := setupDRA(t, c)
	tokA, tokB := e.token(t, e.podA), e.token(t, e.podB)
	drvA := e.client(t, tokA)
	admin := c.Clientset()
	nodeA, nodeB := e.nodeA.Name, e.nodeB.Name
	needSelector := "requires the field selector spec.nodeName=" + nodeA

	t.Run("ResourceSlice controller", func(t *testing.T) {
		// k8s.io/dynamic-resource-allocation's controller, as a DRA
		// driver's kubelet plugin runs it (kubeletplugin.Helper), with a
		// client pointed at draproxy: it reads its Node (no UID given),
		// lists and watches its slices with
		// spec.driver=D,spec.nodeName=A, and creates, updates and deletes
		// them as the inventory changes.
		var errMu sync.Mutex
		var handlerErrs []string
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		pools := func(slices ...[]string) *resourceslice.DriverResources {
			if len(slices) == 0 {
				return &resourceslice.DriverResources{}
			}
			p := resourceslice.Pool{}
			for _, devices := range slices {
				var s resourceslice.Slice
				for _, d := range devices {
					s.Devices = append(s.Devices, resourcev1.Device{Name: d})
				}
				p.Slices = append(p.Slices, s)
			}
			return &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{"pool": p}}
		}
		ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{
			DriverName: e.driver,
			KubeClient: drvA,
			Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: nodeA},
			Resources:  pools([]string{"gpu-0"}),
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
		// wantDevices waits until the API server holds exactly the slices
		// of devices (one set per slice) for node A.
		wantDevices := func(step string, want ...[]string) {
			t.Helper()
			var got [][]string
			err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				items, err := e.adminSlices(ctx, nodeA)
				if err != nil {
					return false, err
				}
				got = nil
				for _, s := range items {
					var names []string
					for _, d := range s.Spec.Devices {
						names = append(names, d.Name)
					}
					got = append(got, names)
				}
				slices.SortFunc(got, func(a, b []string) int { return strings.Compare(strings.Join(a, ","), strings.Join(b, ",")) })
				return fmt.Sprint(got) == fmt.Sprint(want), nil
			})
			errMu.Lock()
			defer errMu.Unlock()
			t.Logf("observed: %s: the API server holds %v for node A; controller stats %+v; error handler: %q", step, got, ctrl.GetStats(), handlerErrs)
			if err != nil {
				t.Fatalf("%s: the API server holds %v for node A; want %v", step, got, want)
			}
		}
		wantDevices("published", []string{"gpu-0"})
		ctrl.Update(pools([]string{"gpu-0", "gpu-1"}, []string{"gpu-2"}))
		wantDevices("inventory grew", []string{"gpu-0", "gpu-1"}, []string{"gpu-2"})
		ctrl.Update(pools())
		wantDevices("inventory gone")
		st := ctrl.GetStats()
		if st.NumCreates < 2 || st.NumUpdates < 1 || st.NumDeletes < 2 {
			t.Errorf("controller stats %+v; want at least 2 creates, 1 update, 2 deletes", st)
		}
		if items, err := e.adminSlices(t.Context(), nodeB); err != nil || len(items) != 0 {
			t.Errorf("slices for node B = %d, %v; want none", len(items), err)
		}
		// Every write reached the API server as node A, impersonated by
		// draproxy (its token bound to its pod on node A), the driver
		// named in the User-Agent.
		waitAudit(t, c, "the controller's writes through draproxy", func(evs []auditv1.Event) error {
			verbs := map[string]int{}
			for _, ev := range evs {
				verbs[ev.Verb]++
			}
			if verbs["create"] < 2 || verbs["update"] < 1 || verbs["delete"] < 2 {
				return fmt.Errorf("audited writes %v; want at least 2 creates, 1 update, 2 deletes", verbs)
			}
			return nil
		}, func(ev *auditv1.Event) bool {
			// The driver's user name is unique to this test; generated
			// slice names are not in the audit events of creates.
			return ev.ImpersonatedUser != nil && ev.ImpersonatedUser.Username == "system:node:"+nodeA && ev.User.Username == e.proxyUser &&
				strings.HasPrefix(ev.UserAgent, "draproxy/"+nodeA+" (driver="+e.driverUser+"; pod="+e.ns+"/"+e.podA.Name+";") &&
				ev.ObjectRef != nil && ev.ObjectRef.Resource == "resourceslices" &&
				ev.ResponseStatus != nil && ev.ResponseStatus.Code < 300
		})
		errMu.Lock()
		defer errMu.Unlock()
		for _, msg := range handlerErrs {
			// A delete that races the informer (the controller's own
			// comment) finds the slice gone: draproxy answers 404, as the
			// API server does, which the controller takes for done.
			// Anything else is a refusal of what the driver may do.
			if strings.Contains(msg, "forbidden") || strings.Contains(msg, "Unsupported Media Type") || strings.Contains(msg, "unavailable") || strings.Contains(msg, "not found") {
				t.Errorf("controller error through draproxy: %s", msg)
			}
		}
	})

	// Slices the admin creates directly: two for node B, one for node A.
	ctx := t.Context()
	for _, s := range []*resourcev1.ResourceSlice{e.slice("b-1-"+e.driver, nodeB, "dev"), e.slice("b-2-"+e.driver, nodeB, "dev"), e.slice("a-1-"+e.driver, nodeA, "dev")} {
		if _, err := admin.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("admin: create slice %s: %v", s.Name, err)
		}
	}
	rs := drvA.ResourceV1().ResourceSlices()

	t.Run("list and watch", func(t *testing.T) {
		_, err := rs.List(ctx, metav1.ListOptions{})
		wantAPIStatus(t, "List(no selector)", err, http.StatusForbidden, needSelector, tokA)
		_, err = rs.Watch(ctx, metav1.ListOptions{})
		wantAPIStatus(t, "Watch(no selector)", err, http.StatusForbidden, needSelector, tokA)
		_, err = rs.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeB})
		wantAPIStatus(t, "List(node B)", err, http.StatusForbidden, needSelector, tokA)
		l, err := rs.List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + e.driver + ",spec.nodeName=" + nodeA})
		if err != nil {
			t.Fatalf("List(node A) = %v", err)
		}
		var names []string
		for _, s := range l.Items {
			names = append(names, s.Name)
			if s.Spec.NodeName == nil || *s.Spec.NodeName != nodeA {
				t.Errorf("List(node A) returned %s of node %v", s.Name, s.Spec.NodeName)
			}
		}
		t.Logf("observed: List(node A) = %q", names)
		if !slices.Equal(names, []string{"a-1-" + e.driver}) {
			t.Errorf("List(node A) = %q; want [a-1-%s]", names, e.driver)
		}

		w, err := rs.Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeA})
		if err != nil {
			t.Fatalf("Watch(node A) = %v", err)
		}
		defer w.Stop()
		for _, s := range []*resourcev1.ResourceSlice{e.slice("b-3-"+e.driver, nodeB, "dev"), e.slice("a-2-"+e.driver, nodeA, "dev")} {
			if _, err := admin.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// The watch starts with node A's existing slices, then a-2; node
		// B's b-3 never comes.
		var seen []string
		for !slices.Contains(seen, "a-2-"+e.driver) {
			select {
			case ev := <-w.ResultChan():
				s, ok := ev.Object.(*resourcev1.ResourceSlice)
				if !ok {
					t.Fatalf("watch event through draproxy = %s %T; want a ResourceSlice", ev.Type, ev.Object)
				}
				seen = append(seen, s.Name)
				if s.Spec.NodeName == nil || *s.Spec.NodeName != nodeA {
					t.Errorf("watch event through draproxy for %s of node %v; want node A's only", s.Name, s.Spec.NodeName)
				}
			case <-time.After(callTimeout):
				t.Fatalf("watch events through draproxy: %q; no a-2 within %v", seen, callTimeout)
			}
		}
		t.Logf("observed: watch(node A) events: %q", seen)

		// The deprecated path form, with the node's selector, is served
		// as the list form; one slice's watch needs the node's selector too.
		sel := url.QueryEscape("spec.nodeName=" + nodeA)
		for _, w := range []struct {
			path string
			want int
		}{
			{"/apis/resource.k8s.io/v1/watch/resourceslices?fieldSelector=" + sel, http.StatusOK},
			{"/apis/resource.k8s.io/v1/watch/resourceslices/a-1-" + e.driver + "?fieldSelector=" + url.QueryEscape("metadata.name=a-1-"+e.driver+",spec.nodeName="+nodeA), http.StatusOK},
			{"/apis/resource.k8s.io/v1/watch/resourceslices", http.StatusForbidden},
			{"/apis/resource.k8s.io/v1/resourceslices?watch=1&fieldSelector=" + url.QueryEscape("metadata.name=a-1-"+e.driver), http.StatusForbidden},
		} {
			code, first := e.firstLine(t, w.path, tokA)
			t.Logf("observed: GET %s = %d %s", w.path, code, first)
			switch {
			case code != w.want:
				t.Errorf("GET %s = %d %s; want %d", w.path, code, first, w.want)
			case code == http.StatusOK && !strings.Contains(first, `"a-1-`+e.driver+`"`):
				t.Errorf("GET %s: first event %s; want node A's slice", w.path, first)
			case code == http.StatusForbidden && !strings.Contains(first, needSelector):
				t.Errorf("GET %s = %s; want the selector named", w.path, first)
			}
		}
	})

	t.Run("one slice", func(t *testing.T) {
		const notOurs = "not found (draproxy shows a driver only the ResourceSlices of node"
		name := "b-1-" + e.driver
		_, err := rs.Get(ctx, name, metav1.GetOptions{})
		wantAPIStatus(t, "Get(node B's slice)", err, http.StatusNotFound, notOurs, tokA)
		_, err = rs.Update(ctx, e.slice(name, nodeB, "stolen"), metav1.UpdateOptions{})
		wantAPIStatus(t, "Update(node B's slice)", err, http.StatusForbidden, "must have spec.nodeName", tokA)
		_, err = rs.Update(ctx, e.slice(name, nodeA, "stolen"), metav1.UpdateOptions{})
		wantAPIStatus(t, "Update(node B's slice, as node A's)", err, http.StatusNotFound, notOurs, tokA)
		err = rs.Delete(ctx, name, metav1.DeleteOptions{})
		wantAPIStatus(t, "Delete(node B's slice)", err, http.StatusNotFound, notOurs, tokA)
		_, err = rs.Get(ctx, "missing-"+e.driver, metav1.GetOptions{})
		wantAPIStatus(t, "Get(missing slice)", err, http.StatusNotFound, notOurs, tokA)
		if s, err := admin.ResourceV1().ResourceSlices().Get(ctx, name, metav1.GetOptions{}); err != nil || len(s.Spec.Devices) != 1 || s.Spec.Devices[0].Name != "dev" {
			t.Errorf("node B's slice after the attempts = %v, %v; want it unchanged", s, err)
		}

		own := "a-1-" + e.driver
		s, err := rs.Get(ctx, own, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Get(own slice) = %v", err)
		}
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: "dev-2"})
		if _, err := rs.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Errorf("Update(own slice) = %v", err)
		}
		if err := rs.Delete(ctx, own, metav1.DeleteOptions{}); err != nil {
			t.Errorf("Delete(own slice) = %v", err)
		}
	})

	t.Run("create", func(t *testing.T) {
		_, err := rs.Create(ctx, e.slice("", nodeB, "dev"), metav1.CreateOptions{})
		wantAPIStatus(t, "Create(node B)", err, http.StatusForbidden, "must have spec.nodeName", tokA)
		created, err := rs.Create(ctx, e.slice("", nodeA, "dev"), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("Create(node A) = %v", err)
		}
		if _, err := admin.ResourceV1().ResourceSlices().Get(ctx, created.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("admin: Get(created slice) = %v", err)
		}
		// client-go's default encoding for built-in types is protobuf.
		pbCfg := e.socketConfig(tokA)
		pbCfg.ContentType = ""
		pb, err := kubernetes.NewForConfig(pbCfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = pb.ResourceV1().ResourceSlices().Create(ctx, e.slice("", nodeA, "dev"), metav1.CreateOptions{})
		wantAPIStatus(t, "Create(node A, protobuf)", err, http.StatusUnsupportedMediaType, "application/json", tokA)
		// A get asking for protobuf gets the JSON draproxy checked, which
		// client-go decodes by its Content-Type.
		if s, err := pb.ResourceV1().ResourceSlices().Get(ctx, created.Name, metav1.GetOptions{}); err != nil || s.Spec.NodeName == nil || *s.Spec.NodeName != nodeA {
			t.Errorf("Get(own slice) asking for protobuf = %v, %v", s, err)
		}
	})

	t.Run("TLS port and kubeconfig", func(t *testing.T) {
		ca, err := os.ReadFile(e.caFile)
		if err != nil {
			t.Fatal(err)
		}
		kc := clientcmdapi.NewConfig()
		kc.Clusters["draproxy"] = &clientcmdapi.Cluster{Server: "https://" + e.tlsAddr, CertificateAuthorityData: ca}
		kc.AuthInfos["driver"] = &clientcmdapi.AuthInfo{Token: tokA}
		kc.Contexts["draproxy"] = &clientcmdapi.Context{Cluster: "draproxy", AuthInfo: "driver"}
		kc.CurrentContext = "draproxy"
		path := filepath.Join(t.TempDir(), "kubeconfig")
		if err := clientcmd.WriteToFile(*kc, path); err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeA}); err != nil {
			t.Errorf("List(node A) over TLS = %v", err)
		}
		_, err = cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		wantAPIStatus(t, "List(no selector) over TLS", err, http.StatusForbidden, needSelector, tokA)
	})

	t.Run("driver on node B", func(t *testing.T) {
		drvB := e.client(t, tokB).ResourceV1().ResourceSlices()
		_, err := drvB.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeB})
		wantAPIStatus(t, "List(node B) by node B's driver", err, http.StatusForbidden, "bound to node", tokB)
		_, err = drvB.Create(ctx, e.slice("", nodeB, "dev"), metav1.CreateOptions{})
		wantAPIStatus(t, "Create(node B) by node B's driver", err, http.StatusForbidden, "bound to node", tokB)
	})

	t.Run("claims", func(t *testing.T) {
		// Claims used by workload pods: the Node authorizer returns a
		// claim to a node through a pod bound to it that references it.
		jobA, jobB := e.consumer(t, "job-a", nodeA, "claim-a"), e.consumer(t, "job-b", nodeB, "claim-b")
		claimA, claimB := e.claim(t, "claim-a", jobA), e.claim(t, "claim-b", jobB)
		claims := drvA.ResourceV1().ResourceClaims(e.ns)
		if _, err := claims.Get(ctx, claimA.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("Get(claim reserved for the pod on A) = %v", err)
		}
		_, err := claims.Get(ctx, claimB.Name, metav1.GetOptions{})
		wantAPIStatus(t, "Get(claim reserved for the pod on B)", err, http.StatusForbidden, "is not reserved for a pod on node", tokA)
		// A claim's status is a driver's own token's to write (the
		// second mode): a node may not.
		_, err = claims.UpdateStatus(ctx, claimA, metav1.UpdateOptions{})
		wantAPIStatus(t, "UpdateStatus(claim on A)", err, http.StatusForbidden, "may not write a ResourceClaim's status", tokA)
		_, err = claims.UpdateStatus(ctx, claimB, metav1.UpdateOptions{})
		wantAPIStatus(t, "UpdateStatus(claim on B)", err, http.StatusForbidden, "may not write a ResourceClaim's status", tokA)
		_, err = claims.List(ctx, metav1.ListOptions{})
		wantAPIStatus(t, "List(claims)", err, http.StatusForbidden, "draproxy refuses list of resourceclaims", tokA)
		code, body := e.raw(t, http.MethodGet, "/apis/resource.k8s.io/v1/resourceclaims/"+claimA.Name, tokA, "", nil)
		if code != http.StatusNotFound || !strings.Contains(body, "names no namespace") {
			t.Errorf("GET a claim without its namespace = %d %s; want 404 naming the namespace", code, body)
		}

		// Issue #28's sequence: the pod a claim is reserved for is
		// deleted on node A and re-created under the same name on node
		// B, and the claim is reserved for both UIDs. Node A's driver is
		// refused it at once: the API server's graph follows the live pod
		// (and draproxy reads the pods as the node, remembering nothing).
		moved := e.consumer(t, "moved", nodeA, "claim-moved")
		claimMoved := e.claim(t, "claim-moved", moved)
		if _, err := claims.Get(ctx, claimMoved.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("Get(claim of the pod on A) = %v", err)
		}
		c.DeletePod(t, e.ns, moved.Name)
		again := e.consumer(t, "moved", nodeB, "claim-moved")
		claimMoved = e.reserve(t, claimMoved.Name, moved, again)
		_, err = claims.Get(ctx, claimMoved.Name, metav1.GetOptions{})
		wantAPIStatus(t, "Get(claim reserved for the pod moved to B, old and new UIDs)", err, http.StatusForbidden, "is not reserved for a pod on node", tokA)
		t.Logf("observed: the claim reserved for %s (%s, node A, deleted) and %s (%s, node B) refused to node A's driver", moved.Name, moved.UID, again.Name, again.UID)
	})

	t.Run("spoofed impersonation", func(t *testing.T) {
		// A driver that sends its own Impersonate-* headers gains nothing:
		// they never pass, and the API server sees the driver.
		name := "spoof-" + e.driver
		body := fmt.Sprintf(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":%q},"spec":{"driver":%q,"nodeName":%q,"pool":{"name":"p","resourceSliceCount":1}}}`, name, e.driver, nodeA)
		spoof := map[string][]string{
			"Impersonate-User":  {"system:admin"},
			"Impersonate-Group": {"system:masters"},
			"X-Remote-User":     {"system:admin"},
			"X-Remote-Group":    {"system:masters"},
		}
		code, out := e.raw(t, http.MethodGet, "/apis/resource.k8s.io/v1/resourceslices/b-2-"+e.driver, tokA, "", spoof)
		if code != http.StatusNotFound {
			t.Errorf("GET node B's slice with Impersonate-User: system:admin = %d %s; want 404", code, out)
		}
		code, out = e.raw(t, http.MethodGet, "/api/v1/namespaces/kube-system/secrets", tokA, "", spoof)
		if code != http.StatusForbidden {
			t.Errorf("GET secrets with Impersonate-User: system:admin = %d %s; want 403", code, out)
		}
		code, out = e.raw(t, http.MethodPost, "/apis/resource.k8s.io/v1/resourceslices", tokA, body, spoof)
		if code != http.StatusCreated {
			t.Fatalf("POST own slice with spoofed headers = %d %s; want 201", code, out)
		}
		// The audit join: the event of the create (draproxy acting as
		// node A, the driver in its User-Agent) and draproxy's log line of
		// it share the Audit-ID.
		var auditID string
		waitAudit(t, c, "the spoofed create", func(evs []auditv1.Event) error {
			if len(evs) != 1 {
				return fmt.Errorf("%d audit events; want 1", len(evs))
			}
			ev := evs[0]
			t.Logf("observed: audit user %q extra %v, impersonated user %q groups %q extra %v, user agent %q, audit ID %s", ev.User.Username, ev.User.Extra, ev.ImpersonatedUser.Username, ev.ImpersonatedUser.Groups, ev.ImpersonatedUser.Extra, ev.UserAgent, ev.AuditID)
			switch {
			case ev.User.Username != e.proxyUser || !slices.Equal([]string(ev.User.Extra["authentication.kubernetes.io/node-name"]), []string{nodeA}):
				return fmt.Errorf("audit user %+v; want draproxy %q bound to node A", ev.User, e.proxyUser)
			case ev.ImpersonatedUser.Username != "system:node:"+nodeA || slices.Contains(ev.ImpersonatedUser.Groups, "system:masters"):
				return fmt.Errorf("audit impersonated user %+v; want node A without system:masters", ev.ImpersonatedUser)
			case !strings.HasPrefix(ev.UserAgent, "draproxy/"+nodeA+" (driver="+e.driverUser+"; pod="+e.ns+"/"+e.podA.Name+"; pod-uid="+string(e.podA.UID)+")"):
				return fmt.Errorf("audit user agent %q; want draproxy's naming the driver %s and its pod %s", ev.UserAgent, e.driverUser, e.podA.Name)
			}
			auditID = string(ev.AuditID)
			return nil
		}, func(ev *auditv1.Event) bool {
			return ev.Verb == "create" && ev.ObjectRef != nil && ev.ObjectRef.Name == name && ev.ImpersonatedUser != nil
		})
		if auditID != "" {
			line := e.proxy.waitLog(t, `auditID="`+auditID+`"`)
			for _, want := range []string{`"draproxy: forwarded a write as the node"`, `driver="` + e.driverUser + `"`, `pod="` + e.ns + "/" + e.podA.Name + `"`, `verb="create"`, `status=201`} {
				if !strings.Contains(line, want) {
					t.Errorf("draproxy's log line of the create %q; want %s", line, want)
				}
			}
		}
		// This draproxy (its pod on node A; draproxy's ServiceAccount is
		// shared by every flow) impersonated node A and no one else.
		evs, err := c.AuditEvents(func(ev *auditv1.Event) bool {
			return ev.ImpersonatedUser != nil && ev.ImpersonatedUser.Username != "system:node:"+nodeA && ev.User.Username == e.proxyUser &&
				slices.Equal([]string(ev.User.Extra["authentication.kubernetes.io/pod-name"]), []string{e.proxy.pod.Name})
		})
		if err != nil || len(evs) != 0 {
			t.Errorf("audit events of draproxy impersonating anyone but node A = %d, %v; want none", len(evs), err)
		}
	})
}

// consumer creates, as the admin, the workload pod name in e's namespace
// on node (as the driver's ServiceAccount, the one the namespace has),
// using the ResourceClaims claims (spec.resourceClaims, which the Node
// authorizer's graph follows).
func (e *draEnv) consumer(t testing.TB, name, node string, claims ...string) *corev1.Pod {
	t.Helper()
	ctx, cancel := ctxFor(t, callTimeout)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: e.sa, // the namespace has no default ServiceAccount: no controllers run
			Containers:         []corev1.Container{{Name: "main", Image: cluster.PauseImage}},
		},
	}
	for _, cl := range claims {
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: cl, ResourceClaimName: ptr.To(cl)})
	}
	p, err := e.c.Clientset().CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("admin: create pod %s on %s: %v", name, node, err)
	}
	return p
}

// claim creates, as the admin, the ResourceClaim name in e's namespace,
// allocated on pod's node and reserved for pod.
func (e *draEnv) claim(t testing.TB, name string, pod *corev1.Pod) *resourcev1.ResourceClaim {
	t.Helper()
	ctx, cancel := ctxFor(t, callTimeout)
	defer cancel()
	claims := e.c.Clientset().ResourceV1().ResourceClaims(e.ns)
	c, err := claims.Create(ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.example.com"},
		}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("admin: create claim %s: %v", name, err)
	}
	// As the scheduler allocates a node-local device: on the pod's node.
	c.Status.Allocation = &resourcev1.AllocationResult{
		Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: e.driver, Pool: "pool", Device: "gpu-0",
		}}},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{pod.Spec.NodeName},
		}}}}},
	}
	if _, err := claims.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("admin: allocate claim %s: %v", name, err)
	}
	return e.reserve(t, name, pod)
}

// reserve sets, as the admin, the reservations of the claim name to pods
// (by name and UID).
func (e *draEnv) reserve(t testing.TB, name string, pods ...*corev1.Pod) *resourcev1.ResourceClaim {
	t.Helper()
	ctx, cancel := ctxFor(t, callTimeout)
	defer cancel()
	claims := e.c.Clientset().ResourceV1().ResourceClaims(e.ns)
	c, err := claims.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("admin: get claim %s: %v", name, err)
	}
	c.Status.ReservedFor = nil
	for _, pod := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
	}
	c, err = claims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("admin: reserve claim %s: %v", name, err)
	}
	return c
}

// raw sends one request to draproxy's socket with extra headers.
func (e *draEnv) raw(t testing.TB, method, path, token, body string, header map[string][]string) (int, string) {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", e.socket)
	}}
	defer tr.CloseIdleConnections()
	ctx, cancel := ctxFor(t, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// firstLine sends a GET of path to draproxy's socket with token and
// returns its status and first line (a watch's first event), waiting at
// most callTimeout.
func (e *draEnv) firstLine(t testing.TB, path, token string) (int, string) {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", e.socket)
	}}
	defer tr.CloseIdleConnections()
	ctx, cancel := ctxFor(t, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	return resp.StatusCode, line
}

// waitLog waits, for at most 10s, for a line of the server's standard
// error that contains want, and returns it.
func (s *server) waitLog(t testing.TB, want string) string {
	t.Helper()
	var found string
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		for _, line := range strings.Split(s.stderr.String(), "\n") {
			if strings.Contains(line, want) {
				found = line
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("%s logged no line with %s within 10s", s.name, want)
	}
	return found
}

// waitAudit polls the audit log until check accepts the events keep
// selects, for at most 10s.
func waitAudit(t testing.TB, c *cluster.Cluster, what string, check func([]auditv1.Event) error, keep func(*auditv1.Event) bool) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		evs, err := c.AuditEvents(keep)
		if err != nil {
			return false, err
		}
		last = check(evs)
		return last == nil, nil
	})
	if err != nil {
		t.Errorf("audit log for %s: %v (last: %v)", what, err, last)
	}
}

// TestDRAProxyOutage stops the API server while draproxy serves: requests
// are answered 503 (a Status with Retry-After), never 401 or 403, and work
// again after a restart. It stops the shared API server, so it is not
// parallel.
func TestDRAProxyOutage(t *testing.T) {
	c := cluster.Get(t)
	e := setupDRA(t, c)
	tokA := e.token(t, e.podA)
	fresh := e.token(t, e.podA)
	rs := e.client(t, tokA).ResourceV1().ResourceSlices()
	ctx := t.Context()
	own, err := rs.Create(ctx, e.slice("", e.nodeA.Name, "dev"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("Create before the outage = %v", err)
	}
	sel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + e.nodeA.Name}
	if _, err := rs.List(ctx, sel); err != nil { // warm: identity and decision cached
		t.Fatalf("List before the outage = %v", err)
	}
	// Warm the decision for another slice's name: missing, so 404, and
	// never remembered.
	_, err = rs.Get(ctx, "other-"+e.driver, metav1.GetOptions{})
	wantAPIStatus(t, "Get(missing slice) before the outage", err, http.StatusNotFound, "not found", tokA)

	c.Stop()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := c.Restart(context.Background()); err != nil {
				t.Errorf("Restart: %v", err)
			}
		}
	})
	// Each request once, as raw HTTP: client-go itself retries a 503 with
	// Retry-After (10 times for a GET), as it does the API server's.
	slices := "/apis/resource.k8s.io/v1/resourceslices"
	calls := []struct {
		name, path, token string
	}{
		{name: "List (cached review, forwarded)", path: slices + "?fieldSelector=spec.nodeName%3D" + e.nodeA.Name, token: tokA},
		{name: "Get of its slice (fresh review, checked read)", path: slices + "/" + own.Name, token: tokA},
		{name: "Get of another slice (cached review, checked read)", path: slices + "/other-" + e.driver, token: tokA},
		{name: "List with a fresh token (TokenReview)", path: slices + "?fieldSelector=spec.nodeName%3D" + e.nodeA.Name, token: fresh},
	}
	for _, tc := range calls {
		start := time.Now()
		code, body := e.raw(t, http.MethodGet, tc.path, tc.token, "", nil)
		t.Logf("observed: during the outage, %s = %d %s in %v", tc.name, code, strings.TrimSpace(body), time.Since(start).Round(time.Millisecond))
		if code != http.StatusServiceUnavailable || !strings.Contains(body, `"kind":"Status"`) || !strings.Contains(body, `"code":503`) {
			t.Errorf("during the outage, %s = %d %s; want a 503 Status", tc.name, code, body)
		}
		if strings.Contains(body, tc.token) {
			t.Errorf("during the outage, %s: the body contains the token", tc.name)
		}
	}
	// What a driver sees: client-go's error after its own retries.
	start := time.Now()
	_, err = rs.List(ctx, sel)
	t.Logf("observed: during the outage, client-go List = %v in %v", err, time.Since(start).Round(time.Millisecond))
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("during the outage, client-go List = %v; want 503", err)
	}

	restarted = true
	if err := c.Restart(context.Background()); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := e.client(t, fresh).ResourceV1().ResourceSlices().List(ctx, sel)
		return err == nil, nil
	})
	if err != nil {
		t.Errorf("after the restart, List with the fresh token never succeeded: %v", err)
	}
	if _, err := rs.Get(ctx, own.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("after the restart, Get(own slice) = %v", err)
	}
}
