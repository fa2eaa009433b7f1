package grpcauth

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// ErrInvalidArgument is matched by the errors an [AttributesFunc] returns
// when the request lacks a field that authorization needs. The interceptors
// turn it into codes.InvalidArgument.
var ErrInvalidArgument = errors.New("grpcauth: invalid argument")

// MissingFieldError reports a request field that authorization needs but
// the request left empty. It matches [ErrInvalidArgument].
type MissingFieldError struct {
	// Field is the proto name of the field.
	Field string
}

// Error implements error.
func (e *MissingFieldError) Error() string {
	return fmt.Sprintf("grpcauth: request field %q is required", e.Field)
}

// Is reports whether target is [ErrInvalidArgument].
func (e *MissingFieldError) Is(target error) bool { return target == ErrInvalidArgument }

// Resource describes a Kubernetes resource request that a call must be
// allowed to make, with its namespace and name read from fields of the
// request message. Its [Resource.Attributes] method is an [AttributesFunc].
//
// For example, the SnapshotMetadata API's GetMetadataAllocated call needs
//
//	grpcauth.Resource{Verb: "get", APIGroup: "snapshot.storage.k8s.io",
//		Resource: "volumesnapshots", NamespaceField: "namespace",
//		NameField: "snapshot_name"}.Attributes
type Resource struct {
	// Verb, APIGroup, APIVersion, Resource and Subresource are copied to
	// the attributes. The empty APIGroup is the core group; an empty
	// APIVersion matches any version in RBAC.
	Verb, APIGroup, APIVersion, Resource, Subresource string

	// Namespace is a fixed namespace. It is used when NamespaceField is
	// empty; both empty means a cluster-scoped resource.
	Namespace string
	// NamespaceField is the proto name of the request field holding the
	// namespace. When set, the field is required: an empty value fails
	// the call with codes.InvalidArgument.
	NamespaceField string

	// Name is a fixed object name, used when NameField is empty; both
	// empty authorize the whole collection.
	Name string
	// NameField is the proto name of the request field holding the object
	// name. When set, the field is required.
	NameField string
}

// Attributes builds the one attribute set r describes for the call. It is
// an [AttributesFunc] and is safe for concurrent use.
func (r Resource) Attributes(_ context.Context, req any, u user.Info) ([]authorizer.Attributes, error) {
	ns, err := fieldOr(req, r.NamespaceField, r.Namespace)
	if err != nil {
		return nil, err
	}
	name, err := fieldOr(req, r.NameField, r.Name)
	if err != nil {
		return nil, err
	}
	return []authorizer.Attributes{authorizer.AttributesRecord{
		User:            u,
		Verb:            r.Verb,
		Namespace:       ns,
		APIGroup:        r.APIGroup,
		APIVersion:      r.APIVersion,
		Resource:        r.Resource,
		Subresource:     r.Subresource,
		Name:            name,
		ResourceRequest: true,
	}}, nil
}

func fieldOr(req any, field, fixed string) (string, error) {
	if field == "" {
		return fixed, nil
	}
	v, ok := StringField(req, field)
	if !ok || v == "" {
		return "", &MissingFieldError{Field: field}
	}
	return v, nil
}

// JoinAttributes returns an [AttributesFunc] that concatenates the sets of
// every fs, in order, so that all of them must be allowed. The first error
// stops it. A nil entry in fs is skipped.
func JoinAttributes(fs ...AttributesFunc) AttributesFunc {
	return func(ctx context.Context, req any, u user.Info) ([]authorizer.Attributes, error) {
		var all []authorizer.Attributes
		for _, f := range fs {
			if f == nil {
				continue
			}
			a, err := f(ctx, req, u)
			if err != nil {
				return nil, err
			}
			all = append(all, a...)
		}
		return all, nil
	}
}
