package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
)

// Backend is where block metadata comes from. In a real sidecar it is the
// CSI driver's SnapshotMetadata service on a Unix socket; here it is
// pluggable, and [FakeBackend] makes up deterministic metadata.
//
// Implementations must be safe for concurrent use. send delivers one
// response to the client; an error from send ends the stream.
type Backend interface {
	// Allocated streams the allocated blocks of the VolumeSnapshot
	// namespace/snapshot, from startingOffset, at most maxResults blocks
	// per response (0: the backend decides).
	Allocated(ctx context.Context, namespace, snapshot string, startingOffset int64, maxResults int32, send func(*api.GetMetadataAllocatedResponse) error) error
	// Delta streams the blocks that changed between the snapshot whose
	// CSI handle is baseSnapshotID and the VolumeSnapshot
	// namespace/targetSnapshot.
	Delta(ctx context.Context, namespace, baseSnapshotID, targetSnapshot string, startingOffset int64, maxResults int32, send func(*api.GetMetadataDeltaResponse) error) error
	// SnapshotName returns the name of the VolumeSnapshot in namespace
	// whose CSI handle is snapshotID, so that a delta call can be
	// authorized for its base snapshot too. It returns an error matching
	// [ErrUnknownSnapshot] when there is none.
	SnapshotName(ctx context.Context, namespace, snapshotID string) (string, error)
}

// ErrUnknownSnapshot reports a snapshot handle that names no VolumeSnapshot.
var ErrUnknownSnapshot = errors.New("snapshotmetadata: unknown snapshot")

// FakeBackend serves made-up but deterministic metadata: a volume of
// Blocks fixed-length blocks of BlockSize bytes, in which a block is
// allocated, or changed, as a pure function of the snapshot names and the
// block index. The CSI handle of VolumeSnapshot "x" is "snap-id-x". The zero
// value is a 64-block volume of 1 MiB blocks. It is safe for concurrent use.
type FakeBackend struct {
	Blocks    int64
	BlockSize int64
}

// SnapshotIDPrefix is the prefix of the fake CSI snapshot handles.
const SnapshotIDPrefix = "snap-id-"

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

// blocks returns the selected blocks at or after startingOffset, in pages
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
func (b FakeBackend) Allocated(ctx context.Context, namespace, snapshot string, startingOffset int64, maxResults int32, send func(*api.GetMetadataAllocatedResponse) error) error {
	blocks, size := b.geometry()
	for _, p := range b.pages(namespace+"/"+snapshot, startingOffset, maxResults) {
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
func (b FakeBackend) Delta(ctx context.Context, namespace, baseSnapshotID, targetSnapshot string, startingOffset int64, maxResults int32, send func(*api.GetMetadataDeltaResponse) error) error {
	blocks, size := b.geometry()
	for _, p := range b.pages(namespace+"/"+baseSnapshotID+".."+targetSnapshot, startingOffset, maxResults) {
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

// SnapshotName implements [Backend]: "snap-id-x" is VolumeSnapshot "x".
func (FakeBackend) SnapshotName(_ context.Context, _ string, snapshotID string) (string, error) {
	name, ok := strings.CutPrefix(snapshotID, SnapshotIDPrefix)
	if !ok || name == "" {
		return "", ErrUnknownSnapshot
	}
	return name, nil
}
