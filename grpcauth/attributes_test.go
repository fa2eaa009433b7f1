package grpcauth_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/grpcauth"
)

func TestResourceAttributes(t *testing.T) {
	t.Parallel()
	u := &user.DefaultInfo{Name: "alice"}
	tests := []struct {
		name    string
		r       grpcauth.Resource
		req     any
		want    authorizer.AttributesRecord
		wantErr string // the missing field
	}{
		{
			name: "fields from the request",
			r:    grpcauth.Resource{Verb: "get", APIGroup: "example.com", APIVersion: "v1", Resource: "things", Subresource: "status", NamespaceField: "namespace", NameField: "name"},
			req:  newRequest("tok", "ns", "thing"),
			want: authorizer.AttributesRecord{User: u, Verb: "get", APIGroup: "example.com", APIVersion: "v1", Resource: "things", Subresource: "status", Namespace: "ns", Name: "thing", ResourceRequest: true},
		},
		{
			name: "fixed namespace and name",
			r:    grpcauth.Resource{Verb: "list", Resource: "pods", Namespace: "kube-system", Name: "fixed"},
			req:  newRequest("", "", ""),
			want: authorizer.AttributesRecord{User: u, Verb: "list", Resource: "pods", Namespace: "kube-system", Name: "fixed", ResourceRequest: true},
		},
		{
			name: "field wins over the fixed value",
			r:    grpcauth.Resource{Verb: "get", Resource: "things", Namespace: "fixed", NamespaceField: "namespace"},
			req:  newRequest("", "from-request", ""),
			want: authorizer.AttributesRecord{User: u, Verb: "get", Resource: "things", Namespace: "from-request", ResourceRequest: true},
		},
		{name: "empty required name", r: grpcauth.Resource{Verb: "get", NameField: "name"}, req: newRequest("", "ns", ""), wantErr: "name"},
		{name: "field not in the message", r: grpcauth.Resource{Verb: "get", NameField: "nope"}, req: newRequest("", "ns", "x"), wantErr: "nope"},
		{name: "not a string field", r: grpcauth.Resource{Verb: "get", NameField: "value"}, req: wrapperspb.Int64(3), wantErr: "value"},
		{name: "not a proto message", r: grpcauth.Resource{Verb: "get", NamespaceField: "namespace"}, req: "a string", wantErr: "namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.r.Attributes(context.Background(), tt.req, u)
			if tt.wantErr != "" {
				var mf *grpcauth.MissingFieldError
				if !errors.As(err, &mf) || mf.Field != tt.wantErr || !errors.Is(err, grpcauth.ErrInvalidArgument) {
					t.Fatalf("Attributes() = %v, %v; want a MissingFieldError for %q matching ErrInvalidArgument", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || len(got) != 1 {
				t.Fatalf("Attributes() = %v, %v; want one attribute set", got, err)
			}
			if diff := cmp.Diff(tt.want, got[0]); diff != "" {
				t.Errorf("Attributes() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJoinAttributes(t *testing.T) {
	t.Parallel()
	named := func(name string) grpcauth.AttributesFunc {
		return grpcauth.Resource{Verb: "get", Resource: "things", Name: name}.Attributes
	}
	boom := errors.New("boom")
	failing := func(context.Context, any, user.Info) ([]authorizer.Attributes, error) { return nil, boom }

	got, err := grpcauth.JoinAttributes(named("a"), nil, named("b"))(context.Background(), nil, &user.DefaultInfo{Name: "u"})
	if err != nil || len(got) != 2 || got[0].GetName() != "a" || got[1].GetName() != "b" {
		t.Errorf("JoinAttributes(a, nil, b)() = %v, %v; want [a b]", got, err)
	}
	got, err = grpcauth.JoinAttributes(named("a"), failing, named("b"))(context.Background(), nil, &user.DefaultInfo{Name: "u"})
	if !errors.Is(err, boom) || got != nil {
		t.Errorf("JoinAttributes(a, failing, b)() = %v, %v; want nil, boom", got, err)
	}
	got, err = grpcauth.JoinAttributes()(context.Background(), nil, nil)
	if err != nil || len(got) != 0 {
		t.Errorf("JoinAttributes()() = %v, %v; want no sets (which the interceptor denies)", got, err)
	}
}
