package main

import (
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapshotlisters "github.com/kubernetes-csi/external-snapshotter/client/v8/listers/volumesnapshot/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

// cacheIndexer returns an informer-like indexer holding the objects of kind
// ("VolumeSnapshot" or "VolumeSnapshotContent") among objs, with the
// indexes the sidecar's informers have.
func cacheIndexer(t *testing.T, objs []runtime.Object, kind string) cache.Indexer {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, handleIndex: contentHandles})
	for _, o := range objs {
		switch o.(type) {
		case *snapshotv1.VolumeSnapshot:
			if kind != "VolumeSnapshot" {
				continue
			}
		case *snapshotv1.VolumeSnapshotContent:
			if kind != "VolumeSnapshotContent" {
				continue
			}
		}
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

func newVSLister(idx cache.Indexer) snapshotlisters.VolumeSnapshotLister {
	return snapshotlisters.NewVolumeSnapshotLister(idx)
}

func newVSCLister(idx cache.Indexer) snapshotlisters.VolumeSnapshotContentLister {
	return snapshotlisters.NewVolumeSnapshotContentLister(idx)
}

func newFakeClock() *clocktesting.FakeClock {
	return clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
}
