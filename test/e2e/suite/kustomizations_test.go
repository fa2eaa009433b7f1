package suite_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// clusterScoped are the kinds of the manifests that have no namespace.
// (kustomize's built-in schema predates some of them and gives them its
// namespace; the API server drops it.)
var clusterScoped = map[string]bool{
	"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true, "CustomResourceDefinition": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true, "SnapshotMetadataService": true,
	"VolumeSnapshotContent": true, "VolumeSnapshotClass": true, "DeviceClass": true, "ResourceSlice": true,
}

// builtIn are the objects of the API server's own that manifests may
// refer to: every namespace's ServiceAccount "default" and ConfigMap
// kube-root-ca.crt, and its bootstrap ClusterRoles (system:*, admin,
// edit, view, cluster-admin).
func builtIn(kind, name string) bool {
	switch kind {
	case "ServiceAccount":
		return name == "default"
	case "ConfigMap":
		return name == "kube-root-ca.crt"
	case "ClusterRole":
		return strings.HasPrefix(name, "system:") || slices.Contains([]string{"admin", "edit", "view", "cluster-admin"}, name)
	}
	return false
}

// kustomization is one rendered kustomization of examples/*/deploy/**.
type kustomization struct {
	dir, rel  string // the directory; its path under examples/
	text      string // kustomization.yaml
	namespace string // its namespace field
	m         *cluster.Manifests
	server    *kustomization // examples/NAME/deploy's, for a part below it (client/, driver/); nil for that one
}

// TestKustomizationsStandAlone renders every kustomization.yaml of
// examples/*/deploy/** as shipped, without any override, and checks what
// a user who applies it as it is gets: every namespaced object in its
// kustomization's namespace or its server's; every reference (a
// workload's ServiceAccount, ConfigMaps and Secrets, a Service it calls,
// a binding's role and subjects, a Service's or NetworkPolicy's pods, a
// policy binding's policy, a SnapshotMetadataService's address) resolved
// inside the rendered objects, the server's (for a part the comments say
// is applied after it), or to a prerequisite its comments name (or one the
// API server has); the commands of its comments naming its own
// directories and namespaces; no two kustomizations copies of each other;
// Pod Security warn and audit at restricted or baseline, never below
// enforce; every image pinned by digest (unless a comment beside it says
// "Not pinned:" and why), and no test image; a NetworkPolicy that admits
// only the proxy's ports to every pod with a plain-HTTP upstream; TLS a
// user can copy (every example server that listens for TLS is given its
// certificate, no client skips verifying one); audiences per deployment
// (each example server's derived from the namespace, and its callers'
// tokens for the same); the image of a server's own program pinned by the
// line hack/image prints (kustomize edit set image reviewauth/NAME=...@DIGEST
// sets every container of it); no ServiceAccount's token mounted into
// every pod that names it. It needs no cluster.
func TestKustomizationsStandAlone(t *testing.T) {
	t.Parallel()
	ks := renderKustomizations(t)
	report := func(t *testing.T, k *kustomization, key, detail string) {
		t.Helper()
		t.Errorf("%s: %s: %s", k.rel, key, detail)
	}
	for _, k := range ks {
		t.Run(k.rel, func(t *testing.T) {
			f := func(key, format string, args ...any) { t.Helper(); report(t, k, key, fmt.Sprintf(format, args...)) }
			checkNamespaces(k, f)
			checkReferences(k, f)
			checkCommands(k, ks, f)
			checkPodSecurity(k, f)
			checkImages(t, k, f)
			checkNetworkPolicies(k, f)
			checkTLS(k, f)
			checkAudiences(t, k, f)
			checkPin(t, k, f)
			checkTokens(k, f)
		})
	}
	t.Run("copies", func(t *testing.T) {
		for i, a := range ks {
			for _, b := range ks[i+1:] {
				if stripComments(a.text) == stripComments(b.text) {
					report(t, b, "copy of "+a.rel, "its kustomization.yaml is "+a.rel+"'s, comments aside")
				}
				if canonical(t, a.m) == canonical(t, b.m) {
					report(t, b, "renders as "+a.rel, "it renders to "+a.rel+"'s objects, namespaces aside")
				}
			}
		}
	})
}

