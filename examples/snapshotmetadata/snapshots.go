package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapshotclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	snapshotinformers "github.com/kubernetes-csi/external-snapshotter/client/v8/informers/externalversions"
	snapshotlisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// The status messages of the upstream sidecar
// (github.com/kubernetes-csi/external-snapshot-metadata v0.2.0,
// pkg/internal/server/grpc/status.go), which backup applications may match.
const (
	msgFailedToGetVolumeSnapshot           = "failed to get VolumeSnapshot"
	msgVolumeSnapshotNotReady              = "the VolumeSnapshot is not yet ready"
	msgVolumeSnapshotNotBound              = "boundVolumeSnapshotContentName is not set in VolumeSnapshot status"
	msgFailedToGetVolumeSnapshotContent    = "failed to get VolumeSnapshotContent"
	msgVolumeSnapshotContentNotReady       = "the VolumeSnapshotContent is not yet ready"
	msgVolumeSnapshotContentNoHandle       = "snapshotHandle is not set in VolumeSnapshotContent status"
	msgSnapshotOfAnotherDriverFmt          = "VolumeSnapshot '%s' does not belong to the CSI driver '%s'"
	msgVolumeSnapshotContentBoundElsewhere = "VolumeSnapshotContent '%s' is not bound to VolumeSnapshot '%s/%s'"
)

// handleIndex indexes VolumeSnapshotContents by driver and CSI snapshot
// handle (see handleKey).
const handleIndex = "driverSnapshotHandle"

// handleKey is the index key of a CSI snapshot handle of driver. CSI driver
// names cannot contain "/", so the key is unambiguous.
func handleKey(driver, handle string) string { return driver + "/" + handle }

// contentHandles is the handleIndex function: the handles a
// VolumeSnapshotContent carries, in its status (dynamically provisioned) and
// in its source (pre-provisioned), keyed with its driver.
func contentHandles(obj any) ([]string, error) {
	c, ok := obj.(*snapshotv1.VolumeSnapshotContent)
	if !ok {
		return nil, nil
	}
	var keys []string
	if c.Status != nil && c.Status.SnapshotHandle != nil && *c.Status.SnapshotHandle != "" {
		keys = append(keys, handleKey(c.Spec.Driver, *c.Status.SnapshotHandle))
	}
	if h := c.Spec.Source.SnapshotHandle; h != nil && *h != "" && !slices.Contains(keys, handleKey(c.Spec.Driver, *h)) {
		keys = append(keys, handleKey(c.Spec.Driver, *h))
	}
	return keys, nil
}

// Snapshots answers the sidecar's questions about VolumeSnapshots and their
// VolumeSnapshotContents, for one CSI driver.
//
// It reads them from informer caches, so that a call costs the API server
// nothing and calls keep working from the cache while the API server is
// down. A cache lags the API server by a moment, so a negative answer (a
// target missing, not ready, or of another driver) is checked again with a
// live GET before it is returned: a backup application that has just seen
// its snapshot become ready is not refused. It is safe for concurrent use.
type Snapshots struct {
	driver   string
	client   snapshotclient.Interface
	factory  snapshotinformers.SharedInformerFactory
	vs       snapshotlisters.VolumeSnapshotLister
	vsc      snapshotlisters.VolumeSnapshotContentLister
	byHandle cache.Indexer
}

// startSnapshots starts the informers of VolumeSnapshots and
// VolumeSnapshotContents in every namespace and waits, at most syncTimeout,
// until they have synced. stop ends them and waits for their goroutines; it
// must be called on every path once startSnapshots returned nil error.
func startSnapshots(ctx context.Context, client snapshotclient.Interface, driver string, syncTimeout time.Duration) (_ *Snapshots, stop func(), err error) {
	factory := snapshotinformers.NewSharedInformerFactoryWithOptions(client, 0, snapshotinformers.WithTransform(dropManagedFields))
	vs := factory.Snapshot().V1().VolumeSnapshots()
	vsc := factory.Snapshot().V1().VolumeSnapshotContents()
	if err := vsc.Informer().AddIndexers(cache.Indexers{handleIndex: contentHandles}); err != nil {
		return nil, nil, err
	}
	s := &Snapshots{driver: driver, client: client, factory: factory, vs: vs.Lister(), vsc: vsc.Lister(), byHandle: vsc.Informer().GetIndexer()}

	ictx, cancel := context.WithCancel(ctx)
	factory.Start(ictx.Done())
	stop = func() {
		cancel()
		factory.Shutdown()
	}
	sctx, scancel := context.WithTimeout(ictx, syncTimeout)
	defer scancel()
	for typ, ok := range factory.WaitForCacheSync(sctx.Done()) {
		if !ok {
			stop()
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			return nil, nil, fmt.Errorf("the %v cache did not sync within %v: can the sidecar list and watch volumesnapshots and volumesnapshotcontents (snapshot.storage.k8s.io)?", typ, syncTimeout)
		}
	}
	return s, stop, nil
}

