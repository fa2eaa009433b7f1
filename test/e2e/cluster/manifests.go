package cluster

import (
	"context"
	"fmt"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// FieldManager is the server-side apply field manager of [Cluster.Apply].
const FieldManager = "reviewauth-e2e"

// RenderOptions are the edits [Render] makes to a kustomization before
// building it: the edits its users make (kustomization.yaml's namespace,
// the values of its documented patch), and a name suffix so that one
// cluster holds several copies. The zero value renders the files as they
// are.
type RenderOptions struct {
	// Namespace sets kustomization.yaml's namespace: every namespaced
	// object moves there and its Namespace object is renamed. Empty keeps
	// the file's.
	Namespace string
	// NameSuffix sets kustomization.yaml's nameSuffix: every object's name
	// (cluster-scoped ones included) ends with it, and kustomize updates
	// the references (roleRef, subjects, serviceAccountName, volumes).
	NameSuffix string
	// Values fill fields of files of the directory, by file name and
	// dotted path ("spec.caCert"): the run-time values of a documented
	// patch. A path the file does not hold is an error, so that the values
	// filled here are the ones the file documents.
	Values map[string]map[string]any
}

// Manifests are the objects a kustomization directory rendered to, in
// kustomize's legacy order (Namespaces and CustomResourceDefinitions
// first, as kubectl apply -k sends them).
type Manifests struct {
	// Dir is the directory rendered (or the file read, for manifests
	// applied from one file, as with kubectl apply -f).
	Dir string
	// NameSuffix is [RenderOptions.NameSuffix].
	NameSuffix string
	// Objects are the rendered objects.
	Objects []*unstructured.Unstructured
}

// Render builds the kustomization in dir with kustomize's Go API, as
// kubectl apply -k does (files outside dir may not be loaded), after the
// edits of o, made on an in-memory copy of dir: the files on disk are
// not changed.
func Render(dir string, o RenderOptions) (*Manifests, error) {
	mem := filesys.MakeFsInMemory()
	root := "/" + filepath.Base(dir)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return mem.WriteFile(filepath.Join(root, rel), b)
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: render %s: %w", dir, err)
	}
	kust := map[string]any{}
	if o.Namespace != "" {
		kust["namespace"] = o.Namespace
	}
	if o.NameSuffix != "" {
		kust["nameSuffix"] = o.NameSuffix
	}
	if err := editYAML(mem, filepath.Join(root, "kustomization.yaml"), kust, true); err != nil {
		return nil, fmt.Errorf("cluster: render %s: %w", dir, err)
	}
	for file, values := range o.Values {
		if err := editYAML(mem, filepath.Join(root, file), values, false); err != nil {
			return nil, fmt.Errorf("cluster: render %s: %w", dir, err)
		}
	}
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	res, err := krusty.MakeKustomizer(opts).Run(mem, root)
	if err != nil {
		return nil, fmt.Errorf("cluster: kustomize build %s: %w", dir, err)
	}
	m := &Manifests{Dir: dir, NameSuffix: o.NameSuffix}
	for _, r := range res.Resources() {
		// Through JSON, for the value types of unstructured (int64, not int).
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("cluster: kustomize build %s: %w", dir, err)
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("cluster: kustomize build %s: %w", dir, err)
		}
		m.Objects = append(m.Objects, obj)
	}
	return m, nil
}

// editYAML sets values (dotted paths) in the one-document YAML file
// name. With add false every path must be in the file already.
func editYAML(mem filesys.FileSystem, name string, values map[string]any, add bool) error {
	if len(values) == 0 {
		return nil
	}
	b, err := mem.ReadFile(name)
	if err != nil {
		return err
	}
	doc := map[string]any{}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(name), err)
	}
	for path, v := range values {
		fields := strings.Split(path, ".")
		if _, found, err := unstructured.NestedFieldNoCopy(doc, fields...); !add && (err != nil || !found) {
			return fmt.Errorf("%s holds no %s to fill", filepath.Base(name), path)
		}
		if err := unstructured.SetNestedField(doc, runtime.DeepCopyJSONValue(v), fields...); err != nil {
			return fmt.Errorf("%s: %s: %w", filepath.Base(name), path, err)
		}
	}
	if b, err = yaml.Marshal(doc); err != nil {
		return err
	}
	return mem.WriteFile(name, b)
}

// Name returns the rendered name of the object written name in the
// files: name with [Manifests.NameSuffix].
func (m *Manifests) Name(name string) string { return name + m.NameSuffix }

// Object returns the rendered object of kind written name in the files,
// or nil.
func (m *Manifests) Object(kind, name string) *unstructured.Unstructured {
	for _, o := range m.Objects {
		if o.GetKind() == kind && o.GetName() == m.Name(name) {
			return o
		}
	}
	return nil
}

// Namespace returns the name of the Namespace object of the manifests,
// or "".
func (m *Manifests) Namespace() string {
	for _, o := range m.Objects {
		if o.GetKind() == "Namespace" {
			return o.GetName()
		}
	}
	return ""
}