// renderKustomizations renders every kustomization of examples/*/deploy/**
// as shipped, servers first.
func renderKustomizations(t *testing.T) []*kustomization {
	t.Helper()
	var ks []*kustomization
	servers := map[string]*kustomization{}
	dirs := deployDirs(t)
	slices.SortFunc(dirs, func(a, b string) int { return len(a) - len(b) }) // examples/NAME/deploy before its parts
	for _, dir := range dirs {
		rel, _ := filepath.Rel(examplesDir(), dir)
		rel = filepath.ToSlash(rel)
		b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var fields struct {
			Namespace string `json:"namespace"`
		}
		if err := yaml.Unmarshal(b, &fields); err != nil {
			t.Fatalf("%s/kustomization.yaml: %v", rel, err)
		}
		m, err := cluster.Render(dir, cluster.RenderOptions{})
		if err != nil {
			t.Errorf("%s does not render as shipped: %v", rel, err)
			continue
		}
		k := &kustomization{dir: dir, rel: rel, text: string(b), namespace: fields.Namespace, m: m}
		name, _, _ := strings.Cut(rel, "/")
		if s, ok := servers[name]; ok {
			k.server = s
		} else if rel == name+"/deploy" {
			servers[name] = k
		}
		ks = append(ks, k)
	}
	return ks
}

// serverNamespace is the namespace of the server's kustomization.
func (k *kustomization) serverNamespace() string {
	if k.server != nil {
		return k.server.namespace
	}
	return k.namespace
}

// checkNamespaces: every namespaced object is in the kustomization's
// namespace or its server's.
func checkNamespaces(k *kustomization, f func(key, format string, args ...any)) {
	for _, o := range k.m.Objects {
		if clusterScoped[o.GetKind()] {
			continue
		}
		if ns := o.GetNamespace(); ns == "" || (ns != k.namespace && ns != k.serverNamespace()) {
			f("namespace of "+o.GetKind()+" "+o.GetName(), "it is in namespace %q; want the kustomization's %q or its server's %q", ns, k.namespace, k.serverNamespace())
		}
	}
}

// find reports whether an object of kind ns/name is in k's rendered
// objects or its server's, or is a prerequisite k's comments (or its
// server's) name, or is one of the API server's own.
func (k *kustomization) find(kind, ns, name string) bool {
	sets := []*cluster.Manifests{k.m}
	texts := []string{k.text}
	if k.server != nil {
		sets = append(sets, k.server.m)
		texts = append(texts, k.server.text)
	}
	for _, m := range sets {
		for _, o := range m.Objects {
			if o.GetKind() == kind && o.GetName() == name && (clusterScoped[kind] || o.GetNamespace() == ns) {
				return true
			}
		}
	}
	if builtIn(kind, name) {
		return true
	}
	// A prerequisite: named in the comments, as a whole word.
	re := regexp.MustCompile(`(^|[^a-z0-9.-])` + regexp.QuoteMeta(name) + `($|[^a-z0-9-])`)
	for _, text := range texts {
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") && re.MatchString(line) {
				return true
			}
		}
	}
	return false
}

// serviceURL matches a Service named in a URL of a container's arguments:
// NAME, NAME.NAMESPACE or NAME.NAMESPACE.svc, where NAMESPACE may be an
// environment variable ($(VAR) or ${VAR}: the pod's own namespace in the
// manifests).
var serviceURL = regexp.MustCompile(`https?://([a-z][a-z0-9-]*)(?:\.([a-z0-9-]+|\$\{[A-Z_]+\}|\$\([A-Z_]+\)))?(?:\.svc(?:\.cluster\.local)?)?(?::[0-9]+)?(?:[/"' ]|$)`)

