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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapshotclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	smsclient "github.com/kubernetes-csi/external-snapshot-metadata/client/clientset/versioned"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// The upstream modules whose CRDs the CSI flows install unchanged, as
// examples/snapshotmetadata/deploy names them: the VolumeSnapshot CRDs of
// external-snapshotter's client module and the SnapshotMetadataService
// CRD of external-snapshot-metadata's. (The RBAC is the manifests'.)
const (
	snapshotterClientModule = "github.com/kubernetes-csi/external-snapshotter/client/v8"
	smsClientModule         = "github.com/kubernetes-csi/external-snapshot-metadata/client"
	snapshotMetadataModule  = "github.com/kubernetes-csi/external-snapshot-metadata"
)

// upstreamManifests are the files installed once per cluster, relative to
// their module.
var upstreamManifests = []struct{ module, path string }{
	{snapshotterClientModule, "config/crd/snapshot.storage.k8s.io_volumesnapshots.yaml"},
	{snapshotterClientModule, "config/crd/snapshot.storage.k8s.io_volumesnapshotcontents.yaml"},
	{snapshotterClientModule, "config/crd/snapshot.storage.k8s.io_volumesnapshotclasses.yaml"},
	{smsClientModule, "config/crd/cbt.storage.k8s.io_snapshotmetadataservices.yaml"},
}

var (
	installOnce sync.Once
	installErr  error
)

// installSnapshotAPIs installs, once per run, the upstream CRDs (read
// from the module cache, as released), and waits until the new resources
// are served.
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

var (
	clientRoleOnce sync.Once
	clientRole     *cluster.Manifests
)

// snapshotClientRole applies, once per run, the ClusterRole of
// examples/snapshotmetadata/deploy/client (what a backup application
// needs to call the sidecar) and returns its name, for tests that bind
// their callers to it in one namespace.
func snapshotClientRole(t testing.TB, c *cluster.Cluster) string {
	t.Helper()
	clientRoleOnce.Do(func() {
		m, err := cluster.Render(deployDir("snapshotmetadata", "client"), cluster.RenderOptions{NameSuffix: cluster.UniqueName("")})
		if err != nil {
			t.Fatal(err)
		}
		m.Objects = slices.DeleteFunc(m.Objects, func(o *unstructured.Unstructured) bool { return o.GetKind() != "ClusterRole" })
		c.Apply(t, m)
		clientRole = m
	})
	if clientRole == nil {
		t.Fatal("the client ClusterRole of examples/snapshotmetadata/deploy/client was not applied")
	}
	return clientRole.Name("snapshot-metadata-client")
}

// tokenKubeconfig writes a kubeconfig for the cluster with token and
// returns its path.
func tokenKubeconfig(t testing.TB, c *cluster.Cluster, token string) string {
	t.Helper()
	return c.Kubeconfig(t, token)
}