// dropManagedFields keeps the informer caches small.
func dropManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// snapshotSource reads VolumeSnapshots and VolumeSnapshotContents: from the
// caches, or live.
type snapshotSource struct {
	volumeSnapshot func(ctx context.Context, ns, name string) (*snapshotv1.VolumeSnapshot, error)
	content        func(ctx context.Context, name string) (*snapshotv1.VolumeSnapshotContent, error)
}

func (s *Snapshots) cached() snapshotSource {
	return snapshotSource{
		volumeSnapshot: func(_ context.Context, ns, name string) (*snapshotv1.VolumeSnapshot, error) {
			return s.vs.VolumeSnapshots(ns).Get(name)
		},
		content: func(_ context.Context, name string) (*snapshotv1.VolumeSnapshotContent, error) {
			return s.vsc.Get(name)
		},
	}
}

func (s *Snapshots) live() snapshotSource {
	return snapshotSource{
		volumeSnapshot: func(ctx context.Context, ns, name string) (*snapshotv1.VolumeSnapshot, error) {
			return s.client.SnapshotV1().VolumeSnapshots(ns).Get(ctx, name, metav1.GetOptions{})
		},
		content: func(ctx context.Context, name string) (*snapshotv1.VolumeSnapshotContent, error) {
			return s.client.SnapshotV1().VolumeSnapshotContents().Get(ctx, name, metav1.GetOptions{})
		},
	}
}

// Target returns the CSI snapshot handle of the VolumeSnapshot ns/name, after
// the checks of the upstream sidecar, with its codes and messages:
//
//   - the VolumeSnapshot exists (else Unavailable "failed to get
//     VolumeSnapshot 'ns/name': ... not found");
//   - it is ready to use (else Unavailable "the VolumeSnapshot is not yet
//     ready, name: NAME") and bound to a VolumeSnapshotContent;
//   - that content exists, is ready, and has a snapshot handle (Unavailable
//     otherwise);
//   - the content's driver is this sidecar's (else InvalidArgument
//     "VolumeSnapshot 'NAME' does not belong to the CSI driver 'DRIVER'").
//
// It also checks what the upstream sidecar does not, and the upstream
// client does: that the content is bound back to this VolumeSnapshot (its
// volumeSnapshotRef names it, and its UID when set), so that a
// VolumeSnapshot cannot point at another namespace's content (Unavailable,
// as for any inconsistent binding). Errors are gRPC status errors.
func (s *Snapshots) Target(ctx context.Context, ns, name string) (string, error) {
	handle, err := s.target(ctx, s.cached(), ns, name)
	if err == nil {
		return handle, nil
	}
	// Confirm a refusal against the API server: the cache may lag.
	return s.target(ctx, s.live(), ns, name)
}

