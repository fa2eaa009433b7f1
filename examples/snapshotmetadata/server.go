package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/grpcauth"
)

// snapshotGroup and snapshotResource name the VolumeSnapshot resource the
// calls are authorized against.
const (
	snapshotGroup    = "snapshot.storage.k8s.io"
	snapshotResource = "volumesnapshots"
)

// rules returns the per-method rules of the SnapshotMetadata API. The token
// is the request's security_token, reviewed with the sidecar's audience.
//
//   - GetMetadataAllocated needs "get volumesnapshots" on snapshot_name in
//     namespace.
//   - GetMetadataDelta reveals data about two snapshots, so it needs both:
//     "get" on target_snapshot_name, and "get" on the VolumeSnapshot whose
//     CSI handle is base_snapshot_id, resolved by the backend. Both must be
//     allowed (All semantics): a caller may not learn how a snapshot it
//     cannot read differs from one it can.
//
// The upstream sidecar authorizes the namespace only; naming the snapshots
// lets RBAC rules with resourceNames restrict a backup application to some
// snapshots.
func rules(b Backend) map[string]grpcauth.Rule {
	token := grpcauth.FromField("security_token")
	snapshot := func(nameField string) grpcauth.AttributesFunc {
		return grpcauth.Resource{
			Verb: "get", APIGroup: snapshotGroup, Resource: snapshotResource,
			NamespaceField: "namespace", NameField: nameField,
		}.Attributes
	}
	base := func(ctx context.Context, req any, u user.Info) ([]authorizer.Attributes, error) {
		ns, _ := grpcauth.StringField(req, "namespace")
		id, _ := grpcauth.StringField(req, "base_snapshot_id")
		if id == "" {
			return nil, &grpcauth.MissingFieldError{Field: "base_snapshot_id"}
		}
		name, err := b.SnapshotName(ctx, ns, id)
		if errors.Is(err, ErrUnknownSnapshot) {
			return nil, fmt.Errorf("%w: base_snapshot_id does not name a VolumeSnapshot in namespace %q", grpcauth.ErrInvalidArgument, ns)
		}
		if err != nil {
			return nil, fmt.Errorf("resolving base_snapshot_id: %w", err) // Unavailable
		}
		return grpcauth.Resource{
			Verb: "get", APIGroup: snapshotGroup, Resource: snapshotResource,
			NamespaceField: "namespace", Name: name,
		}.Attributes(ctx, req, u)
	}
	return map[string]grpcauth.Rule{
		api.SnapshotMetadata_GetMetadataAllocated_FullMethodName: {
			Token:      token,
			Attributes: snapshot("snapshot_name"),
		},
		api.SnapshotMetadata_GetMetadataDelta_FullMethodName: {
			Token:      token,
			Attributes: grpcauth.JoinAttributes(snapshot("target_snapshot_name"), base),
		},
	}
}

// server implements the SnapshotMetadata API over a [Backend]. By the time
// a handler runs, the interceptors have authenticated and authorized the
// call.
type server struct {
	api.UnimplementedSnapshotMetadataServer
	backend Backend
}

func (s *server) GetMetadataAllocated(req *api.GetMetadataAllocatedRequest, stream grpc.ServerStreamingServer[api.GetMetadataAllocatedResponse]) error {
	ctx := stream.Context()
	if req.GetStartingOffset() < 0 || req.GetMaxResults() < 0 {
		return status.Error(codes.InvalidArgument, "starting_offset and max_results must not be negative")
	}
	u, _ := grpcauth.UserFrom(ctx)
	klog.FromContext(ctx).V(2).Info("GetMetadataAllocated", "user", u.GetName(), "namespace", req.GetNamespace(), "snapshot", req.GetSnapshotName())
	return backendStatus(s.backend.Allocated(ctx, req.GetNamespace(), req.GetSnapshotName(), req.GetStartingOffset(), req.GetMaxResults(), stream.Send))
}

func (s *server) GetMetadataDelta(req *api.GetMetadataDeltaRequest, stream grpc.ServerStreamingServer[api.GetMetadataDeltaResponse]) error {
	ctx := stream.Context()
	if req.GetStartingOffset() < 0 || req.GetMaxResults() < 0 {
		return status.Error(codes.InvalidArgument, "starting_offset and max_results must not be negative")
	}
	u, _ := grpcauth.UserFrom(ctx)
	klog.FromContext(ctx).V(2).Info("GetMetadataDelta", "user", u.GetName(), "namespace", req.GetNamespace(), "base", req.GetBaseSnapshotId(), "target", req.GetTargetSnapshotName())
	return backendStatus(s.backend.Delta(ctx, req.GetNamespace(), req.GetBaseSnapshotId(), req.GetTargetSnapshotName(), req.GetStartingOffset(), req.GetMaxResults(), stream.Send))
}

// backendStatus passes status errors through and turns others into
// Internal, as the upstream sidecar does.
func backendStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, "snapshotmetadata: "+err.Error())
}
