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
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth"
	"github.com/reviewauth/reviewauth/grpcauth"
)

// snapshotGroup and snapshotResource name the VolumeSnapshot resource the
// calls are authorized against.
const (
	snapshotGroup    = "snapshot.storage.k8s.io"
	snapshotResource = "volumesnapshots"
)

// The roles a VolumeSnapshot plays in a call, as named in denials and logs.
const (
	roleSnapshot = "snapshot"
	roleTarget   = "target snapshot"
	roleBase     = "base snapshot"
)

// snapshotAttributes are the attributes of "get" on one VolumeSnapshot, with
// the role it plays in the call, so that a denial can say which snapshot
// was refused (see namingAuthorizer).
type snapshotAttributes struct {
	authorizer.Attributes
	role   string
	baseID string // for roleBase: the base_snapshot_id of the call
}

// what describes the snapshot for denials and logs.
func (a snapshotAttributes) what() string {
	if a.role == roleBase {
		return fmt.Sprintf("%s (base_snapshot_id %q)", a.role, a.baseID)
	}
	return a.role
}

// rules returns the per-method rules of the SnapshotMetadata API. The token
// is the request's security_token, reviewed with the sidecar's audience.
//
//   - GetMetadataAllocated needs "get volumesnapshots" on snapshot_name in
//     namespace.
//   - GetMetadataDelta reveals data about two snapshots, so it needs "get" on
//     target_snapshot_name and on each VolumeSnapshot in namespace that
//     base_snapshot_id resolves to ([Snapshots.Base]); all must be allowed.
//     A base that resolves to none is passed to the driver, as upstream
//     does; one bound only in another namespace is refused
//     (PermissionDenied).
//
// The upstream sidecar authorizes the namespace only; naming the snapshots
// lets RBAC rules with resourceNames restrict a backup application to some
// snapshots. The base is resolved only after the token is authenticated, so
// an unauthenticated caller learns nothing about it.
func rules(snaps *Snapshots, refusals *refusalLog) map[string]grpcauth.Rule {
	token := grpcauth.FromField("security_token")
	snapshot := func(nameField, role string) grpcauth.AttributesFunc {
		return func(ctx context.Context, req any, u user.Info) ([]authorizer.Attributes, error) {
			attrs, err := grpcauth.Resource{
				Verb: "get", APIGroup: snapshotGroup, Resource: snapshotResource,
				NamespaceField: "namespace", NameField: nameField,
			}.Attributes(ctx, req, u)
			return withRole(attrs, role, ""), err
		}
	}
	base := func(ctx context.Context, req any, u user.Info) ([]authorizer.Attributes, error) {
		ns, _ := grpcauth.StringField(req, "namespace")
		id, _ := grpcauth.StringField(req, "base_snapshot_id")
		if ns == "" {
			return nil, &grpcauth.MissingFieldError{Field: "namespace"}
		}
		if id == "" {
			return nil, &grpcauth.MissingFieldError{Field: "base_snapshot_id"}
		}
		ref, err := snaps.Base(id, ns)
		if errors.Is(err, ErrBaseInAnotherNamespace) {
			reason := fmt.Sprintf("the base snapshot (base_snapshot_id %q) is not a VolumeSnapshot in namespace %q", id, ns)
			refusals.denied(u, ns, roleBase, "(base_snapshot_id "+id+")", reason)
			return nil, &reviewauth.DeniedError{Reason: reason}
		}
		if err != nil {
			return nil, fmt.Errorf("resolving base_snapshot_id: %w", err) // Unavailable
		}
		var out []authorizer.Attributes
		for _, name := range ref.Names {
			attrs, err := grpcauth.Resource{
				Verb: "get", APIGroup: snapshotGroup, Resource: snapshotResource,
				NamespaceField: "namespace", Name: name,
			}.Attributes(ctx, req, u)
			if err != nil {
				return nil, err
			}
			out = append(out, withRole(attrs, roleBase, id)...)
		}
		return out, nil
	}
	return map[string]grpcauth.Rule{
		api.SnapshotMetadata_GetMetadataAllocated_FullMethodName: {
			Token:      token,
			Attributes: snapshot("snapshot_name", roleSnapshot),
		},
		api.SnapshotMetadata_GetMetadataDelta_FullMethodName: {
			Token:      token,
			Attributes: grpcauth.JoinAttributes(snapshot("target_snapshot_name", roleTarget), base),
		},
	}
}

