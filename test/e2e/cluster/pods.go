package cluster

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/kubernetes/pkg/fieldpath"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"
)

// The cluster runs no controllers and no kubelet. The helpers below do
// their part for a workload from manifests: a Pod from its template (the
// workload's controller and the scheduler), and what the kubelet gives a
// container (its arguments expanded, its volumes' files, its
// service-account tokens), so that the container's program runs as a
// local process with what it would have in the pod.

// inClusterTokenDir is where rest.InClusterConfig reads the token and CA
// of the pod's ServiceAccount.
const inClusterTokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// rootCAConfigMap is the ConfigMap kube-controller-manager's
// root-ca-cert-publisher keeps in every namespace, with the cluster's CA.
const rootCAConfigMap = "kube-root-ca.crt"

// CreatePodFromTemplate creates a Pod from the pod template (spec.template)
// of the stored workload kind written name in m (a Deployment, DaemonSet,
// StatefulSet, ReplicaSet or Job), as its controller would: named after
// the workload with a random suffix, with the template's labels,
// annotations and spec, and spec.nodeName o.NodeName (the scheduler's
// part: with a Node of that name, tokens bound to the pod carry the
// node's name and UID). [PodOptions.ServiceAccount] is ignored: the
// template names it. Admission, Pod Security included, checks it as it
// checks the controller's pods. It never runs.
func (c *Cluster) CreatePodFromTemplate(t testing.TB, m *Manifests, kind, name string, o PodOptions) *corev1.Pod {
	t.Helper()
	rendered := m.Object(kind, name)
	if rendered == nil {
		t.Fatalf("cluster: no %s %s in %s", kind, m.Name(name), m.Dir)
	}
	stored := c.Get(t, rendered.GetAPIVersion(), kind, rendered.GetNamespace(), rendered.GetName())
	raw, found, err := unstructured.NestedMap(stored.Object, "spec", "template")
	if err != nil || !found {
		t.Fatalf("cluster: %s %s has no spec.template: %v", kind, stored.GetName(), err)
	}
	var tmpl corev1.PodTemplateSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &tmpl); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        UniqueName(stored.GetName()),
			Namespace:   stored.GetNamespace(),
			Labels:      tmpl.Labels,
			Annotations: tmpl.Annotations,
		},
		Spec: tmpl.Spec,
	}
	pod.Spec.NodeName = o.NodeName
	ctx, cancel := callCtx(t)
	defer cancel()
	created, err := c.clientset.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("cluster: create a pod from the template of %s %s/%s: %v", kind, stored.GetNamespace(), stored.GetName(), err)
	}
	return created
}

// Container is a container of a Pod made ready to run as a local process,
// as the kubelet would start it (see [Cluster.PrepareContainer]).
type Container struct {
	// Name and Image are the container's.
	Name, Image string
	// Command and Args are the container's, with $(VAR) references
	// expanded from its environment as the kubelet expands them, and
	// every path under a volume mount replaced by the local directory
	// holding that volume's files.
	Command, Args []string
	// Env is the container's environment (values and the downward API).
	Env map[string]string
	// Volumes maps each mount path of the container to its local
	// directory.
	Volumes map[string]string
	// Kubeconfig is a kubeconfig file for the API server that reads the
	// token of the container's mount at
	// /var/run/secrets/kubernetes.io/serviceaccount, what
	// rest.InClusterConfig would read; "" when the container has no such
	// mount.
	Kubeconfig string
}