// checkReferences: every reference resolves (see find).
func checkReferences(k *kustomization, f func(key, format string, args ...any)) {
	ref := func(from *unstructured.Unstructured, kind, ns, name string) {
		if name != "" && !k.find(kind, ns, name) {
			f(from.GetKind()+" "+from.GetName()+" refers to "+kind+" "+name, "%s %s is not among the rendered objects (nor the server's), not a prerequisite the comments name, nor one of the API server's own", kind, qualified(ns, name))
		}
	}
	for _, o := range k.m.Objects {
		ns := o.GetNamespace()
		switch o.GetKind() {
		case "RoleBinding", "ClusterRoleBinding":
			var b rbacv1.RoleBinding
			mustConvert(o, &b)
			if b.RoleRef.Kind == "Role" {
				ref(o, "Role", ns, b.RoleRef.Name)
			} else {
				ref(o, "ClusterRole", "", b.RoleRef.Name)
			}
			for _, s := range b.Subjects {
				if s.Kind == rbacv1.ServiceAccountKind {
					sns := s.Namespace
					if sns == "" {
						sns = ns
					}
					ref(o, "ServiceAccount", sns, s.Name)
				}
			}
		case "Service":
			var s corev1.Service
			mustConvert(o, &s)
			if len(s.Spec.Selector) > 0 && !k.selects(ns, labels.SelectorFromSet(s.Spec.Selector)) {
				f("Service "+o.GetName()+" selects no pods", "its selector %v matches no pod template in namespace %s", s.Spec.Selector, ns)
			}
		case "NetworkPolicy":
			var np networkingv1.NetworkPolicy
			mustConvert(o, &np)
			sel, err := metav1LabelSelector(np.Spec.PodSelector.MatchLabels)
			if err != nil || !k.selects(ns, sel) {
				f("NetworkPolicy "+o.GetName()+" selects no pods", "its podSelector %v matches no pod template in namespace %s", np.Spec.PodSelector.MatchLabels, ns)
			}
		case "ValidatingAdmissionPolicyBinding":
			name, _, _ := unstructured.NestedString(o.Object, "spec", "policyName")
			ref(o, "ValidatingAdmissionPolicy", "", name)
		case "SnapshotMetadataService":
			addr, _, _ := unstructured.NestedString(o.Object, "spec", "address")
			host, _, _ := strings.Cut(addr, ":")
			parts := strings.Split(host, ".")
			if len(parts) < 3 || parts[2] != "svc" {
				f("SnapshotMetadataService "+o.GetName()+" address", "spec.address %q is not a Service's NAME.NAMESPACE.svc:PORT", addr)
				continue
			}
			ref(o, "Service", parts[1], parts[0])
		}
		tmpl, ok := podTemplate(o)
		if !ok {
			continue
		}
		sa := tmpl.Spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		ref(o, "ServiceAccount", ns, sa)
		for _, v := range tmpl.Spec.Volumes {
			switch {
			case v.ConfigMap != nil:
				ref(o, "ConfigMap", ns, v.ConfigMap.Name)
			case v.Secret != nil:
				ref(o, "Secret", ns, v.Secret.SecretName)
			case v.Projected != nil:
				for _, src := range v.Projected.Sources {
					if src.ConfigMap != nil {
						ref(o, "ConfigMap", ns, src.ConfigMap.Name)
					}
					if src.Secret != nil {
						ref(o, "Secret", ns, src.Secret.Name)
					}
				}
			}
		}
		for _, ct := range append(slices.Clone(tmpl.Spec.InitContainers), tmpl.Spec.Containers...) {
			for _, e := range ct.Env {
				if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
					ref(o, "ConfigMap", ns, e.ValueFrom.ConfigMapKeyRef.Name)
				}
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					ref(o, "Secret", ns, e.ValueFrom.SecretKeyRef.Name)
				}
			}
			for _, a := range slices.Concat(ct.Command, ct.Args) {
				for _, m := range serviceURL.FindAllStringSubmatch(a, -1) {
					sns := m[2]
					if sns == "" || strings.HasPrefix(sns, "$") {
						sns = ns
					}
					if m[1] != "localhost" {
						ref(o, "Service", sns, m[1])
					}
				}
			}
		}
	}
}

// selects reports whether a pod template of k (or its server's) in ns
// has labels sel matches.
func (k *kustomization) selects(ns string, sel labels.Selector) bool {
	sets := []*cluster.Manifests{k.m}
	if k.server != nil {
		sets = append(sets, k.server.m)
	}
	for _, m := range sets {
		for _, o := range m.Objects {
			if tmpl, ok := podTemplate(o); ok && o.GetNamespace() == ns && sel.Matches(labels.Set(tmpl.Labels)) {
				return true
			}
		}
	}
	return false
}