// Apply sends every object of m to the API server with server-side apply
// (field manager [FieldManager], conflicts forced), in m's order, so
// that the API server validates and stores each one (workloads included:
// without a kubelet or controllers they make no pods), then waits until
// the RBAC of every RoleBinding and ClusterRoleBinding of m is in effect
// (see [Cluster.WaitForBindings]). It logs what it applied, naming the
// directory.
func (c *Cluster) Apply(t testing.TB, m *Manifests) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*CallTimeout)
	defer cancel()
	var applied []string
	for _, obj := range m.Objects {
		ri, err := c.resourceFor(ctx, obj.GroupVersionKind(), obj.GetNamespace())
		if err != nil {
			t.Fatalf("cluster: apply %s: %s %s: %v", m.Dir, obj.GetKind(), obj.GetName(), err)
		}
		if _, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			t.Fatalf("cluster: apply %s: %s %s: %v", m.Dir, obj.GetKind(), obj.GetName(), err)
		}
		applied = append(applied, obj.GetKind()+" "+qualifiedName(obj.GetNamespace(), obj.GetName()))
	}
	t.Logf("applied %s: %s", m.Dir, strings.Join(applied, ", "))
	c.WaitForBindings(t, m)
}

func qualifiedName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// resourceFor returns the dynamic client of the resource of gvk, in ns
// when it is namespaced. The discovery cache is refreshed once when gvk
// is unknown (a CustomResourceDefinition applied a moment ago).
func (c *Cluster) resourceFor(ctx context.Context, gvk schema.GroupVersionKind, ns string) (dynamic.ResourceInterface, error) {
	c.mapperMu.Lock()
	defer c.mapperMu.Unlock()
	if c.mapper == nil {
		c.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.clientset.Discovery()))
	}
	var mapping *meta.RESTMapping
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var err error
		mapping, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			c.mapper.Reset()
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("no resource for %s: %w", gvk, err)
	}
	dyn, err := dynamic.NewForConfigAndClient(c.admin, c.adminHTTP)
	if err != nil {
		return nil, err
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return dyn.Resource(mapping.Resource).Namespace(ns), nil
	}
	return dyn.Resource(mapping.Resource), nil
}

// Get returns the stored object of kind apiVersion/kind ns/name (ns empty
// for a cluster-scoped one).
func (c *Cluster) Get(t testing.TB, apiVersion, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := c.resourceFor(ctx, gv.WithKind(kind), ns)
	if err != nil {
		t.Fatalf("cluster: get %s %s: %v", kind, qualifiedName(ns, name), err)
	}
	obj, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("cluster: get %s %s: %v", kind, qualifiedName(ns, name), err)
	}
	return obj
}

// WaitForBindings waits, as [Cluster.WaitForAccess] does, until the API
// server allows each subject of every RoleBinding and ClusterRoleBinding
// of m the first verb of every rule of the role it binds (the role read
// from m, or from the API server for a built-in one): RBAC takes effect
// a moment after it is stored.
func (c *Cluster) WaitForBindings(t testing.TB, m *Manifests) {
	t.Helper()
	for obj, b := range m.bindings(t) {
		rules := c.roleRules(t, m, b.RoleRef, obj.GetNamespace())
		for _, s := range b.Subjects {
			for _, rule := range rules {
				spec, ok := subjectAccess(s, obj.GetNamespace(), rule)
				if ok {
					c.WaitForAccess(t, spec, true)
				}
			}
		}
	}
}

// bindings yields the RoleBindings and ClusterRoleBindings of m, each as
// a RoleBinding (a ClusterRoleBinding has the same fields), with its
// object.
func (m *Manifests) bindings(t testing.TB) iter.Seq2[*unstructured.Unstructured, rbacv1.RoleBinding] {
	return func(yield func(*unstructured.Unstructured, rbacv1.RoleBinding) bool) {
		for _, obj := range m.Objects {
			if obj.GetKind() != "RoleBinding" && obj.GetKind() != "ClusterRoleBinding" {
				continue
			}
			var b rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &b); err != nil {
				t.Fatal(err)
			}
			if !yield(obj, b) {
				return
			}
		}
	}
}

// roleRules returns the rules of the role ref names.
func (c *Cluster) roleRules(t testing.TB, m *Manifests, ref rbacv1.RoleRef, ns string) []rbacv1.PolicyRule {
	t.Helper()
	obj, _ := c.boundRole(t, []*Manifests{m}, ref, ns)
	var role rbacv1.ClusterRole
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role); err != nil {
		t.Fatal(err)
	}
	return role.Rules
}

// subjectAccess is the SubjectAccessReview of s doing the first verb of
// rule, in ns for a RoleBinding's rules. It is false for rules a review
// cannot name (no verb, or wildcards only).
func subjectAccess(s rbacv1.Subject, ns string, rule rbacv1.PolicyRule) (authorizationv1.SubjectAccessReviewSpec, bool) {
	var spec authorizationv1.SubjectAccessReviewSpec
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		spec.User = "system:serviceaccount:" + s.Namespace + ":" + s.Name
		if s.Namespace == "" {
			spec.User = "system:serviceaccount:" + ns + ":" + s.Name
		}
	case rbacv1.UserKind:
		spec.User = s.Name
	case rbacv1.GroupKind:
		spec.Groups = []string{s.Name}
	}
	if len(rule.Verbs) == 0 {
		return spec, false
	}
	verb := rule.Verbs[0]
	if len(rule.NonResourceURLs) > 0 {
		spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Verb: verb, Path: strings.TrimSuffix(rule.NonResourceURLs[0], "*")}
		return spec, true
	}
	if len(rule.APIGroups) == 0 || len(rule.Resources) == 0 {
		return spec, false
	}
	res, sub, _ := strings.Cut(rule.Resources[0], "/")
	ra := &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: rule.APIGroups[0], Resource: res, Subresource: sub}
	if len(rule.ResourceNames) > 0 {
		ra.Name = rule.ResourceNames[0]
	}
	if slices.Contains([]string{ra.Verb, ra.Group, ra.Resource}, "*") {
		return spec, false
	}
	spec.ResourceAttributes = ra
	return spec, true
}