// PrepareContainer does for the container name of pod what the kubelet
// does before starting it: it fills a local directory for each of its
// volume mounts (configMap and secret volumes from the stored objects;
// projected volumes with their ConfigMaps, Secrets, downward API files,
// and service-account tokens requested as the kubelet requests them: for
// the pod's ServiceAccount, the source's audience (none: the API
// server's) and expirationSeconds, bound to the pod; emptyDir volumes
// empty; hostPath volumes shared by the pods of one node), resolves its
// environment (values, $(VAR) references, the pod's fields) and expands
// its command and arguments. The kube-root-ca.crt ConfigMap, which
// kube-controller-manager would publish, is created with the serving CA
// when the namespace lacks it.
func (c *Cluster) PrepareContainer(t testing.TB, pod *corev1.Pod, name string) *Container {
	t.Helper()
	i := slices.IndexFunc(pod.Spec.Containers, func(ct corev1.Container) bool { return ct.Name == name })
	if i < 0 {
		t.Fatalf("cluster: pod %s/%s has no container %q", pod.Namespace, pod.Name, name)
	}
	spec := pod.Spec.Containers[i]
	out := &Container{Name: spec.Name, Image: spec.Image, Env: map[string]string{}, Volumes: map[string]string{}}

	for _, e := range spec.Env {
		switch {
		case e.ValueFrom == nil:
			out.Env[e.Name] = expansion.Expand(e.Value, expansion.MappingFuncFor(out.Env))
		case e.ValueFrom.FieldRef != nil:
			v, err := podField(pod, e.ValueFrom.FieldRef.FieldPath)
			if err != nil {
				t.Fatalf("cluster: container %s env %s: %v", name, e.Name, err)
			}
			out.Env[e.Name] = v
		default:
			t.Fatalf("cluster: container %s env %s: only values and fieldRef are supported", name, e.Name)
		}
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	for _, mnt := range spec.VolumeMounts {
		v, ok := volumes[mnt.Name]
		if !ok {
			t.Fatalf("cluster: container %s mounts the undefined volume %q", name, mnt.Name)
		}
		dir := c.volumeDir(t, pod, v)
		if mnt.SubPath != "" {
			dir = filepath.Join(dir, mnt.SubPath)
		}
		out.Volumes[mnt.MountPath] = dir
		if mnt.MountPath == inClusterTokenDir {
			out.Kubeconfig = c.tokenFileKubeconfig(t, filepath.Join(dir, "token"))
		}
	}

	mounts := make([]string, 0, len(out.Volumes))
	for p := range out.Volumes {
		mounts = append(mounts, p)
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) }) // the deepest mount first
	expand := func(in []string) []string {
		var res []string
		for _, a := range in {
			a = expansion.Expand(a, expansion.MappingFuncFor(out.Env))
			res = append(res, localPath(a, mounts, out.Volumes))
		}
		return res
	}
	out.Command, out.Args = expand(spec.Command), expand(spec.Args)
	return out
}

// localPath replaces the mount path that a (or the value of a --flag=a)
// starts with by its local directory.
func localPath(a string, mounts []string, dirs map[string]string) string {
	prefix, value := "", a
	if strings.HasPrefix(a, "-") {
		f, v, ok := strings.Cut(a, "=")
		if !ok {
			return a
		}
		prefix, value = f+"=", v
	}
	for _, m := range mounts {
		if value == m || strings.HasPrefix(value, m+"/") {
			return prefix + dirs[m] + strings.TrimPrefix(value, m)
		}
	}
	return a
}

// podField is the value of the downward API's fieldRef path for pod, as
// the kubelet resolves it. The pod's and its host's IPs are the loopback
// address: the container runs as a process of this host.
func podField(pod *corev1.Pod, fieldPath string) (string, error) {
	switch fieldPath {
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs", "status.hostIP", "status.hostIPs":
		return "127.0.0.1", nil
	}
	return fieldpath.ExtractFieldPathAsString(pod, fieldPath)
}