func (s *Snapshots) target(ctx context.Context, src snapshotSource, ns, name string) (string, error) {
	vs, err := src.volumeSnapshot(ctx, ns, name)
	if err != nil {
		return "", getError(ctx, msgFailedToGetVolumeSnapshot, "'"+ns+"/"+name+"'", err)
	}
	if vs.Status == nil || vs.Status.ReadyToUse == nil || !*vs.Status.ReadyToUse {
		return "", status.Errorf(codes.Unavailable, "%s, name: %s", msgVolumeSnapshotNotReady, name)
	}
	if vs.Status.BoundVolumeSnapshotContentName == nil || *vs.Status.BoundVolumeSnapshotContentName == "" {
		return "", status.Errorf(codes.Unavailable, "%s, name: %s", msgVolumeSnapshotNotBound, name)
	}
	vscName := *vs.Status.BoundVolumeSnapshotContentName
	vsc, err := src.content(ctx, vscName)
	if err != nil {
		return "", getError(ctx, msgFailedToGetVolumeSnapshotContent, "'"+vscName+"'", err)
	}
	if vsc.Status == nil || vsc.Status.ReadyToUse == nil || !*vsc.Status.ReadyToUse {
		return "", status.Errorf(codes.Unavailable, "%s, name: %s", msgVolumeSnapshotContentNotReady, vscName)
	}
	if vsc.Status.SnapshotHandle == nil || *vsc.Status.SnapshotHandle == "" {
		return "", status.Errorf(codes.Unavailable, "%s, name: %s", msgVolumeSnapshotContentNoHandle, vscName)
	}
	ref := vsc.Spec.VolumeSnapshotRef
	if ref.Namespace != ns || ref.Name != name || (ref.UID != "" && ref.UID != vs.UID) {
		return "", status.Errorf(codes.Unavailable, msgVolumeSnapshotContentBoundElsewhere, vscName, ns, name)
	}
	if vsc.Spec.Driver != s.driver {
		return "", status.Errorf(codes.InvalidArgument, msgSnapshotOfAnotherDriverFmt, name, s.driver)
	}
	return *vsc.Status.SnapshotHandle, nil
}

// getError is the Unavailable status for a failed GET of what. A NotFound
// is told to the caller as the API server put it; any other failure is
// logged and reported without detail (it may name the API server's
// address).
func getError(ctx context.Context, msg, what string, err error) error {
	if apierrors.IsNotFound(err) {
		return status.Errorf(codes.Unavailable, "%s %s: %v", msg, what, err)
	}
	klog.FromContext(ctx).Error(err, msg, "object", what)
	return status.Errorf(codes.Unavailable, "%s %s: the API server could not be asked", msg, what)
}

// BaseRef is what a base_snapshot_id resolves to.
type BaseRef struct {
	// Names are the VolumeSnapshots in the request's namespace bound to a
	// VolumeSnapshotContent of this driver with the handle. They may have
	// been deleted since (a content with deletionPolicy Retain outlives
	// its VolumeSnapshot); the caller must be allowed to get each of them.
	// Empty when no content of this driver has the handle.
	Names []string
}

// ErrBaseInAnotherNamespace reports a base_snapshot_id whose
// VolumeSnapshotContent is bound to a VolumeSnapshot in another namespace
// only.
var ErrBaseInAnotherNamespace = errors.New("snapshotmetadata: the base snapshot belongs to a VolumeSnapshot in another namespace")

// Base resolves the CSI snapshot handle baseSnapshotID of a GetMetadataDelta
// call in namespace ns. The upstream sidecar passes the handle to the CSI
// driver without looking it up; Base is stricter only where no documented
// pattern breaks:
//
//	a VolumeSnapshotContent of this driver carries the handle, and is bound
//	to a VolumeSnapshot in ns (that VolumeSnapshot may be gone)
//	                      -> BaseRef.Names: the caller must be allowed to
//	                         get each of those VolumeSnapshots
//	contents carry it, none bound in ns
//	                      -> ErrBaseInAnotherNamespace (PermissionDenied)
//	no content of this driver carries it (the base VolumeSnapshot and its
//	content were deleted, and the backup application kept the handle, as
//	KEP-3314 documents)   -> an empty BaseRef: passed to the driver as is,
//	                         as upstream does; the driver must refuse a
//	                         handle it does not know, or of another volume
//
// Base reads the cache only: a content created a moment ago may not be seen
// yet, in which case the handle is treated as unknown, exactly as upstream
// treats every handle.
func (s *Snapshots) Base(baseSnapshotID, ns string) (BaseRef, error) {
	objs, err := s.byHandle.ByIndex(handleIndex, handleKey(s.driver, baseSnapshotID))
	if err != nil {
		return BaseRef{}, err
	}
	var ref BaseRef
	elsewhere := false
	for _, o := range objs {
		c, ok := o.(*snapshotv1.VolumeSnapshotContent)
		if !ok {
			continue
		}
		r := c.Spec.VolumeSnapshotRef
		if r.Namespace != ns || r.Name == "" {
			elsewhere = true
			continue
		}
		if !slices.Contains(ref.Names, r.Name) {
			ref.Names = append(ref.Names, r.Name)
		}
	}
	slices.Sort(ref.Names)
	if len(ref.Names) == 0 && elsewhere {
		return BaseRef{}, ErrBaseInAnotherNamespace
	}
	return ref, nil
}
