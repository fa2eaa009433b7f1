package suite_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapshotclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	smsv1alpha1 "github.com/kubernetes-csi/external-snapshot-metadata/client/apis/snapshotmetadataservice/v1alpha1"
	smsclient "github.com/kubernetes-csi/external-snapshot-metadata/client/clientset/versioned"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// The upstream modules whose manifests the CSI flows install unchanged:
// the VolumeSnapshot CRDs of external-snapshotter's client module, and the
// SnapshotMetadataService CRD and ClusterRoles of external-snapshot-metadata.
const (
	snapshotterClientModule = "github.com/kubernetes-csi/external-snapshotter/client/v8"
	smsClientModule         = "github.com/kubernetes-csi/external-snapshot-metadata/client"
	snapshotMetadataModule  = "github.com/kubernetes-csi/external-snapshot-metadata"
	// upstreamSidecarRole and upstreamClientRole are the ClusterRoles of
	// external-snapshot-metadata's deploy/ directory: what the sidecar and
	// a backup application need.
	upstreamSidecarRole = "external-snapshot-metadata-runner"
	upstreamClientRole  = "external-snapshot-metadata-client-runner"
	// sidecarWatchRole adds what the reviewauth sidecar needs beyond
	// upstream's role: watch, for its snapshot caches.
	sidecarWatchRole = "reviewauth-snapshotmetadata-watch"
)

// upstreamManifests are the files installed once per cluster, relative to
// their module.
var upstreamManifests = []struct{ module, path string }{
	{snapshotterClientModule, "config/crd/snapshot.storage.k8s.io_volumesnapshots.yaml"},
	{snapshotterClientModule, "config/crd/snapshot.storage.k8s.io_volumesnapshotcontents.yaml"},
	{snapshotterClientModule, "config/crd/snapshot.storage.k8s.io_volumesnapshotclasses.yaml"},
	{smsClientModule, "config/crd/cbt.storage.k8s.io_snapshotmetadataservices.yaml"},
	{snapshotMetadataModule, "deploy/snapshot-metadata-cluster-role.yaml"},
	{snapshotMetadataModule, "deploy/snapshot-metadata-client-cluster-role.yaml"},
}

var (
	installOnce sync.Once
	installErr  error
)

// installSnapshotAPIs installs, once per run, the upstream CRDs and
// ClusterRoles (read from the module cache, as released), and the watch
// role, and waits until the new resources are served.
func installSnapshotAPIs(t testing.TB, c *cluster.Cluster) {
	t.Helper()
	installOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		installErr = installManifests(ctx, c)
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
}

func installManifests(ctx context.Context, c *cluster.Cluster) error {
	dyn, err := dynamic.NewForConfig(c.AdminConfig())
	if err != nil {
		return err
	}
	resources := map[string]schema.GroupVersionResource{
		"CustomResourceDefinition": {Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
		"ClusterRole":              {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	}
	dirs := map[string]string{}
	for _, m := range upstreamManifests {
		dir, ok := dirs[m.module]
		if !ok {
			if dir, err = moduleDir(ctx, m.module); err != nil {
				return err
			}
			dirs[m.module] = dir
		}
		b, err := os.ReadFile(filepath.Join(dir, m.path))
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("%s/%s: %w", m.module, m.path, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			gvr, ok := resources[u.GetKind()]
			if !ok {
				return fmt.Errorf("%s/%s: unexpected kind %q", m.module, m.path, u.GetKind())
			}
			if _, err := dyn.Resource(gvr).Create(ctx, &u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating %s %s from %s/%s: %w", u.GetKind(), u.GetName(), m.module, m.path, err)
			}
		}
	}
	watch := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: sidecarWatchRole}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{snapshotGroup}, Resources: []string{"volumesnapshots", "volumesnapshotcontents"}, Verbs: []string{"watch"},
	}}}
	if _, err := c.Clientset().RbacV1().ClusterRoles().Create(ctx, watch, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// The CRDs are served once they are established.
	snaps, sms, err := snapshotClients(c)
	if err != nil {
		return err
	}
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err1 := snaps.SnapshotV1().VolumeSnapshots("default").List(ctx, metav1.ListOptions{Limit: 1})
		_, err2 := snaps.SnapshotV1().VolumeSnapshotContents().List(ctx, metav1.ListOptions{Limit: 1})
		_, err3 := sms.CbtV1alpha1().SnapshotMetadataServices().List(ctx, metav1.ListOptions{Limit: 1})
		return err1 == nil && err2 == nil && err3 == nil, nil
	})
}

// moduleDir returns the directory of module, as required by this module,
// in the module cache.
func moduleDir(ctx context.Context, module string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("go list -m %s: module not downloaded (run go mod download in test/e2e)", module)
	}
	return dir, nil
}

// snapshotClients returns admin clients of the snapshot APIs.
func snapshotClients(c *cluster.Cluster) (snapshotclient.Interface, smsclient.Interface, error) {
	snaps, err := snapshotclient.NewForConfig(c.AdminConfig())
	if err != nil {
		return nil, nil, err
	}
	sms, err := smsclient.NewForConfig(c.AdminConfig())
	return snaps, sms, err
}

// snapshotHandle is the CSI handle the e2e flows give the VolumeSnapshot
// ns/name: unique in the cluster, as a driver's are.
func snapshotHandle(ns, name string) string { return "snap-id-" + ns + "-" + name }

