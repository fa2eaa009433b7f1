package suite_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// draProxyDeployDir holds the manifests users apply (kubectl apply -k).
func draProxyDeployDir() string { return filepath.Join(examplesDir(), "draproxy", "deploy") }

// The names in examples/draproxy/deploy that the tests rely on.
const (
	draProxyNamespace     = "dra-system"
	draProxyPolicy        = "draproxy-resourceslices"
	driverIdentityLabel   = "draproxy.reviewauth.io/driver-identity"
	deployExampleDriverNS = "gpu-driver" // the example driver's namespace, which rbac.yaml names
)

var (
	draProxyDeployOnce sync.Once
	draProxyDeployErr  error
)

// installDRAProxyDeploy applies, as the admin and once per run, every
// manifest of examples/draproxy/deploy that its kustomization.yaml lists,
// as they are: the namespace, draproxy's ServiceAccount and RBAC, the
// example driver's RBAC and parameter, the DaemonSet (which no kubelet
// runs here) and the admission policy and its binding, which from then on
// confine the ResourceSlice writes of every driver identity a parameter
// names. The example driver's namespace is created first (its chart's
// job). (A shared kustomize-based apply in test/e2e/cluster is to replace
// this helper.)
func installDRAProxyDeploy(t testing.TB, c *cluster.Cluster) {
	t.Helper()
	draProxyDeployOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*callTimeout)
		defer cancel()
		draProxyDeployErr = applyDRAProxyDeploy(ctx, c)
	})
	if draProxyDeployErr != nil {
		t.Fatalf("apply examples/draproxy/deploy: %v", draProxyDeployErr)
	}
}

func applyDRAProxyDeploy(ctx context.Context, c *cluster.Cluster) error {
	_, err := c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: deployExampleDriverNS}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	files, err := kustomizationResources(draProxyDeployDir())
	if err != nil {
		return err
	}
	for _, name := range files {
		if err := applyFile(ctx, c, filepath.Join(draProxyDeployDir(), name)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// kustomizationResources returns the resources a kustomization.yaml lists.
func kustomizationResources(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := sigsyaml.Unmarshal(b, &k); err != nil {
		return nil, err
	}
	if len(k.Resources) == 0 {
		return nil, errors.New("kustomization.yaml lists no resources")
	}
	return k.Resources, nil
}

// applyFile applies every object of the YAML file at path with
// server-side apply, as the admin, as `kubectl apply --server-side` does.
func applyFile(ctx context.Context, c *cluster.Cluster, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	cfg := c.AdminConfig()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var obj unstructured.Unstructured
		if err := sigsyaml.Unmarshal(doc, &obj.Object); err != nil {
			return err
		}
		if len(obj.Object) == 0 {
			continue // comments only
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s: %w", gvk, err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if ns := obj.GetNamespace(); ns != "" {
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		body, err := obj.MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "reviewauth-e2e", Force: ptrTo(true)}); err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestDRAProxyDeploy applies examples/draproxy/deploy as users do and
// checks that the API server holds what it says: the admission policy and
// its binding as written (no defaulting that changes their meaning), the
// namespace with Pod Security "privileged", the DaemonSet with the node's
// name from the downward API.
func TestDRAProxyDeploy(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	installDRAProxyDeploy(t, c)
	ctx := t.Context()
	cs := c.Clientset()
	pol, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, draProxyPolicy, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	if fp := pol.Spec.FailurePolicy; fp == nil || *fp != "Fail" || len(pol.Spec.Validations) != 5 || pol.Spec.ParamKind == nil || pol.Spec.ParamKind.Kind != "ConfigMap" {
		t.Errorf("policy as stored: %+v", pol.Spec)
	}
	bind, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, draProxyPolicy, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("binding: %v", err)
	}
	if len(bind.Spec.ValidationActions) != 1 || bind.Spec.ValidationActions[0] != "Deny" || bind.Spec.ParamRef == nil || bind.Spec.ParamRef.Namespace != draProxyNamespace {
		t.Errorf("binding as stored: %+v", bind.Spec)
	}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, draProxyNamespace, metav1.GetOptions{})
	if err != nil || ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace %s: %v, %v; want Pod Security privileged", draProxyNamespace, ns.Labels, err)
	}
	ds, err := cs.AppsV1().DaemonSets(draProxyNamespace).Get(ctx, "draproxy", metav1.GetOptions{})
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
	}
}