func metav1LabelSelector(match map[string]string) (labels.Selector, error) {
	if len(match) == 0 {
		return nil, fmt.Errorf("an empty selector selects every pod")
	}
	return labels.SelectorFromSet(match), nil
}

// kubectlCommand matches the commands the comments give: apply -k PATH,
// and -n NAMESPACE.
var (
	applyK   = regexp.MustCompile(`kubectl apply -k (\S+)`)
	kubectlN = regexp.MustCompile(`kubectl -n (\S+)`)
)

// checkCommands: the commands in k's comments name its own directory, its
// server's or a part of it, and its own namespaces.
func checkCommands(k *kustomization, ks []*kustomization, f func(key, format string, args ...any)) {
	server := k.rel
	if k.server != nil {
		server = k.server.rel
	}
	for _, m := range applyK.FindAllStringSubmatch(k.text, -1) {
		p := strings.TrimPrefix(strings.TrimSuffix(m[1], "/"), "examples/")
		ok := p == k.rel || p == server || slices.ContainsFunc(ks, func(o *kustomization) bool { return o.rel == p && o.server == k })
		if !ok {
			f("comment applies "+m[1], "its comments apply %s, which is neither this directory (examples/%s) nor its server's or a part of it", m[1], k.rel)
		}
	}
	for _, m := range kubectlN.FindAllStringSubmatch(k.text, -1) {
		if m[1] != k.namespace && m[1] != k.serverNamespace() {
			f("comment names namespace "+m[1], "its comments run kubectl in namespace %s; its namespace is %s (its server's %s)", m[1], k.namespace, k.serverNamespace())
		}
	}
}

// podSecurityLevels orders Pod Security's levels.
var podSecurityLevels = map[string]int{"privileged": 0, "baseline": 1, "restricted": 2}

// checkPodSecurity: every Namespace has Pod Security enforce, warn and
// audit labels; warn and audit at restricted or baseline, and never below
// enforce, so that drift is reported.
func checkPodSecurity(k *kustomization, f func(key, format string, args ...any)) {
	for _, o := range k.m.Objects {
		if o.GetKind() != "Namespace" {
			continue
		}
		l := o.GetLabels()
		enforce, ok := podSecurityLevels[l["pod-security.kubernetes.io/enforce"]]
		if !ok {
			f("Namespace "+o.GetName()+" enforce", "pod-security.kubernetes.io/enforce is %q; want a level", l["pod-security.kubernetes.io/enforce"])
		}
		for _, mode := range []string{"warn", "audit"} {
			level := l["pod-security.kubernetes.io/"+mode]
			if n, ok := podSecurityLevels[level]; !ok || n < podSecurityLevels["baseline"] || n < enforce {
				f("Namespace "+o.GetName()+" "+mode+" "+level, "pod-security.kubernetes.io/%s is %q; want restricted, or baseline where that is the honest level, and not below enforce, so that drift is reported", mode, level)
			}
		}
	}
}

// digest is an image pinned by digest.
var digest = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)

// checkImages: every container's image is pinned by digest, unless a
// comment beside its line in the source says "Not pinned:" and why, and
// no test image runs.
func checkImages(t *testing.T, k *kustomization, f func(key, format string, args ...any)) {
	t.Helper()
	for _, o := range k.m.Objects {
		tmpl, ok := podTemplate(o)
		if !ok {
			continue
		}
		for _, ct := range append(slices.Clone(tmpl.Spec.InitContainers), tmpl.Spec.Containers...) {
			if strings.Contains(ct.Image, "e2e-test-images") {
				f(o.GetKind()+" "+o.GetName()+" container "+ct.Name+" test image", "it runs %s, a test image", ct.Image)
			}
			if !digest.MatchString(ct.Image) && !notPinned(t, k.dir, ct.Image) {
				f(o.GetKind()+" "+o.GetName()+" container "+ct.Name+" image", "%s is not pinned by digest (and no comment beside it says \"Not pinned:\" and why)", ct.Image)
			}
		}
	}
}

