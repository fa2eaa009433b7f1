package cache_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/reviewauth/reviewauth/internal/attrdesc"
	"github.com/reviewauth/reviewauth/internal/cache"
)

// view is everything an authorizer can read of a, in a form where two
// attribute sets no authorizer can tell apart are deeply equal: groups
// sorted (a set), extras without the ignored keys and with empty values as
// nil.
type view struct {
	User, UID                                string
	Groups                                   []string
	Extra                                    map[string][]string
	Verb, Path, NS, Group, Version, Res, Sub string
	Name                                     string
	Resource, ReadOnly                       bool
	Fields                                   []fields.Requirement
	Labels                                   [][]string
	FieldErr, LabelErr                       string
	HasFieldErr, HasLabelErr                 bool
}

func viewOf(a authorizer.AttributesRecord, ignored []string) view {
	v := view{
		User: a.User.GetName(), UID: a.User.GetUID(), Groups: slices.Sorted(slices.Values(a.User.GetGroups())),
		Verb: a.Verb, Path: a.Path, NS: a.Namespace, Group: a.APIGroup, Version: a.APIVersion, Res: a.Resource, Sub: a.Subresource,
		Name: a.Name, Resource: a.ResourceRequest, ReadOnly: a.IsReadOnly(), Fields: a.FieldSelectorRequirements,
	}
	if len(v.Groups) == 0 {
		v.Groups = nil
	}
	for k, vals := range a.User.GetExtra() {
		if slices.Contains(ignored, k) {
			continue
		}
		if v.Extra == nil {
			v.Extra = map[string][]string{}
		}
		if len(vals) == 0 {
			vals = nil
		}
		v.Extra[k] = vals
	}
	if len(v.Fields) == 0 {
		v.Fields = nil
	}
	for _, r := range a.LabelSelectorRequirements {
		v.Labels = append(v.Labels, append([]string{r.Key(), string(r.Operator())}, r.ValuesUnsorted()...))
	}
	if err := a.FieldSelectorParsingErr; err != nil {
		v.HasFieldErr, v.FieldErr = true, err.Error()
	}
	if err := a.LabelSelectorParsingErr; err != nil {
		v.HasLabelErr, v.LabelErr = true, err.Error()
	}
	return v
}

// FuzzAttributeEncoding checks that two attribute sets encode the same,
// with every attribute covered, exactly when no authorizer can tell them
// apart (their views are equal), with and without ignored extras.
func FuzzAttributeEncoding(f *testing.F) {
	base := "alice|uid-1|system:authenticated,g|authentication.kubernetes.io/credential-id=JTI=1;k=v|list|default|pods||p|spec.nodeName=a|app=x||R|apps|v1||"
	for _, s := range [][2]string{
		{base, base},
		{base, strings.Replace(base, "JTI=1", "JTI=2", 1)},
		{base, strings.Replace(base, "system:authenticated,g", "g,system:authenticated", 1)},
		{"a||||get|ns|pods|||x>1|||R", "a||||get|ns|pods||||||R"},
		{"a||||get|ns|pods||||x=a||R", "a||||get|ns|pods||||x in (a)||R"},
		{"a||||get|ns||||||/x|", "a||||get|||||||/x|"},
		{"a||||get|||||||/x||||e", "a||||get|||||||/x||||"},
		{"a||||get|||||||/x|||e|", "a||||get|||||||/x||||e"},
		{"a|b|c,d|||||||||/x|", "a|b|cd|||||||||/x|"},
		{"a||g|k=;k2=v|get|||||||/x|", "a||g|k2=v;k=|get|||||||/x|"},
		{"a||||get|||||||/x|R", "a||||watch|||||||/x|R"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, s1, s2 string) {
		a1, a2 := attrdesc.Parse(s1), attrdesc.Parse(s2)
		for _, ignored := range [][]string{nil, {user.CredentialIDKey}} {
			e := cache.AttributeEncoder{Ignored: ignored}
			same := e.Encode(a1) == e.Encode(a2)
			if want := reflect.DeepEqual(viewOf(a1, ignored), viewOf(a2, ignored)); same != want {
				t.Errorf("Encode(%q) == Encode(%q) with %q ignored is %v; want %v", s1, s2, ignored, same, want)
			}
		}
	})
}

func TestSAROperators(t *testing.T) {
	t.Parallel()
	tests := []struct {
		op           selection.Operator
		label, field string // "" means dropped
	}{
		{selection.Equals, "In", "In"},
		{selection.DoubleEquals, "In", "In"},
		{selection.In, "In", "In"},
		{selection.NotEquals, "NotIn", "NotIn"},
		{selection.NotIn, "NotIn", "NotIn"},
		{selection.Exists, "Exists", ""},
		{selection.DoesNotExist, "DoesNotExist", ""},
		{selection.GreaterThan, "", ""},
		{selection.LessThan, "", ""},
		{"", "", ""},
	}
	for _, tt := range tests {
		l, lok := cache.SARLabelOperator(tt.op)
		f, fok := cache.SARFieldOperator(tt.op)
		if string(l) != tt.label || lok != (tt.label != "") || string(f) != tt.field || fok != (tt.field != "") {
			t.Errorf("operator %q: label (%q, %v), field (%q, %v); want %q, %q", tt.op, l, lok, f, fok, tt.label, tt.field)
		}
	}
	if metav1.LabelSelectorOpIn != "In" || metav1.FieldSelectorOpNotIn != "NotIn" {
		t.Fatal("the API's operator names changed")
	}
}

// TestAttributeBytes: what the caller controls, and only that; selectors
// of a non-resource request and parse errors count only for the
// full-attribute key.
func TestAttributeBytes(t *testing.T) {
	t.Parallel()
	a := attrdesc.Parse("a-long-user-name|uid|g||get|ns|pods|log|p|spec.nodeName=n|app in (x,y)|/api|R|apps|v1|ferr|")
	want := len("ns") + len("get") + len("apps") + len("v1") + len("pods") + len("log") + len("p") + len("/api") +
		len("spec.nodeName") + len("=") + len("n") + len("app") + len("in") + len("x") + len("y")
	if got := cache.AttributeBytes(a, true); got != want {
		t.Errorf("AttributeBytes(resource, SAR) = %d; want %d", got, want)
	}
	if got := cache.AttributeBytes(a, false); got != want+len("ferr") {
		t.Errorf("AttributeBytes(resource, all) = %d; want %d", got, want+len("ferr"))
	}
	a.ResourceRequest = false
	if got, wantSAR := cache.AttributeBytes(a, true), len("nsgetappsv1podslogp/api"); got != wantSAR {
		t.Errorf("AttributeBytes(non-resource, SAR) = %d; want %d", got, wantSAR)
	}
	if got := cache.AttributeBytes(a, false); got != want+len("ferr") {
		t.Errorf("AttributeBytes(non-resource, all) = %d; want %d", got, want+len("ferr"))
	}
}

func TestAttributeEncoderAppendDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	var a authorizer.Attributes = attrdesc.Parse("alice|uid|b,a|k=v;j=w|list|default|pods||p|spec.nodeName=a|app in (x,y),tier||R|apps|v1||")
	buf := make([]byte, 0, 1024)
	for _, sar := range []bool{false, true} {
		e := cache.AttributeEncoder{Ignored: []string{"k"}, SubjectAccessReview: sar}
		if n := testing.AllocsPerRun(100, func() { buf = e.Append(buf[:0], a) }); n != 0 {
			t.Errorf("Append(SubjectAccessReview %v) = %v allocs; want 0", sar, n)
		}
	}
}
