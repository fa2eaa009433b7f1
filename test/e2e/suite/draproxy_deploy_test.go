package suite_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// TestDRAProxyDeploy applies examples/draproxy/deploy as users do (the
// flows' draproxy runs from the same objects) and checks that the API
// server holds what it says: the admission policy and its binding as
// written (no defaulting that changes their meaning, no namespace on
// these cluster-scoped objects), the namespace with Pod Security
// "privileged", the DaemonSet with the node's name from the downward API,
// a token of its own mounted into draproxy's container only, restricted
// defaults. It renders the driver part (deploy/driver) as users apply it
// and in a namespace and with a name suffix of a test's own, and checks
// that its kustomization keeps one identity throughout: the parameter in
// draproxy's namespace naming the ServiceAccount it creates, draproxy's
// impersonation of exactly that ServiceAccount and its namespace's group,
// the driver's RBAC for the parameter's driver name, a token for
// draproxy's audience in the driver's pod.
func TestDRAProxyDeploy(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	m := deployDRAProxy(t, c)
	ctx := t.Context()
	cs := c.Clientset()
	pol, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, draProxyPolicy, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	if fp := pol.Spec.FailurePolicy; fp == nil || *fp != "Fail" || len(pol.Spec.Validations) != 5 || pol.Spec.ParamKind == nil || pol.Spec.ParamKind.Kind != "ConfigMap" || pol.Namespace != "" {
		t.Errorf("policy as stored: namespace %q, %+v", pol.Namespace, pol.Spec)
	}
	bind, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, draProxyPolicy, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("binding: %v", err)
	}
	proxyNS := m.Namespace()
	if len(bind.Spec.ValidationActions) != 1 || bind.Spec.ValidationActions[0] != "Deny" || bind.Spec.ParamRef == nil || bind.Spec.ParamRef.Namespace != proxyNS || proxyNS != "dra-system" {
		t.Errorf("binding as stored: %+v; want Deny and parameters in draproxy's namespace dra-system (%q)", bind.Spec, proxyNS)
	}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, proxyNS, metav1.GetOptions{})
	if err != nil || ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace %s: %v, %v; want Pod Security privileged", proxyNS, ns.Labels, err)
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
	switch {
	case !nodeFromDownwardAPI:
		t.Errorf("DaemonSet env %v; want NODE_NAME from spec.nodeName", ctr.Env)
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("container securityContext %+v; want a read-only root and no privilege escalation", sc)
	case pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || pod.SeccompProfile == nil || pod.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("pod securityContext %+v; want non-root and RuntimeDefault seccomp", pod)
	case ctr.ReadinessProbe == nil || ctr.LivenessProbe == nil || ctr.Resources.Limits.Memory().IsZero():
		t.Errorf("container %s: probes %v %v, limits %v; want both probes and limits", ctr.Name, ctr.ReadinessProbe, ctr.LivenessProbe, ctr.Resources.Limits)
	case !strings.Contains(strings.Join(ctr.Args, " "), "--driver=gpu.example.com=gpu-driver/kubelet-plugin"):
		t.Errorf("container args %q; want the example driver's --driver", ctr.Args)
	case ds.Spec.Template.Spec.AutomountServiceAccountToken == nil || *ds.Spec.Template.Spec.AutomountServiceAccountToken || len(tokenMounts) != 1 || !tokenMounts[ctr.Name]:
		t.Errorf("automountServiceAccountToken %v, API tokens mounted into %v; want none automounted, draproxy's container's own only", ds.Spec.Template.Spec.AutomountServiceAccountToken, tokenMounts)
	case !strings.HasPrefix(ctr.Image, "reviewauth/draproxy"):
		t.Errorf("image %q; want reviewauth/draproxy", ctr.Image)
	}

	var proxyAudience string
	for _, a := range ctr.Args {
		if v, ok := strings.CutPrefix(a, "--audience="); ok {
			proxyAudience = v
		}
	}

	// The driver part, as users apply it and as the flows render it.
	for _, o := range []cluster.RenderOptions{{}, {Namespace: "dra-driver-x", NameSuffix: "-x", Values: map[string]map[string]any{"driver-identity.yaml": {"data.drivers": "x.example.com"}}}} {
		dm, err := cluster.Render(deployDir("draproxy", "driver"), o)
		if err != nil {
			t.Fatal(err)
		}
		sa := dm.Object("ServiceAccount", driverWorkload)
		param := dm.Object("ConfigMap", "draproxy-driver-identity")
		if sa == nil || param == nil {
			t.Fatalf("driver part %+v: ServiceAccount %v, parameter %v", o, sa, param)
		}
		driverNS, saName := sa.GetNamespace(), sa.GetName()
		wantNS, wantDriver := "gpu-driver", "gpu.example.com"
		if o.Namespace != "" {
			wantNS, wantDriver = o.Namespace, "x.example.com"
		}
		data, _, _ := unstructured.NestedStringMap(param.Object, "data")
		if driverNS != wantNS || param.GetNamespace() != proxyNS || data["serviceAccount"] != driverNS+"/"+saName || data["drivers"] != wantDriver ||
			param.GetLabels()[identityLabel] != "true" {
			t.Errorf("driver part %+v: ServiceAccount %s/%s, parameter %s/%s %v %v; want the ServiceAccount's in %s", o, driverNS, saName,
				param.GetNamespace(), param.GetName(), data, param.GetLabels(), proxyNS)
		}
		rules := func(kind, name string) []rbacv1.PolicyRule {
			var r rbacv1.ClusterRole
			if obj := dm.Object(kind, name); obj == nil || runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &r) != nil {
				t.Fatalf("driver part %+v: no %s %s", o, kind, name)
			}
			return r.Rules
		}
		impersonated := map[string][]string{}
		for _, kn := range [][2]string{{"Role", "draproxy-impersonate"}, {"ClusterRole", "draproxy-impersonate-gpu-driver"}} {
			for _, r := range rules(kn[0], kn[1]) {
				for _, res := range r.Resources {
					impersonated[res] = append(impersonated[res], r.ResourceNames...)
				}
			}
		}
		if got := impersonated["serviceaccounts"]; len(got) != 1 || got[0] != saName {
			t.Errorf("driver part %+v: draproxy may impersonate ServiceAccounts %q; want %q", o, got, saName)
		}
		if got := impersonated["groups"]; len(got) != 1 || got[0] != "system:serviceaccounts:"+driverNS {
			t.Errorf("driver part %+v: draproxy may impersonate groups %q; want the driver namespace's", o, got)
		}
		for _, kn := range [][2]string{{"RoleBinding", "draproxy-impersonate"}, {"ClusterRoleBinding", "draproxy-impersonate-gpu-driver"}} {
			var b rbacv1.RoleBinding
			if obj := dm.Object(kn[0], kn[1]); obj == nil || runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &b) != nil ||
				len(b.Subjects) != 1 || b.Subjects[0].Name != draProxyWorkload || b.Subjects[0].Namespace != proxyNS {
				t.Errorf("driver part %+v: %s %s does not bind draproxy's ServiceAccount %s/%s", o, kn[0], kn[1], proxyNS, draProxyWorkload)
			}
		}
		var associated []string
		for _, r := range rules("ClusterRole", "gpu-driver-kubelet-plugin") {
			if len(r.Resources) == 1 && r.Resources[0] == "resourceclaims/driver" {
				associated = r.ResourceNames
			}
		}
		if len(associated) != 1 || associated[0] != wantDriver {
			t.Errorf("driver part %+v: the driver may write the status.devices of driver names %q; want %q", o, associated, wantDriver)
		}
		ds := dm.Object("DaemonSet", driverWorkload)
		var tmpl corev1.PodTemplateSpec
		raw, _, _ := unstructured.NestedMap(ds.Object, "spec", "template")
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &tmpl); err != nil {
			t.Fatal(err)
		}
		var audience string
		for _, v := range tmpl.Spec.Volumes {
			if v.Projected != nil {
				for _, src := range v.Projected.Sources {
					if src.ServiceAccountToken != nil {
						audience = src.ServiceAccountToken.Audience
					}
				}
			}
		}
		if tmpl.Spec.ServiceAccountName != saName || audience == "" || audience != proxyAudience || tmpl.Spec.AutomountServiceAccountToken == nil || *tmpl.Spec.AutomountServiceAccountToken {
			t.Errorf("driver part %+v: the plugin runs as %q with a token for %q, automount %v; want %q, draproxy's audience %q, no API token", o,
				tmpl.Spec.ServiceAccountName, audience, tmpl.Spec.AutomountServiceAccountToken, saName, proxyAudience)
		}
	}
}

// identityLabel selects the admission policy's parameters.
const identityLabel = "draproxy.reviewauth.io/driver-identity"