// notPinned reports whether the line that writes image in a YAML file of
// dir carries, or follows, a comment "Not pinned: REASON".
func notPinned(t *testing.T, dir, image string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?i)not pinned:\s*\S`)
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i, line := range lines {
			if !strings.Contains(line, "image: "+image) {
				continue
			}
			comment := line
			for j := i - 1; j >= 0 && strings.HasPrefix(strings.TrimSpace(lines[j]), "#"); j-- {
				comment = lines[j] + "\n" + comment
			}
			if re.MatchString(comment) {
				return true
			}
		}
	}
	return false
}

// checkNetworkPolicies: every pod template with a container proxying to a
// plain-HTTP upstream (--upstream=http://...) is selected by a
// NetworkPolicy for Ingress that admits only that container's ports, so
// that the upstream's port is reached through the proxy only.
func checkNetworkPolicies(k *kustomization, f func(key, format string, args ...any)) {
	for _, o := range k.m.Objects {
		tmpl, ok := podTemplate(o)
		if !ok {
			continue
		}
		for _, ct := range tmpl.Spec.Containers {
			upstream := ""
			for _, a := range ct.Args {
				if v, ok := strings.CutPrefix(a, "--upstream="); ok && strings.HasPrefix(v, "http://") {
					upstream = v
				}
			}
			if upstream == "" {
				continue
			}
			u, err := url.Parse(upstream)
			if err != nil {
				f(o.GetKind()+" "+o.GetName()+" upstream", "--upstream=%s: %v", upstream, err)
				continue
			}
			key := o.GetKind() + " " + o.GetName() + " container " + ct.Name + " NetworkPolicy"
			var policies []networkingv1.NetworkPolicy
			for _, p := range k.m.Objects {
				if p.GetKind() != "NetworkPolicy" || p.GetNamespace() != o.GetNamespace() {
					continue
				}
				var np networkingv1.NetworkPolicy
				mustConvert(p, &np)
				if len(np.Spec.PodSelector.MatchLabels) > 0 && labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(labels.Set(tmpl.Labels)) &&
					slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
					policies = append(policies, np)
				}
			}
			if len(policies) == 0 {
				f(key, "it proxies to the plain-HTTP upstream %s, and no NetworkPolicy for Ingress selects its pods: the upstream's port is reached around it", upstream)
				continue
			}
			own := map[string]bool{}
			for _, p := range ct.Ports {
				own[p.Name], own[strconv.Itoa(int(p.ContainerPort))] = true, true
			}
			for _, np := range policies {
				for _, rule := range np.Spec.Ingress {
					if len(rule.Ports) == 0 {
						f(key, "NetworkPolicy %s admits every port, the upstream's (%s) too", np.Name, u.Port())
					}
					for _, p := range rule.Ports {
						port := portName(p.Port)
						if !own[port] || port == u.Port() {
							f(key, "NetworkPolicy %s admits port %s, which is not one of container %s's ports %v (the upstream's is %s)", np.Name, port, ct.Name, slices.Sorted(maps.Keys(own)), u.Port())
						}
					}
				}
			}
		}
	}
}

func portName(p *intstr.IntOrString) string {
	if p == nil {
		return "(every port)"
	}
	return p.String()
}

// podTemplate is the pod template of a workload (spec.template).
func podTemplate(o *unstructured.Unstructured) (corev1.PodTemplateSpec, bool) {
	var tmpl corev1.PodTemplateSpec
	raw, found, err := unstructured.NestedMap(o.Object, "spec", "template")
	if err != nil || !found || runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &tmpl) != nil || len(tmpl.Spec.Containers) == 0 {
		return tmpl, false
	}
	return tmpl, true
}

func mustConvert(o *unstructured.Unstructured, out any) {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
		panic(fmt.Sprintf("%s %s: %v", o.GetKind(), o.GetName(), err))
	}
}

func qualified(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// stripComments is a YAML text without its comment lines and blank
// lines.
func stripComments(text string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "#") {
			out = append(out, strings.TrimRight(line, " "))
		}
	}
	return strings.Join(out, "\n")
}

// canonical is m's objects without namespaces (in metadata and the
// kustomization's namespace anywhere else), as JSON.
func canonical(t *testing.T, m *cluster.Manifests) string {
	t.Helper()
	var objs []string
	nss := map[string]bool{}
	for _, o := range m.Objects {
		if o.GetNamespace() != "" {
			nss[o.GetNamespace()] = true
		}
		if o.GetKind() == "Namespace" {
			nss[o.GetName()] = true
		}
	}
	for _, o := range m.Objects {
		b, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		for ns := range nss {
			s = strings.ReplaceAll(s, `"`+ns+`"`, `"NS"`)
		}
		objs = append(objs, s)
	}
	slices.Sort(objs)
	return strings.Join(objs, "\n")
}

// insecure matches what skips verifying a certificate: curl's -k in any
// cluster of short options, --insecure, and any insecure-skip-verify
// spelling.
var insecure = regexp.MustCompile(`(?i)(^|\s)-[a-z]*k[a-z]*(\s|$)|--insecure\b|insecure-?skip-?(tls-?)?verify`)

// checkTLS: every example server that listens for TLS in a workload is
// given a certificate (--tls-cert-file: the self-signed one is for the
// quickstart only), and nothing in the directory skips verifying one.
func checkTLS(k *kustomization, f func(key, format string, args ...any)) {
	for _, o := range k.m.Objects {
		tmpl, ok := podTemplate(o)
		if !ok {
			continue
		}
		for _, ct := range append(slices.Clone(tmpl.Spec.InitContainers), tmpl.Spec.Containers...) {
			args := strings.Join(slices.Concat(ct.Command, ct.Args), "\n")
			if _, example := exampleImage(ct.Image); example {
				listens := regexp.MustCompile(`(?m)^--(secure-listen-address|listen|tls-listen)=`).MatchString(args)
				if listens && !strings.Contains(args, "--tls-cert-file=") {
					f(o.GetKind()+" "+o.GetName()+" container "+ct.Name+" certificate", "it serves TLS without --tls-cert-file: a self-signed certificate no client can verify (the quickstart's, not a deployment's)")
				}
			}
			for _, a := range slices.Concat(ct.Command, ct.Args) {
				if (strings.Contains(a, "curl") || !strings.Contains(a, " ")) && insecure.MatchString(a) {
					f(o.GetKind()+" "+o.GetName()+" container "+ct.Name+" skips verification", "%q skips verifying the server's certificate", a)
				}
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(k.dir, "*.yaml"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f("read "+filepath.Base(p), "%v", err)
			continue
		}
		if regexp.MustCompile(`(?i)insecure-?skip-?(tls-?)?verify`).Match(b) {
			f(filepath.Base(p)+" skips verification", "it sets an insecure-skip-verify option")
		}
	}
}

// audienceFlags are the flags of the example servers that set the
// audience callers' tokens must be minted for.
var audienceFlags = []string{"--audience=", "--auth-token-audiences="}

// audiences are the audiences of the example servers' containers of m,
// and the audiences of the tokens its workloads project.
func audiences(m *cluster.Manifests) (server, projected []string) {
	for _, o := range m.Objects {
		tmpl, ok := podTemplate(o)
		if !ok {
			continue
		}
		for _, ct := range tmpl.Spec.Containers {
			if _, example := exampleImage(ct.Image); !example {
				continue
			}
			for _, a := range ct.Args {
				for _, flag := range audienceFlags {
					if v, ok := strings.CutPrefix(a, flag); ok {
						server = append(server, strings.Split(v, ",")...)
					}
				}
			}
		}
		for _, v := range tmpl.Spec.Volumes {
			if v.Projected == nil {
				continue
			}
			for _, src := range v.Projected.Sources {
				if src.ServiceAccountToken != nil && src.ServiceAccountToken.Audience != "" {
					projected = append(projected, src.ServiceAccountToken.Audience)
				}
			}
		}
	}
	return server, projected
}

// checkAudiences: an example server's audience is its deployment's
// (rendered in another namespace, it names that namespace: a token for
// one deployment is refused by every other), and the tokens a part
// projects (its callers') are for its server's audience, as shipped and
// in another namespace: a part in its server's namespace moves with it,
// so rendered there with its server it names the moved server's; a part
// in a namespace of its own (draproxy's driver/, in the driver's) names
// its server where the server is, so rendered in another namespace alone
// it still names the server's as shipped (a part that derived its
// callers' audience from its own namespace would name none).
func checkAudiences(t *testing.T, k *kustomization, f func(key, format string, args ...any)) {
	t.Helper()
	const other = "audience-check"
	moved := func(k *kustomization) *cluster.Manifests {
		m, err := cluster.Render(k.dir, cluster.RenderOptions{Namespace: other})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	server, projected := audiences(k.m)
	movedServer, movedProjected := audiences(moved(k))
	for i, a := range movedServer {
		if !strings.Contains(a, other) {
			f("audience "+server[i], "the audience %q is the same in every namespace: a token for one deployment is accepted by every other that keeps it; derive it from the namespace", server[i])
		}
	}
	if k.server == nil || len(projected) == 0 {
		return
	}
	serverAudiences, _ := audiences(k.server.m)
	movedServerAudiences, how := serverAudiences, "alone (its server where it is)"
	if k.namespace == k.server.namespace {
		movedServerAudiences, _ = audiences(moved(k.server))
		how = "with its server"
	}
	for i, a := range projected {
		if !slices.Contains(serverAudiences, a) {
			f("projected audience "+a, "its workloads project tokens for %q; its server's audiences are %q", a, serverAudiences)
		}
		if i < len(movedProjected) && !slices.Contains(movedServerAudiences, movedProjected[i]) {
			f("projected audience "+a+" in another namespace", "rendered in namespace %s %s, it projects tokens for %q; its server's audiences are %q", other, how, movedProjected[i], movedServerAudiences)
		}
	}
}

// checkPin: in a server's kustomization, what hack/image's pin line
// writes (kustomize edit set image reviewauth/NAME=REPOSITORY/NAME@DIGEST:
// the images entry of reviewauth/NAME with newName and digest) makes
// every container of NAME's image run exactly that image.
func checkPin(t *testing.T, k *kustomization, f func(key, format string, args ...any)) {
	t.Helper()
	if k.server != nil {
		return
	}
	program, _, _ := strings.Cut(k.rel, "/")
	const pinned = "registry.example.com/reviewauth/"
	const dgst = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	images := []any{map[string]any{"name": "reviewauth/" + program, "newName": pinned + program, "digest": dgst}}
	m, err := cluster.Render(k.dir, cluster.RenderOptions{Values: map[string]map[string]any{"kustomization.yaml": {"images": images}}})
	if err != nil {
		f("pin", "with the images entry hack/image's pin line writes, it does not render: %v (is there an images entry?)", err)
		return
	}
	n := 0
	for _, o := range m.Objects {
		tmpl, ok := podTemplate(o)
		if !ok {
			continue
		}
		for _, ct := range append(slices.Clone(tmpl.Spec.InitContainers), tmpl.Spec.Containers...) {
			if name, ok := exampleImage(ct.Image); ok && name == program {
				n++
				if ct.Image != pinned+program+"@"+dgst {
					f("pin "+o.GetKind()+" "+o.GetName()+" container "+ct.Name, "pinned, it runs %s; want %s", ct.Image, pinned+program+"@"+dgst)
				}
			}
		}
	}
	if n == 0 {
		f("pin", "pinned, no container runs %s's image", program)
	}
}

// checkTokens: every ServiceAccount has automountServiceAccountToken
// false, and so does every pod template: a token is mounted where a
// container asks for it (a projected volume), never into every
// container of every pod that names the ServiceAccount.
func checkTokens(k *kustomization, f func(key, format string, args ...any)) {
	for _, o := range k.m.Objects {
		if o.GetKind() == "ServiceAccount" {
			if v, found, _ := unstructured.NestedBool(o.Object, "automountServiceAccountToken"); !found || v {
				f("ServiceAccount "+o.GetName()+" automounts", "automountServiceAccountToken is not false: every pod that names it gets its API token in every container")
			}
		}
		if tmpl, ok := podTemplate(o); ok {
			if v := tmpl.Spec.AutomountServiceAccountToken; v == nil || *v {
				f(o.GetKind()+" "+o.GetName()+" automounts", "its pods' automountServiceAccountToken is not false: every container gets the API token")
			}
		}
	}
}
