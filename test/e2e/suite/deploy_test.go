package suite_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// The servers run from their manifests: examples/NAME/deploy, applied as
// users apply it (kubectl apply -k), with a namespace and a name suffix
// of their own per test, and the values of the documented patch. The
// server runs as a local process with what the kubelet would give its
// container in a pod made from the stored workload's template: its
// arguments, its volumes' files, a token of the ServiceAccount the
// manifests create, bound to that pod. No RBAC of a server is written
// here: what the manifests grant is what it has.

// exampleImage reports whether image runs an example program, and which:
// an image whose repository's last element is the name of a program
// under examples/ (reviewauth/rbacproxy, example.com/draproxy:latest).
func exampleImage(image string) (string, bool) {
	name := image
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	name, _, _ = strings.Cut(name, "@")
	name, _, _ = strings.Cut(name, ":")
	if name == "" || strings.ContainsAny(name, `.\`) {
		return "", false
	}
	_, err := os.Stat(filepath.Join(examplesDir(), name, "main.go"))
	return name, err == nil
}

// deployDir returns examples/NAME/deploy (and a subdirectory of it).
func deployDir(name string, sub ...string) string {
	return filepath.Join(append([]string{examplesDir(), name, "deploy"}, sub...)...)
}

// deployOptions vary a deployment made by deploy.
type deployOptions struct {
	// shipped renders the kustomization with the namespace and the names
	// its files give (namespace and suffix are ignored): what a user
	// applies without editing it.
	shipped bool
	// namespace is the kustomization's namespace; empty: a new unique one
	// named after the directory.
	namespace string
	// suffix is the name suffix; empty: a new unique one.
	suffix string
	// values fill the documented patch (cluster.RenderOptions.Values).
	values map[string]map[string]any
	// omit are kinds of objects not applied: a cluster where a user left
	// them out (draproxy's driver part without its admission policy
	// parameter).
	omit []string
}

// deploy renders the kustomization dir with o and applies it. What it
// applied is recorded under the test's name (see appliedBy).
func deploy(t testing.TB, c *cluster.Cluster, dir string, o deployOptions) *cluster.Manifests {
	t.Helper()
	if o.shipped {
		o.namespace, o.suffix = "", ""
	} else {
		if o.namespace == "" {
			o.namespace = cluster.UniqueName(path.Base(filepath.ToSlash(strings.TrimSuffix(dir, "/deploy"))))
		}
		if o.suffix == "" {
			o.suffix = cluster.UniqueName("") // "-" and 8 random hex characters
		}
	}
	m, err := cluster.Render(dir, cluster.RenderOptions{Namespace: o.namespace, NameSuffix: o.suffix, Values: o.values})
	if err != nil {
		t.Fatal(err)
	}
	m.Objects = slices.DeleteFunc(m.Objects, func(obj *unstructured.Unstructured) bool { return slices.Contains(o.omit, obj.GetKind()) })
	c.Apply(t, m)
	appliedMu.Lock()
	applied[t.Name()] = append(applied[t.Name()], m)
	appliedMu.Unlock()
	return m
}

var (
	appliedMu sync.Mutex
	applied   = map[string][]*cluster.Manifests{} // by test name
)

// appliedBy returns what deploy applied for the test named name and its
// subtests.
func appliedBy(name string) []*cluster.Manifests {
	appliedMu.Lock()
	defer appliedMu.Unlock()
	var out []*cluster.Manifests
	for _, test := range slices.Sorted(maps.Keys(applied)) {
		if test == name || strings.HasPrefix(test, name+"/") {
			out = append(out, applied[test]...)
		}
	}
	return out
}

// servingSecret creates what a Deploy step of the README has users create
// for a server in ns: the Secret secret (kubernetes.io/tls) with a serving
// certificate from ca (nil: a new CA) valid for 127.0.0.1 (where the tests
// dial) and dnsNames; and, when caConfigMap is not empty, the ConfigMap
// caConfigMap holding the CA (ca.crt) for the callers. It returns the CA.
// An object left by an earlier run (shipped manifests have fixed names) is
// replaced.
func servingSecret(t testing.TB, c *cluster.Cluster, ca *cluster.CA, ns, secret, caConfigMap string, dnsNames ...string) *cluster.CA {
	t.Helper()
	var err error
	if ca == nil {
		if ca, err = cluster.NewCA(cluster.UniqueName(secret + "-ca")); err != nil {
			t.Fatal(err)
		}
	}
	cert, key, err := ca.Issue(cluster.CertOptions{CommonName: secret, DNSNames: append([]string{"localhost"}, dnsNames...),
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := ctxFor(t, callTimeout)
	defer cancel()
	secrets := c.Clientset().CoreV1().Secrets(ns)
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key}}
	_, err = secrets.Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("Secret %s/%s: %v", ns, secret, err)
	}
	if caConfigMap == "" {
		return ca
	}
	cms := c.Clientset().CoreV1().ConfigMaps(ns)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: caConfigMap}, Data: map[string]string{"ca.crt": string(ca.CertPEM)}}
	_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("ConfigMap %s/%s: %v", ns, caConfigMap, err)
	}
	return ca
}

// server is an example program running from its manifests.
type server struct {
	*example
	pod       *corev1.Pod
	container *cluster.Container
	spec      corev1.Container
}

// serverCommand makes a pod from the template of the workload kind
// written name in m (on node, when not empty), prepares its container
// running an example program's image (see exampleImage), and returns the program (built) and
// the container's arguments, then flags in place of theirs (loopback
// listeners of the test's own, test upstreams), and --kubeconfig reading
// the token of its kube-api-access mount.
func serverCommand(t testing.TB, c *cluster.Cluster, m *cluster.Manifests, kind, name, node string, flags ...string) (*server, string, []string) {
	t.Helper()
	pod := c.CreatePodFromTemplate(t, m, kind, name, cluster.PodOptions{NodeName: node})
	i := slices.IndexFunc(pod.Spec.Containers, func(ct corev1.Container) bool { _, ok := exampleImage(ct.Image); return ok })
	if i < 0 {
		t.Fatalf("%s %s of %s runs no example program's image", kind, name, m.Dir)
	}
	spec := pod.Spec.Containers[i]
	ct := c.PrepareContainer(t, pod, spec.Name)
	if ct.Kubeconfig == "" {
		t.Fatalf("container %s of %s %s mounts no token at /var/run/secrets/kubernetes.io/serviceaccount", spec.Name, kind, name)
	}
	bin, _ := exampleImage(spec.Image)
	buildExample(t, bin)
	args := cluster.SetFlags(ct.Args, append(flags, "--kubeconfig="+ct.Kubeconfig)...)
	return &server{pod: pod, container: ct, spec: spec}, filepath.Join(buildExamples(t), bin), args
}

// startServer runs the program of serverCommand until the test ends (see
// startExample).
func startServer(t testing.TB, c *cluster.Cluster, m *cluster.Manifests, kind, name, node string, flags ...string) *server {
	t.Helper()
	s, bin, args := serverCommand(t, c, m, kind, name, node, flags...)
	// Registered first, so it runs once the program has stopped: every
	// request the program made with its own credentials was allowed by
	// the manifests' RBAC (a refused list or watch of an informer is
	// retried and logged, never fatal, so it is looked for in the log).
	// Not after an API server restart, whose RBAC authorizer refuses
	// everything until its caches are filled.
	user := "system:serviceaccount:" + s.pod.Namespace + ":" + s.pod.Spec.ServiceAccountName
	restarts := c.Restarts()
	t.Cleanup(func() {
		if s.example == nil {
			return
		}
		if c.Restarts() != restarts {
			t.Logf("the API server restarted while %s ran: its refusals are not checked", s.name)
			return
		}
		for _, line := range strings.Split(s.stderr.String(), "\n") {
			if strings.Contains(line, "forbidden") && strings.Contains(line, user) {
				t.Errorf("%s's own request was forbidden: the RBAC of %s lacks it:\n%s", s.name, m.Dir, line)
				return
			}
		}
	})
	s.example = startExample(t, filepath.Base(bin), args...)
	return s
}

// arg returns the value of --name in the container's arguments.
func (s *server) arg(t testing.TB, name string) string {
	t.Helper()
	for _, a := range s.container.Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	t.Fatalf("the container's arguments %q have no --%s", s.container.Args, name)
	return ""
}

// checkProbes sends the readiness and liveness probes of the server's
// container as the kubelet sends them (HTTP GET, HTTPS without verifying
// the certificate), to ports, which maps each container port to the
// test's loopback address for it, and fails unless each answers 200.
func (s *server) checkProbes(t testing.TB, ports map[int32]string) {
	t.Helper()
	probes := map[string]*corev1.Probe{"readiness": s.spec.ReadinessProbe, "liveness": s.spec.LivenessProbe}
	for kind, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("container %s has no HTTP %s probe", s.spec.Name, kind)
			continue
		}
		port := containerPort(t, s.spec, p.HTTPGet.Port)
		addr, ok := ports[port]
		if !ok {
			t.Fatalf("%s probe on container port %d: the test runs nothing there (ports %v)", kind, port, ports)
		}
		scheme := strings.ToLower(string(p.HTTPGet.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} // as the kubelet's prober
		client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		resp, err := client.Get(scheme + "://" + addr + p.HTTPGet.Path)
		if err != nil {
			t.Errorf("%s probe %s://%s%s: %v", kind, scheme, addr, p.HTTPGet.Path, err)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		t.Logf("observed: %s probe GET %s (container port %d) = %d", kind, p.HTTPGet.Path, port, resp.StatusCode)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s probe GET %s = %d; want 200", kind, p.HTTPGet.Path, resp.StatusCode)
		}
	}
}

// containerPort resolves a probe's port, by number or name.
func containerPort(t testing.TB, spec corev1.Container, port intstr.IntOrString) int32 {
	t.Helper()
	if port.Type == intstr.Int {
		return port.IntVal
	}
	for _, p := range spec.Ports {
		if p.Name == port.StrVal {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", spec.Name, port.StrVal)
	return 0
}

// projectedToken makes a pod from the template of the client workload
// kind written name in m (on node, when not empty) and returns the token
// the kubelet would project into its first container at mountPath (file
// "token"): for the client's ServiceAccount, with the audience and
// lifetime the manifest asks for, bound to the pod (and so to its node).
func projectedToken(t testing.TB, c *cluster.Cluster, m *cluster.Manifests, kind, name, node, mountPath string) string {
	t.Helper()
	return podProjectedToken(t, c, c.CreatePodFromTemplate(t, m, kind, name, cluster.PodOptions{NodeName: node}), mountPath)
}

// podProjectedToken returns the token the kubelet would project into the
// first container of pod at mountPath (file "token"), as projectedToken
// does: each call is a new token, as after the kubelet's rotation.
func podProjectedToken(t testing.TB, c *cluster.Cluster, pod *corev1.Pod, mountPath string) string {
	t.Helper()
	ct := c.PrepareContainer(t, pod, pod.Spec.Containers[0].Name)
	dir, ok := ct.Volumes[mountPath]
	if !ok {
		t.Fatalf("pod %s/%s mounts nothing at %s", pod.Namespace, pod.Name, mountPath)
	}
	b, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// freePort returns a free TCP port on 127.0.0.1, for a flag that takes a
// port (or an address that must be known before the program starts).
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// loopback is 127.0.0.1:port.
func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// lineAfter waits, boundedly, for a line of the server's standard output
// starting with prefix, and returns the rest of it.
func (s *server) lineAfter(t testing.TB, prefix string) string {
	t.Helper()
	deadline := time.Now().Add(exampleStartTimeout)
	for {
		for _, line := range strings.Split(s.stdout.String(), "\n") {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				return strings.TrimSpace(v)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s printed no line starting with %q:\n%s", s.name, prefix, s.stdout.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var (
	exampleBuildMu sync.Mutex
	exampleBuilt   = map[string]error{}
)

// buildExample builds the example program examples/name into the
// examples' directory, once per run.
func buildExample(t testing.TB, name string) {
	t.Helper()
	dir := buildExamples(t)
	exampleBuildMu.Lock()
	defer exampleBuildMu.Unlock()
	err, done := exampleBuilt[name]
	if !done {
		if _, statErr := os.Stat(filepath.Join(dir, name)); statErr != nil {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), exampleBuildTimeout)
			cmd := exec.CommandContext(ctx, "go", "-C", examplesDir(), "build", "-trimpath", "-o", filepath.Join(dir, name), "./"+name)
			cmd.Env = append(os.Environ(), exampleBuildEnv...)
			if out, cerr := cmd.CombinedOutput(); cerr != nil {
				err = fmt.Errorf("go build of the %s example: %v\n%s", name, cerr, out)
			} else {
				fmt.Fprintf(os.Stderr, "e2e: %s example built in %v\n", name, time.Since(start).Round(time.Millisecond))
			}
			cancel()
		}
		exampleBuilt[name] = err
	}
	if err != nil {
		t.Fatal(err)
	}
}

// deployDirs returns every directory under examples/*/deploy that holds
// a kustomization.yaml.
func deployDirs(t testing.TB) []string {
	t.Helper()
	var dirs []string
	roots, err := filepath.Glob(filepath.Join(examplesDir(), "*", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && d.Name() == "kustomization.yaml" {
				dirs = append(dirs, filepath.Dir(p))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(dirs) == 0 {
		t.Fatalf("no kustomization.yaml under %s/*/deploy", examplesDir())
	}
	return dirs
}

// TestManifestFlags renders every kustomization of examples/*/deploy and
// checks that each flag the containers of an example's image pass
// (reviewauth/NAME, or any image named NAME: examples/NAME) is one the
// program lists in its --help, so that manifests and flags cannot drift
// apart; and that examples/NAME/deploy runs NAME's image, so that none is
// left out by an image name the test does not recognize. It needs no
// cluster.
func TestManifestFlags(t *testing.T) {
	t.Parallel()
	checked := 0
	programs := map[string]bool{} // NAME: examples/NAME/deploy runs NAME's image
	for _, dir := range deployDirs(t) {
		rel, _ := filepath.Rel(examplesDir(), dir)
		t.Run(filepath.ToSlash(rel), func(t *testing.T) {
			m, err := cluster.Render(dir, cluster.RenderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, obj := range m.Objects {
				containers, initContainers, found, err := unstructuredContainers(obj.Object)
				if err != nil {
					t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
				}
				if !found {
					continue
				}
				for _, ct := range append(initContainers, containers...) {
					bin, ok := exampleImage(ct.Image)
					if !ok {
						continue
					}
					programs[bin] = programs[bin] || dir == filepath.Join(examplesDir(), bin, "deploy")
					buildExample(t, bin)
					for _, a := range append(slices.Clone(ct.Command), ct.Args...) {
						if !strings.HasPrefix(a, "-") {
							t.Errorf("%s %s container %s: argument %q is not a flag (the programs take flags only)", obj.GetKind(), obj.GetName(), ct.Name, a)
							continue
						}
						flag, _, _ := strings.Cut(a, "=")
						if !exampleHasFlag(t, bin, flag) {
							t.Errorf("%s %s container %s passes %s, which %s --help does not list", obj.GetKind(), obj.GetName(), ct.Name, flag, bin)
						}
						checked++
					}
				}
			}
		})
	}
	roots, err := filepath.Glob(filepath.Join(examplesDir(), "*", "deploy", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range roots {
		name := filepath.Base(filepath.Dir(filepath.Dir(k)))
		if !programs[name] {
			t.Errorf("examples/%s/deploy runs no container of %s's image (reviewauth/%s): its flags are not checked", name, name, name)
		}
	}
	t.Logf("observed: %d flags of the manifests checked against the programs' --help: %v", checked, slices.Sorted(maps.Keys(programs)))
}

// unstructuredContainers returns the containers and init containers of a
// workload's pod template (spec.template.spec), if it has one.
func unstructuredContainers(obj map[string]any) (containers, initContainers []corev1.Container, found bool, err error) {
	tmpl, found, err := unstructured.NestedMap(obj, "spec", "template")
	if err != nil || !found {
		return nil, nil, false, err
	}
	var pt corev1.PodTemplateSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &pt); err != nil {
		return nil, nil, false, err
	}
	return pt.Spec.Containers, pt.Spec.InitContainers, true, nil
}
