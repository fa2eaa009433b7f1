package main

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/reviewauth/reviewauth/grpcauth"
)

// The plugin's service is described at run time, so that the example needs
// no protoc and no generated code:
//
//	package draplugin.v1;
//	message PrepareRequest  { string namespace = 1; string claim_name = 2; }
//	message PrepareResponse { repeated string devices = 1; }
//	service Node { rpc Prepare(PrepareRequest) returns (PrepareResponse); }
//
// A real plugin would use the kubelet's generated DRA stubs; the
// authorization is the same.
const (
	serviceName   = "draplugin.v1.Node"
	methodPrepare = "/draplugin.v1.Node/Prepare"
)

var requestDesc, responseDesc = func() (protoreflect.MessageDescriptor, protoreflect.MessageDescriptor) {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:    proto.String("draplugin/v1/node.proto"),
		Package: proto.String("draplugin.v1"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("PrepareRequest"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("namespace"), Number: proto.Int32(1), Type: str, Label: opt, JsonName: proto.String("namespace")},
				{Name: proto.String("claim_name"), Number: proto.Int32(2), Type: str, Label: opt, JsonName: proto.String("claimName")},
			}},
			{Name: proto.String("PrepareResponse"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("devices"), Number: proto.Int32(1), Type: str, Label: rep, JsonName: proto.String("devices")},
			}},
		},
	}, nil)
	if err != nil {
		panic(err)
	}
	return fd.Messages().ByName("PrepareRequest"), fd.Messages().ByName("PrepareResponse")
}()

// NewPrepareRequest returns a PrepareRequest for the ResourceClaim
// namespace/claim.
func NewPrepareRequest(namespace, claim string) *dynamicpb.Message {
	m := dynamicpb.NewMessage(requestDesc)
	if namespace != "" {
		m.Set(requestDesc.Fields().ByName("namespace"), protoreflect.ValueOfString(namespace))
	}
	if claim != "" {
		m.Set(requestDesc.Fields().ByName("claim_name"), protoreflect.ValueOfString(claim))
	}
	return m
}

// NewPrepareResponse returns an empty PrepareResponse to decode into.
func NewPrepareResponse() *dynamicpb.Message { return dynamicpb.NewMessage(responseDesc) }

// Devices returns the devices of a PrepareResponse.
func Devices(resp *dynamicpb.Message) []string {
	l := resp.Get(responseDesc.Fields().ByName("devices")).List()
	out := make([]string, l.Len())
	for i := range out {
		out[i] = l.Get(i).String()
	}
	return out
}

// rules returns the plugin's rule: the token is in the authorization
// metadata, and Prepare needs "get resourceclaims" on the claim it names.
// The node-locality check is in the authorizer (authz.NodeLocal), so it
// applies to every attribute set.
func rules() map[string]grpcauth.Rule {
	return map[string]grpcauth.Rule{
		methodPrepare: {
			Token: grpcauth.FromMetadata(),
			Attributes: grpcauth.Resource{
				Verb: "get", APIGroup: "resource.k8s.io", Resource: "resourceclaims",
				NamespaceField: "namespace", NameField: "claim_name",
			}.Attributes,
		},
	}
}

// serviceDesc is the hand-written equivalent of generated registration
// code. prepare handles Prepare.
func serviceDesc(prepare func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error)) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: serviceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Prepare",
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				req := dynamicpb.NewMessage(requestDesc)
				if err := dec(req); err != nil {
					return nil, err
				}
				h := func(ctx context.Context, r any) (any, error) { return prepare(ctx, r.(*dynamicpb.Message)) }
				if ic == nil {
					return h(ctx, req)
				}
				return ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: methodPrepare}, h)
			},
		}},
	}
}

// prepareOn returns the Prepare handler of a plugin on node: it hands out
// one made-up device per claim. The interceptors have already checked that
// the caller is bound to this node and may get the claim.
func prepareOn(node string) func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
	return func(ctx context.Context, req *dynamicpb.Message) (*dynamicpb.Message, error) {
		ns, _ := grpcauth.StringField(req, "namespace")
		claim, _ := grpcauth.StringField(req, "claim_name")
		u, _ := request.UserFrom(ctx)
		klog.FromContext(ctx).V(2).Info("Prepare", "user", u.GetName(), "claim", ns+"/"+claim)
		resp := NewPrepareResponse()
		l := resp.Mutable(responseDesc.Fields().ByName("devices")).List()
		l.Append(protoreflect.ValueOfString(fmt.Sprintf("%s/gpu-0 for %s/%s", node, ns, claim)))
		return resp, nil
	}
}
