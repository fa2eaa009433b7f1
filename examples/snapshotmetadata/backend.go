package main

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
)

// Backend is where block metadata comes from. In a real sidecar it is the
// CSI driver's SnapshotMetadata service on a Unix socket, which takes CSI
// snapshot handles, not VolumeSnapshot names; here it is pluggable, and
// [FakeBackend] makes up deterministic metadata.
//
// By the time the sidecar calls the backend it has checked, in this order:
//
//   - the call's security_token is a token the API server authenticates for
//     the sidecar's audience;
//   - the caller may get the target VolumeSnapshot, by name, in the call's
//     namespace (snapshot_name, or target_snapshot_name for a delta), and,
//     for a delta, each VolumeSnapshot in that namespace bound to a
//     VolumeSnapshotContent of this driver that carries base_snapshot_id
//     (see [Snapshots.Base]);
//   - the target VolumeSnapshot exists, is ready to use, and is bound to a
//     ready VolumeSnapshotContent of this driver, bound back to it, whose
//     handle is the snapshotID or targetSnapshotID passed here (see
//     [Snapshots.Target]);
//   - starting_offset and max_results are not negative.
//
// It has not checked baseSnapshotID against storage: when no
// VolumeSnapshotContent carries it (the base snapshot's objects were
// deleted and the backup application kept the handle), it is passed as the
// caller sent it, as the upstream sidecar does. A backend must refuse a
// base it does not know, or one that is not a snapshot of the target's
// volume (codes.InvalidArgument), as the CSI specification requires.
//
// Implementations must be safe for concurrent use. send delivers one
// response to the client; an error from send ends the stream. A status
// error is returned to the client as it is; any other error becomes
// codes.Internal.
type Backend interface {
	// Allocated streams the allocated blocks of the snapshot whose CSI
	// handle is snapshotID, from startingOffset, at most maxResults blocks
	// per response (0: the backend decides).
	Allocated(ctx context.Context, snapshotID string, startingOffset int64, maxResults int32, send func(*api.GetMetadataAllocatedResponse) error) error
	// Delta streams the blocks that changed between the snapshots whose CSI
	// handles are baseSnapshotID and targetSnapshotID.
	Delta(ctx context.Context, baseSnapshotID, targetSnapshotID string, startingOffset int64, maxResults int32, send func(*api.GetMetadataDeltaResponse) error) error
}

// FakeBackend serves made-up but deterministic metadata: a volume of
// Blocks fixed-length blocks of BlockSize bytes, in which a block is
// allocated, or changed, as a pure function of the snapshot handles and the
// block index. It knows every handle. The zero value is a 64-block volume of
// 1 MiB blocks. It is safe for concurrent use.
type FakeBackend struct {
	Blocks    int64
	BlockSize int64
}

const defaultMaxResults = 16

func (b FakeBackend) geometry() (blocks, size int64) {
	blocks, size = b.Blocks, b.BlockSize
	if blocks <= 0 {
		blocks = 64
	}
	if size <= 0 {
		size = 1 << 20
	}
	return blocks, size
}

// pick reports whether block i is selected for key: about two blocks in
// three.
func pick(key string, i int64) bool {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", key, i)
	return h.Sum32()%3 != 0
}

// pages returns the selected blocks at or after startingOffset, in pages
// of maxResults.
func (b FakeBackend) pages(key string, startingOffset int64, maxResults int32) [][]*api.BlockMetadata {
	blocks, size := b.geometry()
	per := int(maxResults)
	if per <= 0 {
		per = defaultMaxResults
	}
	var out [][]*api.BlockMetadata
	var page []*api.BlockMetadata
	for i := int64(0); i < blocks; i++ {
		off := i * size
		if off+size <= startingOffset || !pick(key, i) {
			continue
		}
		page = append(page, &api.BlockMetadata{ByteOffset: off, SizeBytes: size})
		if len(page) == per {
			out = append(out, page)
			page = nil
		}
	}
	if len(page) > 0 {
		out = append(out, page)
	}
	return out
}

// Allocated implements [Backend].
func (b FakeBackend) Allocated(ctx context.Context, snapshotID string, startingOffset int64, maxResults int32, send func(*api.GetMetadataAllocatedResponse) error) error {
	blocks, size := b.geometry()
	for _, p := range b.pages(snapshotID, startingOffset, maxResults) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := send(&api.GetMetadataAllocatedResponse{
			BlockMetadataType:   api.BlockMetadataType_FIXED_LENGTH,
			VolumeCapacityBytes: blocks * size,
			BlockMetadata:       p,
		}); err != nil {
			return err
		}
	}
	return nil
}

// Delta implements [Backend].
func (b FakeBackend) Delta(ctx context.Context, baseSnapshotID, targetSnapshotID string, startingOffset int64, maxResults int32, send func(*api.GetMetadataDeltaResponse) error) error {
	blocks, size := b.geometry()
	for _, p := range b.pages(fmt.Sprintf("%d:%s..%s", len(baseSnapshotID), baseSnapshotID, targetSnapshotID), startingOffset, maxResults) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := send(&api.GetMetadataDeltaResponse{
			BlockMetadataType:   api.BlockMetadataType_FIXED_LENGTH,
			VolumeCapacityBytes: blocks * size,
			BlockMetadata:       p,
		}); err != nil {
			return err
		}
	}
	return nil
}
