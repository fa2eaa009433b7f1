package cluster_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reviewauth/reviewauth/test/e2e/cluster"
)

const (
	testKustomization = `namespace: app
resources: [objects.yaml]
patches:
- path: values.yaml
`
	testObjects = `apiVersion: v1
kind: Namespace
metadata: {name: app}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: server}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: server-auth-delegator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:auth-delegator}
subjects:
- kind: ServiceAccount
  name: server
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {audience: placeholder, address: placeholder}
`
	testValues = `apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {address: fill-me}
`
)

// writeKustomization writes the test kustomization into a new directory.
func writeKustomization(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "deploy")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]string{"kustomization.yaml": testKustomization, "objects.yaml": testObjects, "values.yaml": testValues} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestRender checks the edits Render makes: the namespace moves every
// namespaced object and renames the Namespace, the suffix renames every
// object and the binding's subject follows, values fill the patch, and
// the files on disk stay as they were.
func TestRender(t *testing.T) {
	t.Parallel()
	dir := writeKustomization(t)
	m, err := cluster.Render(dir, cluster.RenderOptions{Namespace: "e2e-1", NameSuffix: "-x1",
		Values: map[string]map[string]any{"values.yaml": {"data.address": "127.0.0.1:1234"}}})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range m.Objects {
		kinds = append(kinds, o.GetKind())
	}
	if kinds[0] != "Namespace" {
		t.Errorf("Render order = %q; want the Namespace first", kinds)
	}
	if got := m.Namespace(); got != "e2e-1" {
		t.Errorf("Namespace() = %q; want e2e-1", got)
	}
	sa := m.Object("ServiceAccount", "server")
	if sa == nil || sa.GetName() != "server-x1" || sa.GetNamespace() != "e2e-1" {
		t.Fatalf("Object(ServiceAccount, server) = %v; want server-x1 in e2e-1", sa)
	}
	crb := m.Object("ClusterRoleBinding", "server-auth-delegator")
	subjects, _, _ := unstructuredSlice(crb.Object, "subjects")
	if len(subjects) != 1 || subjects[0]["name"] != "server-x1" || subjects[0]["namespace"] != "e2e-1" {
		t.Errorf("ClusterRoleBinding subjects = %v; want the renamed ServiceAccount server-x1 in e2e-1", subjects)
	}
	if ref := crb.Object["roleRef"].(map[string]any)["name"]; ref != "system:auth-delegator" {
		t.Errorf("roleRef.name = %v; want the built-in system:auth-delegator unchanged", ref)
	}
	cm := m.Object("ConfigMap", "settings")
	if data := cm.Object["data"].(map[string]any); data["address"] != "127.0.0.1:1234" || data["audience"] != "placeholder" {
		t.Errorf("ConfigMap data = %v; want the address filled by the patch, the audience kept", data)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "values.yaml")); string(b) != testValues {
		t.Errorf("values.yaml on disk = %q; want it unchanged", b)
	}
}

// TestRenderValueNotInFile: a value for a path the patch does not hold is
// an error, so the e2e fills only what the documented patch has.
func TestRenderValueNotInFile(t *testing.T) {
	t.Parallel()
	_, err := cluster.Render(writeKustomization(t), cluster.RenderOptions{
		Values: map[string]map[string]any{"values.yaml": {"data.audience": "x"}}})
	if err == nil || !strings.Contains(err.Error(), "holds no data.audience") {
		t.Errorf("Render(value for a path not in the patch) = %v; want an error naming data.audience", err)
	}
}

func unstructuredSlice(obj map[string]any, field string) ([]map[string]any, bool, error) {
	raw, ok := obj[field].([]any)
	var out []map[string]any
	for _, v := range raw {
		m, _ := v.(map[string]any)
		out = append(out, m)
	}
	return out, ok, nil
}

func TestSetFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		args, flags []string
		want        []string
	}{
		{name: "replace", args: []string{"--listen=:8443", "--audience=a"}, flags: []string{"--listen=127.0.0.1:0"}, want: []string{"--listen=127.0.0.1:0", "--audience=a"}},
		{name: "append", args: []string{"--audience=a"}, flags: []string{"--kubeconfig=/k"}, want: []string{"--audience=a", "--kubeconfig=/k"}},
		{name: "a prefix is another flag", args: []string{"--listen-address=x"}, flags: []string{"--listen=y"}, want: []string{"--listen-address=x", "--listen=y"}},
		{name: "boolean", args: []string{"--v2", "--x"}, flags: []string{"--x=false"}, want: []string{"--v2", "--x=false"}},
		{name: "repeated, replaced together", args: []string{"--a=1", "--driver=x", "--b=2", "--driver=y"}, flags: []string{"--driver=p", "--c=3", "--driver=q"},
			want: []string{"--a=1", "--driver=p", "--driver=q", "--b=2", "--c=3"}},
		{name: "repeated, appended", args: []string{"--a=1"}, flags: []string{"--driver=p", "--driver=q"}, want: []string{"--a=1", "--driver=p", "--driver=q"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := cluster.SetFlags(tc.args, tc.flags...); !slices.Equal(got, tc.want) {
				t.Errorf("SetFlags(%q, %q) = %q; want %q", tc.args, tc.flags, got, tc.want)
			}
		})
	}
}

func TestLocalPath(t *testing.T) {
	t.Parallel()
	dirs := map[string]string{"/etc/app": "/tmp/a", "/etc/app/tls": "/tmp/b"}
	mounts := []string{"/etc/app/tls", "/etc/app"}
	tests := map[string]string{
		"--config-file=/etc/app/config.yaml":   "--config-file=/tmp/a/config.yaml",
		"--tls-cert-file=/etc/app/tls/tls.crt": "--tls-cert-file=/tmp/b/tls.crt",
		"/etc/app":                             "/tmp/a",
		"--x=/etc/application/f":               "--x=/etc/application/f",
		"--listen=0.0.0.0:8443":                "--listen=0.0.0.0:8443",
		"--bool":                               "--bool",
	}
	for in, want := range tests {
		if got := cluster.LocalPath(in, mounts, dirs); got != want {
			t.Errorf("localPath(%q) = %q; want %q", in, got, want)
		}
	}
}