func withRole(attrs []authorizer.Attributes, role, baseID string) []authorizer.Attributes {
	for i, a := range attrs {
		attrs[i] = snapshotAttributes{Attributes: a, role: role, baseID: baseID}
	}
	return attrs
}

// namingAuthorizer is the sidecar's authorizer: it asks the inner one and,
// when a VolumeSnapshot is refused, names it (and its role in the call) in
// the reason, which becomes the PermissionDenied message, and logs the
// refusal.
type namingAuthorizer struct {
	inner    authorizer.UnconditionalAuthorizer
	refusals *refusalLog
}

// Authorize implements authorizer.UnconditionalAuthorizer.
func (n namingAuthorizer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	d, reason, err := n.inner.Authorize(ctx, a)
	sa, ok := a.(snapshotAttributes)
	if err != nil || d == authorizer.DecisionAllow || !ok {
		return d, reason, err
	}
	msg := fmt.Sprintf("get volumesnapshots %q in namespace %q, the %s, is not allowed", a.GetName(), a.GetNamespace(), sa.what())
	if reason != "" {
		msg += ": " + reason
	}
	n.refusals.denied(a.GetUser(), a.GetNamespace(), sa.role, snapshotName(sa), reason)
	return d, msg, nil
}

func snapshotName(a snapshotAttributes) string {
	if a.role == roleBase {
		return a.GetName() + " (base_snapshot_id " + a.baseID + ")"
	}
	return a.GetName()
}

// logUnauthenticated logs the calls refused with codes.Unauthenticated, with
// what they asked for (never the token), through refusals. It must come
// before grpcauth's stream interceptor in the chain: it records the first
// message the stream receives, whoever receives it.
func logUnauthenticated(refusals *refusalLog) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		rs := &recordingStream{ServerStream: ss}
		err := handler(srv, rs)
		if status.Code(err) == codes.Unauthenticated {
			refusals.unauthenticated(info.FullMethod, rs.firstMessage(), status.Convert(err).Message())
		}
		return err
	}
}

// server implements the SnapshotMetadata API over a [Backend]. By the time
// a handler runs, the interceptors have authenticated and authorized the
// call; the handler checks the target snapshot ([Snapshots.Target]) and
// calls the backend with its CSI handle.
type server struct {
	api.UnimplementedSnapshotMetadataServer
	backend   Backend
	snapshots *Snapshots
}

func (s *server) GetMetadataAllocated(req *api.GetMetadataAllocatedRequest, stream grpc.ServerStreamingServer[api.GetMetadataAllocatedResponse]) error {
	ctx := stream.Context()
	if req.GetStartingOffset() < 0 || req.GetMaxResults() < 0 {
		return status.Error(codes.InvalidArgument, "starting_offset and max_results must not be negative")
	}
	handle, err := s.snapshots.Target(ctx, req.GetNamespace(), req.GetSnapshotName())
	if err != nil {
		return err
	}
	u, _ := request.UserFrom(ctx)
	klog.FromContext(ctx).V(2).Info("GetMetadataAllocated", "user", u.GetName(), "namespace", req.GetNamespace(), "snapshot", req.GetSnapshotName(), "snapshotID", handle)
	return backendStatus(s.backend.Allocated(ctx, handle, req.GetStartingOffset(), req.GetMaxResults(), stream.Send))
}

func (s *server) GetMetadataDelta(req *api.GetMetadataDeltaRequest, stream grpc.ServerStreamingServer[api.GetMetadataDeltaResponse]) error {
	ctx := stream.Context()
	if req.GetStartingOffset() < 0 || req.GetMaxResults() < 0 {
		return status.Error(codes.InvalidArgument, "starting_offset and max_results must not be negative")
	}
	handle, err := s.snapshots.Target(ctx, req.GetNamespace(), req.GetTargetSnapshotName())
	if err != nil {
		return err
	}
	u, _ := request.UserFrom(ctx)
	klog.FromContext(ctx).V(2).Info("GetMetadataDelta", "user", u.GetName(), "namespace", req.GetNamespace(), "base", req.GetBaseSnapshotId(), "target", req.GetTargetSnapshotName(), "targetID", handle)
	return backendStatus(s.backend.Delta(ctx, req.GetBaseSnapshotId(), handle, req.GetStartingOffset(), req.GetMaxResults(), stream.Send))
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
