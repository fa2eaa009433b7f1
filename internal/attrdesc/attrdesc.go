// Package attrdesc parses the one-line descriptions of authorizer
// attributes that drive the fuzz targets of authz (FuzzCacheKey) and
// internal/cache (FuzzAttributeEncoding), so that both read their inputs
// alike. It is for tests.
package attrdesc

import (
	"errors"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Parse reads
//
//	name|uid|g1,g2|k=v1,v2;k2=v|verb|ns|res|sub|obj|fieldsel|labelsel|path|R|group|version|ferr|lerr
//
// into attributes. Missing fields are empty. "R" makes a resource request.
// Selectors are parsed as k8s.io/apiserver parses them (one that does not
// parse is left out); ferr and lerr, when not empty, are selector parse
// errors with that message. An extra key without "=" values has nil
// values.
func Parse(s string) authorizer.AttributesRecord {
	f := strings.Split(s, "|")
	for len(f) < 17 {
		f = append(f, "")
	}
	u := &user.DefaultInfo{Name: f[0], UID: f[1]}
	if f[2] != "" {
		u.Groups = strings.Split(f[2], ",")
	}
	if f[3] != "" {
		u.Extra = map[string][]string{}
		for _, kv := range strings.Split(f[3], ";") {
			k, v, _ := strings.Cut(kv, "=")
			if v == "" {
				u.Extra[k] = nil
			} else {
				u.Extra[k] = strings.Split(v, ",")
			}
		}
	}
	a := authorizer.AttributesRecord{
		User: u, Verb: f[4], Namespace: f[5], Resource: f[6], Subresource: f[7], Name: f[8], Path: f[11],
		ResourceRequest: f[12] == "R", APIGroup: f[13], APIVersion: f[14],
	}
	if sel, err := fields.ParseSelector(f[9]); err == nil {
		a.FieldSelectorRequirements = sel.Requirements()
	}
	if sel, err := labels.Parse(f[10]); err == nil {
		a.LabelSelectorRequirements, _ = sel.Requirements()
	}
	if f[15] != "" {
		a.FieldSelectorParsingErr = errors.New(f[15])
	}
	if f[16] != "" {
		a.LabelSelectorParsingErr = errors.New(f[16])
	}
	return a
}