// volumeDir returns a local directory holding the files of volume v of
// pod.
func (c *Cluster) volumeDir(t testing.TB, pod *corev1.Pod, v corev1.Volume) string {
	t.Helper()
	if v.HostPath != nil {
		// One directory per node and path, as on a node.
		dir := filepath.Join(c.dir, "nodes", pod.Spec.NodeName, filepath.FromSlash(path.Clean("/"+v.HostPath.Path)))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	dir := t.TempDir()
	write := func(name string, b []byte) {
		p := filepath.Join(dir, filepath.FromSlash(path.Clean("/"+name)))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	switch {
	case v.EmptyDir != nil:
	case v.ConfigMap != nil:
		for k, b := range c.configMapFiles(t, pod.Namespace, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional) {
			write(k, b)
		}
	case v.Secret != nil:
		for k, b := range c.secretFiles(t, pod.Namespace, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional) {
			write(k, b)
		}
	case v.Projected != nil:
		for _, src := range v.Projected.Sources {
			switch {
			case src.ServiceAccountToken != nil:
				write(src.ServiceAccountToken.Path, []byte(c.podToken(t, pod, *src.ServiceAccountToken)))
			case src.ConfigMap != nil:
				for k, b := range c.configMapFiles(t, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional) {
					write(k, b)
				}
			case src.Secret != nil:
				for k, b := range c.secretFiles(t, pod.Namespace, src.Secret.Name, src.Secret.Items, src.Secret.Optional) {
					write(k, b)
				}
			case src.DownwardAPI != nil:
				for _, item := range src.DownwardAPI.Items {
					if item.FieldRef == nil {
						t.Fatalf("cluster: volume %s: only fieldRef downward API items are supported", v.Name)
					}
					val, err := podField(pod, item.FieldRef.FieldPath)
					if err != nil {
						t.Fatalf("cluster: volume %s: %v", v.Name, err)
					}
					write(item.Path, []byte(val))
				}
			default:
				t.Fatalf("cluster: volume %s: a projected source of an unsupported kind", v.Name)
			}
		}
	default:
		t.Fatalf("cluster: volume %s: unsupported kind (emptyDir, hostPath, configMap, secret and projected are)", v.Name)
	}
	return dir
}

// podToken requests the token the kubelet requests for src in pod.
func (c *Cluster) podToken(t testing.TB, pod *corev1.Pod, src corev1.ServiceAccountTokenProjection) string {
	t.Helper()
	o := TokenOptions{BoundPod: pod}
	if src.Audience != "" {
		o.Audiences = []string{src.Audience}
	}
	if src.ExpirationSeconds != nil {
		o.ExpirationSeconds = *src.ExpirationSeconds
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	return c.RequestToken(t, pod.Namespace, sa, o)
}

// configMapFiles are the files of a configMap volume or projection.
func (c *Cluster) configMapFiles(t testing.TB, ns, name string, items []corev1.KeyToPath, optional *bool) map[string][]byte {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	cm, err := c.clientset.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && name == rootCAConfigMap {
		cm, err = c.clientset.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: rootCAConfigMap},
			Data:       map[string]string{"ca.crt": string(c.servingCA.CertPEM)},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cm, err = c.clientset.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		}
	}
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return nil
	}
	if err != nil {
		t.Fatalf("cluster: configMap %s/%s: %v", ns, name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles(t, "configMap "+ns+"/"+name, data, items, optional)
}

// secretFiles are the files of a secret volume or projection.
func (c *Cluster) secretFiles(t testing.TB, ns, name string, items []corev1.KeyToPath, optional *bool) map[string][]byte {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	s, err := c.clientset.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return nil
	}
	if err != nil {
		t.Fatalf("cluster: secret %s/%s: %v", ns, name, err)
	}
	return keyFiles(t, "secret "+ns+"/"+name, s.Data, items, optional)
}

// keyFiles maps data to file names: every key, or items only.
func keyFiles(t testing.TB, what string, data map[string][]byte, items []corev1.KeyToPath, optional *bool) map[string][]byte {
	t.Helper()
	if len(items) == 0 {
		return data
	}
	out := map[string][]byte{}
	for _, it := range items {
		b, ok := data[it.Key]
		if !ok {
			if optional != nil && *optional {
				continue
			}
			t.Fatalf("cluster: %s has no key %q", what, it.Key)
		}
		out[it.Path] = b
	}
	return out
}

// tokenFileKubeconfig writes a kubeconfig for the API server (trusting
// its serving CA) whose credential is the token file tokenFile, and
// returns its path.
func (c *Cluster) tokenFileKubeconfig(t testing.TB, tokenFile string) string {
	t.Helper()
	return c.writeKubeconfig(t, &clientcmdapi.AuthInfo{TokenFile: tokenFile})
}

// Kubeconfig writes a kubeconfig for the API server (trusting its serving
// CA) with token, and returns its path; it is removed when the test ends.
func (c *Cluster) Kubeconfig(t testing.TB, token string) string {
	t.Helper()
	return c.writeKubeconfig(t, &clientcmdapi.AuthInfo{Token: token})
}

func (c *Cluster) writeKubeconfig(t testing.TB, user *clientcmdapi.AuthInfo) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: c.URL(), CertificateAuthorityData: c.servingCA.CertPEM}
	cfg.AuthInfos["user"] = user
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "user"}
	cfg.CurrentContext = "e2e"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// SetFlags returns args with each of flags ("--name=value") in place of
// the arguments of that flag name ("--name=..." or "--name"), or
// appended when args have none: how a test moves a manifest's listen
// addresses to loopback ports of its own. Flags given more than once
// (a repeatable flag, such as draproxy's --driver) replace that flag's
// arguments together, in their order, where its first argument was.
func SetFlags(args []string, flags ...string) []string {
	flagName := func(a string) string { n, _, _ := strings.Cut(a, "="); return n }
	out := slices.Clone(args)
	done := map[string]bool{}
	for _, f := range flags {
		name := flagName(f)
		if done[name] {
			continue
		}
		done[name] = true
		var same []string
		for _, g := range flags {
			if flagName(g) == name {
				same = append(same, g)
			}
		}
		at := slices.IndexFunc(out, func(a string) bool { return flagName(a) == name })
		out = slices.DeleteFunc(out, func(a string) bool { return flagName(a) == name })
		if at < 0 {
			out = append(out, same...)
		} else {
			out = slices.Insert(out, at, same...)
		}
	}
	return out
}
