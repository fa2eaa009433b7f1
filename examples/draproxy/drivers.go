package main

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// identity is a driver's ServiceAccount, NAMESPACE/NAME.
type identity struct{ namespace, name string }

func (i identity) String() string { return i.namespace + "/" + i.name }

// userName is the user name the API server gives the ServiceAccount's
// tokens, system:serviceaccount:NAMESPACE:NAME.
func (i identity) userName() string { return serviceaccount.MakeUsername(i.namespace, i.name) }

// drivers binds DRA driver names to the ServiceAccounts that may publish
// them (--driver=NAME=NAMESPACE/SERVICEACCOUNT, repeatable): a
// ResourceSlice's spec.driver must be one of the names bound to the caller
// on every write. One identity may publish several names, and one name may
// be published by several identities. Read-only after parseDrivers; safe
// for concurrent use.
type drivers struct {
	byUser map[string][]string // user name -> driver names, sorted
	ids    []identity          // every identity, sorted
}

// parseDriver parses one --driver value, NAME=NAMESPACE/SERVICEACCOUNT,
// such as gpu.example.com=gpu-driver/kubelet-plugin. The driver name must
// be a DNS subdomain, as the API server validates spec.driver; the
// namespace a DNS label and the ServiceAccount a DNS subdomain.
func parseDriver(s string) (name string, id identity, err error) {
	name, sa, ok := strings.Cut(s, "=")
	ns, saName, ok2 := strings.Cut(sa, "/")
	if !ok || !ok2 || name == "" || ns == "" || saName == "" {
		return "", identity{}, fmt.Errorf("--driver %q: want NAME=NAMESPACE/SERVICEACCOUNT, such as gpu.example.com=gpu-driver/kubelet-plugin", s)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", identity{}, fmt.Errorf("--driver %q: driver name %q: %s", s, name, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "", identity{}, fmt.Errorf("--driver %q: namespace %q: %s", s, ns, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(saName); len(errs) > 0 {
		return "", identity{}, fmt.Errorf("--driver %q: ServiceAccount %q: %s", s, saName, strings.Join(errs, "; "))
	}
	return name, identity{ns, saName}, nil
}

// parseDrivers parses the --driver values. At least one is required.
func parseDrivers(values []string) (*drivers, error) {
	if len(values) == 0 {
		return nil, fmt.Errorf("--driver is required: bind each driver name to the ServiceAccount that publishes it, NAME=NAMESPACE/SERVICEACCOUNT")
	}
	d := &drivers{byUser: map[string][]string{}}
	for _, v := range values {
		name, id, err := parseDriver(v)
		if err != nil {
			return nil, err
		}
		u := id.userName()
		if _, ok := d.byUser[u]; !ok {
			d.ids = append(d.ids, id)
		}
		if !slices.Contains(d.byUser[u], name) {
			d.byUser[u] = append(d.byUser[u], name)
			slices.Sort(d.byUser[u])
		}
	}
	slices.SortFunc(d.ids, func(a, b identity) int { return strings.Compare(a.String(), b.String()) })
	return d, nil
}

// names returns the driver names bound to u (none for a user that is not
// a listed ServiceAccount). The slice is shared: do not modify it.
func (d *drivers) names(u user.Info) []string {
	if d == nil || u == nil {
		return nil
	}
	return d.byUser[u.GetName()]
}

// of returns the driver names bound to id, shared.
func (d *drivers) of(id identity) []string { return d.byUser[id.userName()] }

// allows reports whether u may write ResourceSlices of driver.
func (d *drivers) allows(u user.Info, driver string) bool {
	return driver != "" && slices.Contains(d.names(u), driver)
}

// refusal is the reason a slice of driver is refused to u: it names the
// driver and the names u may publish.
func (d *drivers) refusal(u user.Info, driver string) string {
	names := d.names(u)
	if len(names) == 0 {
		return fmt.Sprintf("%s is bound to no DRA driver name (--driver), so it may write no ResourceSlice", u.GetName())
	}
	return fmt.Sprintf("a ResourceSlice of driver %q may not be written by %s, which may publish only %s (--driver)", driver, u.GetName(), strings.Join(quoteAll(names), ", "))
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}
