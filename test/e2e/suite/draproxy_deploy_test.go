package suite_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// TestDRAProxyDeploy applies examples/draproxy/deploy as users do (the
// flows' draproxy runs from the same objects) and checks that the API
// server holds what it says: the namespace with Pod Security "privileged"
// enforced (the socket's hostPath) and "restricted" warned and audited;
// the DaemonSet with the node's name from the downward API, its audience
// derived from its namespace and name, a token of its own mounted into
// draproxy's container only, restricted defaults, and an init container of
// draproxy's own image (no test image) that hands it the socket's
// directory as root with CAP_CHOWN alone. No RBAC rule of draproxy's, its
// driver part's or the admission check's holds the legacy impersonate
// verb or a wildcard; draproxy's ClusterRole acts as the node for exactly
// what it forwards. It renders the driver part (deploy/driver) as users
// apply it and in a namespace and with a name suffix and values of a
// test's own, and checks that its kustomization keeps one identity
// throughout: the admission policy naming the ServiceAccount it creates,
// its namespace and driver names, the binding naming the policy as
// renamed, the driver's RBAC for its driver name, a token for draproxy's
// audience in the driver's pod, under a user of its own, with draproxy's
// socket directory read-only, and nothing granting draproxy anything.
// (That the stored policies are the shipped one is what draproxy checks
// itself in the flows that set --require-admission-policy.)
func TestDRAProxyDeploy(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	m := deployDRAProxy(t, c)
	ctx := t.Context()
	cs := c.Clientset()
	proxyNS := m.Namespace()
	ns, err := cs.CoreV1().Namespaces().Get(ctx, proxyNS, metav1.GetOptions{})
	if err != nil || proxyNS != "dra-system" || ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" ||
		ns.Labels["pod-security.kubernetes.io/warn"] != "restricted" || ns.Labels["pod-security.kubernetes.io/audit"] != "restricted" {
		t.Errorf("namespace %s: %v, %v; want Pod Security privileged enforced, restricted warned and audited", proxyNS, ns.Labels, err)
	}
	ds, err := cs.AppsV1().DaemonSets(proxyNS).Get(ctx, draProxyWorkload, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("DaemonSet: %v", err)
	}
	ctr := ds.Spec.Template.Spec.Containers[0]
	var nodeFromDownwardAPI bool
	for _, e := range ctr.Env {
		nodeFromDownwardAPI = nodeFromDownwardAPI || (e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName")
	}
	sc := ctr.SecurityContext
	pod := ds.Spec.Template.Spec.SecurityContext
	tokenMounts := map[string]bool{}
	for _, ct := range append(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers...) {
		for _, vm := range ct.VolumeMounts {
			if vm.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount" {
				tokenMounts[ct.Name] = true
			}
		}
	}
	proxyAudience := argValue(ctr.Args, "audience")
	switch {
	case !nodeFromDownwardAPI:
		t.Errorf("DaemonSet env %v; want NODE_NAME from spec.nodeName", ctr.Env)
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("container securityContext %+v; want a read-only root and no privilege escalation", sc)
	case pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || pod.SeccompProfile == nil || pod.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || pod.RunAsUser == nil:
		t.Errorf("pod securityContext %+v; want non-root, a user, and RuntimeDefault seccomp", pod)
	case ctr.ReadinessProbe == nil || ctr.LivenessProbe == nil || ctr.Resources.Limits.Memory().IsZero():
		t.Errorf("container %s: probes %v %v, limits %v; want both probes and limits", ctr.Name, ctr.ReadinessProbe, ctr.LivenessProbe, ctr.Resources.Limits)
	case !slices.Contains(ctr.Args, "--driver=gpu.example.com=gpu-driver/kubelet-plugin"):
		t.Errorf("container args %q; want the example driver's --driver", ctr.Args)
	case proxyAudience != "draproxy.reviewauth.io/"+proxyNS+"/"+ds.Name:
		t.Errorf("--audience=%s; want draproxy.reviewauth.io/%s/%s, this deployment's", proxyAudience, proxyNS, ds.Name)
	case ds.Spec.Template.Spec.AutomountServiceAccountToken == nil || *ds.Spec.Template.Spec.AutomountServiceAccountToken || len(tokenMounts) != 1 || !tokenMounts[ctr.Name]:
		t.Errorf("automountServiceAccountToken %v, API tokens mounted into %v; want none automounted, draproxy's container's own only", ds.Spec.Template.Spec.AutomountServiceAccountToken, tokenMounts)
	case !strings.HasPrefix(ctr.Image, "reviewauth/draproxy"):
		t.Errorf("image %q; want reviewauth/draproxy", ctr.Image)
	}
	for _, ic := range ds.Spec.Template.Spec.InitContainers {
		isc := ic.SecurityContext
		if ic.Image != ctr.Image || argValue(ic.Args, "chown-socket-dir") != fmt.Sprintf("%d:%d", *pod.RunAsUser, *pod.RunAsUser) || argValue(ic.Args, "socket") != argValue(ctr.Args, "socket") ||
			isc == nil || isc.Capabilities == nil || !slices.Equal(isc.Capabilities.Add, []corev1.Capability{"CHOWN"}) || !slices.Equal(isc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
			isc.AllowPrivilegeEscalation == nil || *isc.AllowPrivilegeEscalation {
			t.Errorf("init container %s: image %s, args %q, securityContext %+v; want draproxy's own image handing the socket's directory to draproxy's user, with CAP_CHOWN alone", ic.Name, ic.Image, ic.Args, isc)
		}
	}

	// No legacy impersonation, no wildcard, anywhere.
	check, err := manifestFile(deployDir("draproxy", "admission-policy-check.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	driverPart, err := cluster.Render(deployDir("draproxy", "driver"), cluster.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var draproxyRules []rbacv1.PolicyRule
	for _, set := range []*cluster.Manifests{m, check, driverPart} {
		for _, obj := range set.Objects {
			if obj.GetKind() != "ClusterRole" && obj.GetKind() != "Role" {
				continue
			}
			var r rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &r); err != nil {
				t.Fatal(err)
			}
			for _, rule := range r.Rules {
				if slices.Contains(rule.Verbs, "impersonate") || slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.APIGroups, "*") {
					t.Errorf("%s %s of %s: rule %v holds the impersonate verb or a wildcard", obj.GetKind(), obj.GetName(), set.Dir, rule)
				}
			}
			if obj.GetName() == draProxyWorkload {
				draproxyRules = r.Rules
			}
		}
	}
	granted := map[string]bool{}
	for _, rule := range draproxyRules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					granted[v+" "+res+"."+g] = true
				}
			}
		}
	}
	want := map[string]bool{"impersonate:associated-node nodes.authentication.k8s.io": true, "impersonate-on:associated-node:get resourceclaims.resource.k8s.io": true,
		"impersonate-on:associated-node:get pods.": true, "impersonate-on:associated-node:get nodes.": true}
	for _, v := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"} {
		want["impersonate-on:associated-node:"+v+" resourceslices.resource.k8s.io"] = true
	}
	if !mapsEqualBool(granted, want) {
		t.Errorf("ClusterRole draproxy grants %v; want %v: to act as its node for what it forwards, and nothing else", granted, want)
	}

	// The driver part, as users apply it and as the flows render it.
	for _, o := range []cluster.RenderOptions{{}, {Namespace: "dra-driver-x", NameSuffix: "-x", Values: map[string]map[string]any{"values.yaml": {"spec.drivers": "x.example.com, y.example.com", "spec.exempt": "central"}}}} {
		dm, err := cluster.Render(deployDir("draproxy", "driver"), o)
		if err != nil {
			t.Fatal(err)
		}
		sa := dm.Object("ServiceAccount", driverWorkload)
		pol := dm.Object("ValidatingAdmissionPolicy", draProxyPolicy)
		bind := dm.Object("ValidatingAdmissionPolicyBinding", draProxyPolicy)
		if sa == nil || pol == nil || bind == nil {
			t.Fatalf("driver part %+v: ServiceAccount %v, policy %v, binding %v", o, sa, pol, bind)
		}
		driverNS, saName := sa.GetNamespace(), sa.GetName()
		wantNS, wantDrivers, wantExempt := "gpu-driver", "gpu.example.com", ""
		if o.Namespace != "" {
			wantNS, wantDrivers, wantExempt = o.Namespace, "x.example.com, y.example.com", "central"
		}
		vars, _, _ := unstructured.NestedSlice(pol.Object, "spec", "variables")
		values := map[string]string{}
		for _, v := range vars {
			vm, _ := v.(map[string]any)
			name, _ := vm["name"].(string)
			expr, _ := vm["expression"].(string)
			if lit, _, ok := strings.Cut(strings.TrimPrefix(expr, `"`), `"`); ok && strings.HasPrefix(expr, `"`) {
				values[name] = lit
			}
		}
		policyName, _, _ := unstructured.NestedString(bind.Object, "spec", "policyName")
		if driverNS != wantNS || values["driverNamespace"] != driverNS || values["serviceAccount"] != saName || values["drivers"] != wantDrivers || values["exempt"] != wantExempt || policyName != pol.GetName() {
			t.Errorf("driver part %+v: ServiceAccount %s/%s, policy %s with values %v, binding of %q; want the ServiceAccount's, drivers %q, exempt %q", o, driverNS, saName, pol.GetName(), values, policyName, wantDrivers, wantExempt)
		}
		for _, obj := range dm.Objects {
			if obj.GetKind() == "RoleBinding" || obj.GetKind() == "ClusterRoleBinding" {
				subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
				for _, s := range subjects {
					if sm, _ := s.(map[string]any); sm["name"] == draProxyWorkload {
						t.Errorf("driver part %+v: %s %s grants draproxy something; it forwards as its node", o, obj.GetKind(), obj.GetName())
					}
				}
			}
		}
		var associated []string
		var r rbacv1.ClusterRole
		if obj := dm.Object("ClusterRole", "gpu-driver-kubelet-plugin"); obj == nil || runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &r) != nil {
			t.Fatalf("driver part %+v: no ClusterRole gpu-driver-kubelet-plugin", o)
		}
		for _, rule := range r.Rules {
			if len(rule.Resources) == 1 && rule.Resources[0] == "resourceclaims/driver" {
				associated = rule.ResourceNames
			}
		}
		if firstDriver, _, _ := strings.Cut(wantDrivers, ","); len(associated) != 1 || associated[0] != firstDriver {
			t.Errorf("driver part %+v: the driver may write the status.devices of driver names %q; want %q", o, associated, firstDriver)
		}
		ds := dm.Object("DaemonSet", driverWorkload)
		var tmpl corev1.PodTemplateSpec
		raw, _, _ := unstructured.NestedMap(ds.Object, "spec", "template")
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &tmpl); err != nil {
			t.Fatal(err)
		}
		var audience string
		readOnly := false
		for _, v := range tmpl.Spec.Volumes {
			if v.Projected != nil {
				for _, src := range v.Projected.Sources {
					if src.ServiceAccountToken != nil {
						audience = src.ServiceAccountToken.Audience
					}
				}
			}
		}
		for _, vm := range tmpl.Spec.Containers[0].VolumeMounts {
			if vm.MountPath == "/var/run/draproxy" {
				readOnly = vm.ReadOnly
			}
		}
		psc := tmpl.Spec.SecurityContext
		if tmpl.Spec.ServiceAccountName != saName || audience != proxyAudience || tmpl.Spec.AutomountServiceAccountToken == nil || *tmpl.Spec.AutomountServiceAccountToken ||
			!readOnly || psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == *pod.RunAsUser {
			t.Errorf("driver part %+v: the plugin runs as %q with a token for %q, automount %v, socket directory read-only %v, securityContext %+v; want %q, draproxy's audience %q, no API token, the directory read-only, a user other than draproxy's", o,
				tmpl.Spec.ServiceAccountName, audience, tmpl.Spec.AutomountServiceAccountToken, readOnly, psc, saName, proxyAudience)
		}
	}
}

// argValue is the value of --name in args, "" without one.
func argValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func mapsEqualBool(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// manifestFile reads the objects of one manifest file (YAML documents)
// that is not a kustomization of its own, as kubectl apply -f sends them.
func manifestFile(path string) (*cluster.Manifests, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := &cluster.Manifests{Dir: path}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return m, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(obj.Object) > 0 {
			m.Objects = append(m.Objects, obj)
		}
	}
}