// snapshotOptions varies a VolumeSnapshot made by createSnapshot.
type snapshotOptions struct {
	// driver of the content; empty means the sidecar's.
	driver string
	// notReady leaves the VolumeSnapshot not ready to use.
	notReady bool
	// deletionPolicy of the content; empty means Delete.
	deletionPolicy snapshotv1.DeletionPolicy
}

// createSnapshot creates the VolumeSnapshot ns/name, bound to a new
// VolumeSnapshotContent of driver with the handle snapshotHandle(ns, name),
// both with the status the snapshot controller gives a snapshot once taken
// (the cluster runs no controller), and returns the content's name. The
// objects are left for the namespace to hold.
func createSnapshot(t testing.TB, c *cluster.Cluster, driver, ns, name string, o snapshotOptions) string {
	t.Helper()
	if o.driver != "" {
		driver = o.driver
	}
	if o.deletionPolicy == "" {
		o.deletionPolicy = snapshotv1.VolumeSnapshotContentDelete
	}
	snaps, _, err := snapshotClients(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := ctxFor(t, 30*time.Second)
	defer cancel()
	contentName := cluster.UniqueName("snapcontent-" + name)
	handle := snapshotHandle(ns, name)
	vs, err := snaps.SnapshotV1().VolumeSnapshots(ns).Create(ctx, &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{VolumeSnapshotContentName: &contentName}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create VolumeSnapshot %s/%s: %v", ns, name, err)
	}
	vsc, err := snaps.SnapshotV1().VolumeSnapshotContents().Create(ctx, &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: contentName},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{Kind: "VolumeSnapshot", APIVersion: "snapshot.storage.k8s.io/v1", Namespace: ns, Name: name, UID: vs.UID},
			DeletionPolicy:    o.deletionPolicy,
			Driver:            driver,
			Source:            snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: &handle},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create VolumeSnapshotContent %s: %v", contentName, err)
	}
	t.Cleanup(func() {
		// Contents are cluster-scoped: remove them with the test.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = snaps.SnapshotV1().VolumeSnapshotContents().Delete(ctx, contentName, metav1.DeleteOptions{})
	})
	vsc.Status = &snapshotv1.VolumeSnapshotContentStatus{SnapshotHandle: &handle, ReadyToUse: new(true), CreationTime: new(time.Now().UnixNano())}
	if _, err := snaps.SnapshotV1().VolumeSnapshotContents().UpdateStatus(ctx, vsc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update VolumeSnapshotContent %s status: %v", contentName, err)
	}
	vs.Status = &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: &contentName, ReadyToUse: new(!o.notReady)}
	if _, err := snaps.SnapshotV1().VolumeSnapshots(ns).UpdateStatus(ctx, vs, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update VolumeSnapshot %s/%s status: %v", ns, name, err)
	}
	return contentName
}

// deleteSnapshot deletes the VolumeSnapshot ns/name and, unless keepContent,
// its content, as the snapshot controller does under deletionPolicy Delete.
func deleteSnapshot(t testing.TB, c *cluster.Cluster, ns, name, contentName string, keepContent bool) {
	t.Helper()
	snaps, _, err := snapshotClients(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := ctxFor(t, 30*time.Second)
	defer cancel()
	if err := snaps.SnapshotV1().VolumeSnapshots(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete VolumeSnapshot %s/%s: %v", ns, name, err)
	}
	if !keepContent {
		if err := snaps.SnapshotV1().VolumeSnapshotContents().Delete(ctx, contentName, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete VolumeSnapshotContent %s: %v", contentName, err)
		}
	}
}

// createSnapshotMetadataService creates the SnapshotMetadataService object
// of driver with audience, as a CSI driver's deployment does; its address
// and CA are set by publishSnapshotMetadataService once the sidecar runs.
func createSnapshotMetadataService(t testing.TB, c *cluster.Cluster, driver, audience string) {
	t.Helper()
	_, sms, err := snapshotClients(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := ctxFor(t, 30*time.Second)
	defer cancel()
	if _, err := sms.CbtV1alpha1().SnapshotMetadataServices().Create(ctx, &smsv1alpha1.SnapshotMetadataService{
		ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec:       smsv1alpha1.SnapshotMetadataServiceSpec{Audience: audience, Address: "pending", CACert: []byte("pending")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create SnapshotMetadataService %s: %v", driver, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sms.CbtV1alpha1().SnapshotMetadataServices().Delete(ctx, driver, metav1.DeleteOptions{})
	})
}

// publishSnapshotMetadataService sets the address and CA of the
// SnapshotMetadataService object of driver, where clients find them.
func publishSnapshotMetadataService(t testing.TB, c *cluster.Cluster, driver, addr string, caPEM []byte) {
	t.Helper()
	_, sms, err := snapshotClients(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := ctxFor(t, 30*time.Second)
	defer cancel()
	obj, err := sms.CbtV1alpha1().SnapshotMetadataServices().Get(ctx, driver, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj.Spec.Address, obj.Spec.CACert = addr, caPEM
	if _, err := sms.CbtV1alpha1().SnapshotMetadataServices().Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update SnapshotMetadataService %s: %v", driver, err)
	}
}

// tokenKubeconfig writes a kubeconfig for the cluster with token and
// returns its path.
func tokenKubeconfig(t testing.TB, c *cluster.Cluster, token string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: c.URL(), CertificateAuthorityData: c.ServingCA().CertPEM}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "user"}
	cfg.CurrentContext = "e2e"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
