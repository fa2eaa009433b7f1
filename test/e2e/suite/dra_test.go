package suite_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/local"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/reviewauth/reviewauth/grpcauth"
	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

// draPrepare is the draplugin example's one method. Its messages are
// described at run time, as the example does (it has no generated code):
//
//	message PrepareRequest  { string namespace = 1; string claim_name = 2; }
//	message PrepareResponse { repeated string devices = 1; }
const draPrepare = "/draplugin.v1.Node/Prepare"

var draRequest, draResponse = func() (protoreflect.MessageDescriptor, protoreflect.MessageDescriptor) {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:    proto.String("e2e/draplugin/v1/node.proto"),
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

// prepare calls the plugin's Prepare for the ResourceClaim ns/claim and
// returns the devices.
func prepare(ctx context.Context, conn *grpc.ClientConn, ns, claim string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req := dynamicpb.NewMessage(draRequest)
	req.Set(draRequest.Fields().ByName("namespace"), protoreflect.ValueOfString(ns))
	req.Set(draRequest.Fields().ByName("claim_name"), protoreflect.ValueOfString(claim))
	resp := dynamicpb.NewMessage(draResponse)
	if err := conn.Invoke(ctx, draPrepare, req, resp); err != nil {
		return nil, err
	}
	l := resp.Get(draResponse.Fields().ByName("devices")).List()
	out := make([]string, l.Len())
	for i := range out {
		out[i] = l.Get(i).String()
	}
	return out, nil
}

// plugin is a running draplugin example on a Unix socket.
type plugin struct {
	*example
	audience string
	socket   string
}

// startPlugin runs the draplugin example for node on a Unix socket.
func startPlugin(t testing.TB, c *cluster.Cluster, node, nodeUID string) *plugin {
	t.Helper()
	kubeconfig := reviewerKubeconfig(t, c, "draplugin")
	p := &plugin{audience: cluster.UniqueName("draplugin") + ".example.com", socket: filepath.Join(shortTempDir(t), "plugin.sock")}
	p.example = startExample(t, draPluginBin, "--listen=unix://"+p.socket, "--kubeconfig="+kubeconfig,
		"--audience="+p.audience, "--node-name="+node, "--node-uid="+nodeUID)
	return p
}

// dial connects to the plugin with grpc's local credentials, sending token
// with grpcauth.PerRPCCredentials; the connection closes when the test ends.
func (p *plugin) dial(t testing.TB, token string) *grpc.ClientConn {
	t.Helper()
	src := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token})
	conn, err := grpc.NewClient("unix://"+p.socket, grpc.WithTransportCredentials(local.NewCredentials()),
		grpc.WithPerRPCCredentials(grpcauth.PerRPCCredentials(src)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// claimSpec is the SubjectAccessReview the plugin makes for user preparing
// the ResourceClaim ns/claim.
func claimSpec(user, ns, claim string) authorizationv1.SubjectAccessReviewSpec {
	return authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{
		Verb: "get", Group: "resource.k8s.io", Resource: "resourceclaims", Namespace: ns, Name: claim,
	}}
}

// TestDRANodeLocal runs the DRA flow: the draplugin example on node A
// serves a driver whose pod is bound to node A and refuses the same
// ServiceAccount's pod on node B, which RBAC allows just as well.
func TestDRANodeLocal(t *testing.T) {
	t.Parallel()
	c := cluster.Get(t)
	nodeA, nodeB := c.CreateNode(t, cluster.UniqueName("node-a")), c.CreateNode(t, cluster.UniqueName("node-b"))
	p := startPlugin(t, c, nodeA.Name, string(nodeA.UID))

	ns := c.UniqueNamespace(t, "dra")
	c.CreateServiceAccount(t, ns, "driver")
	c.CreateRole(t, ns, "claim-reader", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}})
	c.BindRole(t, ns, "claim-reader", cluster.ServiceAccountSubject(ns, "driver"))
	user := serviceAccountUser(ns, "driver")
	c.WaitForAccess(t, claimSpec(user, ns, "claim-1"), true)

	podA := c.CreatePod(t, ns, "driver-a", cluster.PodOptions{NodeName: nodeA.Name, ServiceAccount: "driver"})
	podB := c.CreatePod(t, ns, "driver-b", cluster.PodOptions{NodeName: nodeB.Name, ServiceAccount: "driver"})
	tokA := c.RequestToken(t, ns, "driver", cluster.TokenOptions{Audiences: []string{p.audience}, BoundPod: podA})
	tokB := c.RequestToken(t, ns, "driver", cluster.TokenOptions{Audiences: []string{p.audience}, BoundPod: podB})
	notBound := c.RequestToken(t, ns, "driver", cluster.TokenOptions{Audiences: []string{p.audience}})
	// The API server's answer for B's token: the same user, on node B.
	if st := c.ReviewToken(t, tokB, p.audience); !st.Authenticated || st.User.Username != user || !slices.Equal(st.User.Extra[extraNodeName], authenticationv1.ExtraValue{nodeB.Name}) {
		t.Fatalf("TokenReview(token of the pod on B) = %+v; want %s on node %s", st, user, nodeB.Name)
	}

	tests := []struct {
		name       string
		token      string
		claim      string
		want       codes.Code
		wantDevice string
	}{
		{name: "driver on node A", token: tokA, claim: "claim-1", want: codes.OK, wantDevice: nodeA.Name + "/"},
		{name: "driver on node B", token: tokB, claim: "claim-1", want: codes.PermissionDenied},
		{name: "token bound to no node", token: notBound, claim: "claim-1", want: codes.PermissionDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			devices, err := prepare(t.Context(), p.dial(t, tc.token), ns, tc.claim)
			t.Logf("observed: Prepare(%s) = %q, %v", tc.name, devices, err)
			wantCode(t, "Prepare("+tc.name+")", err, tc.want, tokA, tokB, notBound)
			if tc.wantDevice != "" && (len(devices) != 1 || !strings.HasPrefix(devices[0], tc.wantDevice)) {
				t.Errorf("Prepare(%s) = %q; want one device starting with %q", tc.name, devices, tc.wantDevice)
			}
		})
	}
}
