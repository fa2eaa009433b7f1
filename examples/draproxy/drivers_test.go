package main

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
)

func TestParseDrivers(t *testing.T) {
	t.Parallel()
	d, err := parseDrivers([]string{"b.example.com=ns/sa", "a.example.com=ns/sa", "a.example.com=ns/sa", "a.example.com=other/sa.v1"})
	if err != nil {
		t.Fatal(err)
	}
	sa := &user.DefaultInfo{Name: "system:serviceaccount:ns:sa"}
	if got := d.names(sa); !slices.Equal(got, []string{"a.example.com", "b.example.com"}) {
		t.Errorf("names(ns/sa) = %q; want both, sorted, once", got)
	}
	if got := d.names(&user.DefaultInfo{Name: "system:serviceaccount:other:sa.v1"}); !slices.Equal(got, []string{"a.example.com"}) {
		t.Errorf("names(other/sa.v1) = %q", got)
	}
	if len(d.ids) != 2 || d.ids[0].String() != "ns/sa" || d.ids[1].String() != "other/sa.v1" {
		t.Errorf("ids = %v", d.ids)
	}
	for _, tt := range []struct {
		u      user.Info
		driver string
		want   bool
	}{
		{sa, "a.example.com", true},
		{sa, "c.example.com", false},
		{sa, "", false},
		{&user.DefaultInfo{Name: "system:serviceaccount:ns:other"}, "a.example.com", false},
		{&user.DefaultInfo{Name: "ns/sa"}, "a.example.com", false},
		{nil, "a.example.com", false},
	} {
		if got := d.allows(tt.u, tt.driver); got != tt.want {
			t.Errorf("allows(%v, %q) = %v; want %v", tt.u, tt.driver, got, tt.want)
		}
	}
	if r := d.refusal(&user.DefaultInfo{Name: "x"}, "a.example.com"); !strings.Contains(r, "bound to no DRA driver name") {
		t.Errorf("refusal(unbound) = %q", r)
	}
	for _, bad := range [][]string{nil, {""}, {"a.example.com"}, {"=ns/sa"}, {"a.example.com=/sa"}, {"a.example.com=ns/"}, {"a.example.com=ns/sa/x"}, {"A.example.com=ns/sa"}, {"a.example.com=NS/sa"}, {"a.example.com=ns/s_a"}} {
		if _, err := parseDrivers(bad); err == nil {
			t.Errorf("parseDrivers(%q) = nil error; want one", bad)
		}
	}
}
