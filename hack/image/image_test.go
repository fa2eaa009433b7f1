package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"debug/buildinfo"
	"encoding/pem"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// testProgram is the example the tests build an image of.
const testProgram = "metricsproxy"

// buildTimeout bounds one build of an example (a cold build cache on a
// busy 2-core machine takes minutes).
const buildTimeout = 15 * time.Minute

// repoRoot is the repository's root, from this package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// buildImage builds the image of testProgram from the repository at root.
func buildImage(t *testing.T, root string) *Image {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), buildTimeout)
	defer cancel()
	img, err := Build(ctx, testProgram, Options{Arch: runtime.GOARCH, Repository: "reviewauth", Source: DefaultSource, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestImage builds the image of an example, writes it as an OCI layout,
// loads it back and checks what a container runtime would run: the
// entrypoint, the non-root user, the labels and annotations, the files of
// its one layer (the CA bundle of x509roots/fallback, /etc/passwd naming
// the user), and the extracted program, whose --version says what the
// labels say. A second build gives the same digest, and the tarball
// holds the same image.
func TestImage(t *testing.T) {
	root := repoRoot(t)
	built := buildImage(t, root)
	dir := filepath.Join(t.TempDir(), testProgram)
	if err := built.WriteLayout(dir); err != nil {
		t.Fatal(err)
	}
	img := loadLayout(t, dir, built.Ref)
	builtDigest := mustDigest(t, built)
	if d := mustDigest(t, img); d != builtDigest {
		t.Errorf("the layout's image digest = %s; want %s", d, builtDigest)
	}

	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/usr/local/bin/" + testProgram}; !slices.Equal(cfg.Config.Entrypoint, want) {
		t.Errorf("Entrypoint = %q; want %q", cfg.Config.Entrypoint, want)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("User = %q; want 65532:65532 (non-root, numeric for runAsNonRoot)", cfg.Config.User)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Errorf("platform = %s/%s; want linux/%s", cfg.OS, cfg.Architecture, runtime.GOARCH)
	}
	labels := cfg.Config.Labels
	if labels[LabelTitle] != testProgram || labels[LabelSource] != DefaultSource || labels[LabelVersion] == "" {
		t.Errorf("Labels = %v; want title %s, source %s and a version", labels, testProgram, DefaultSource)
	}
	manifest, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(manifest.Annotations, labels) {
		t.Errorf("manifest annotations = %v; want the labels %v", manifest.Annotations, labels)
	}
	if len(manifest.Layers) != 1 {
		t.Fatalf("%d layers; want one (no base image)", len(manifest.Layers))
	}

	files := layerFiles(t, img)
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	wantNames := []string{"etc", "etc/group", "etc/passwd", "etc/ssl", "etc/ssl/certs", "etc/ssl/certs/ca-certificates.crt",
		"home", "home/nonroot", "tmp", "usr", "usr/local", "usr/local/bin", "usr/local/bin/" + testProgram}
	if !slices.Equal(names, wantNames) {
		t.Errorf("files = %q; want %q", names, wantNames)
	}
	if !strings.Contains(string(files["etc/passwd"].data), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd = %q; want the user 65532", files["etc/passwd"].data)
	}
	if h := files["usr/local/bin/"+testProgram].header; h.Mode != 0o755 || h.Uid != 0 {
		t.Errorf("the program's mode %o, owner %d; want 0755, root: the user may run it but not change it", h.Mode, h.Uid)
	}
	if h := files["tmp"].header; h.Mode != 0o1777 || h.Typeflag != tar.TypeDir {
		t.Errorf("/tmp mode %o; want a sticky directory writable by all", h.Mode)
	}
	checkCABundle(t, files[caBundle].data)

	// The program itself, run as the image would run it.
	exe := filepath.Join(t.TempDir(), testProgram)
	if err := os.WriteFile(exe, files["usr/local/bin/"+testProgram].data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), exe, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", testProgram, err, out)
	}
	commit := labels[LabelRevision]
	if commit == "" {
		commit = "unknown commit" // a tree the go command found no git repository for (a git worktree, an archive)
	}
	want := testProgram + " " + labels[LabelVersion] + " (" + commit + ", "
	t.Logf("observed: %s --version = %q; labels %v", testProgram, strings.TrimSpace(string(out)), labels)
	if !strings.HasPrefix(string(out), want) {
		t.Errorf("%s --version = %q; want it to start with %q, as the labels say", testProgram, out, want)
	}
	if bi, err := buildinfo.ReadFile(exe); err != nil || strings.Contains(bi.Path+bi.Main.Path, root) {
		t.Errorf("build info %v, %v; want it readable and free of the build machine's paths (-trimpath)", bi, err)
	}

	if pin, err := built.PinCommand(builtDigest); err != nil || !strings.HasSuffix(pin, "reviewauth/"+testProgram+"@"+builtDigest.String()) {
		t.Errorf("PinCommand = %q, %v; want the built digest pinned", pin, err)
	}

	again := buildImage(t, root)
	if d := mustDigest(t, again); d != builtDigest {
		t.Errorf("a second build's digest = %s; want %s (reproducible: every time is the commit's)", d, builtDigest)
	}
	tarPath := filepath.Join(t.TempDir(), testProgram+".tar")
	if err := built.WriteTarball(tarPath); err != nil {
		t.Fatal(err)
	}
	fromTar, err := tarball.ImageFromPath(tarPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := fromTar.ConfigName(); got != mustConfigName(t, img) {
		t.Errorf("the tarball's config digest = %s; want the layout's %s", got, mustConfigName(t, img))
	}
}

// TestImageVersionFromCommit builds the image from a clone of the
// repository's HEAD with a modified file: the revision label is the
// commit with -dirty, the version a pseudo-version with +dirty, and the
// program's --version says the same.
func TestImageVersionFromCommit(t *testing.T) {
	root := repoRoot(t)
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD in %s: %v", root, err)
	}
	commit := strings.TrimSpace(string(head))
	clone := filepath.Join(t.TempDir(), "repo")
	if out, err := exec.Command("git", "clone", "--quiet", "--shared", root, clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	f, err := os.OpenFile(filepath.Join(clone, "examples", "doc.go"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("\n// modified by TestImageVersionFromCommit\n")
	f.Close()

	img := buildImage(t, clone)
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	labels := cfg.Config.Labels
	t.Logf("observed: labels of a build from a modified clone of %s: %v", commit[:12], labels)
	if labels[LabelRevision] != commit+"-dirty" {
		t.Errorf("revision label = %q; want %q", labels[LabelRevision], commit+"-dirty")
	}
	if v := labels[LabelVersion]; !strings.Contains(v, commit[:12]) || !strings.HasSuffix(v, "+dirty") {
		t.Errorf("version label = %q; want a pseudo-version of %s ending +dirty", v, commit[:12])
	}
	if !strings.HasSuffix(img.Ref, "-dirty") || strings.Contains(img.Ref, "+") {
		t.Errorf("Ref = %q; want the version as a tag (+ made -)", img.Ref)
	}
	files := layerFiles(t, img)
	exe := filepath.Join(t.TempDir(), testProgram)
	if err := os.WriteFile(exe, files["usr/local/bin/"+testProgram].data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "--version").CombinedOutput()
	want := testProgram + " " + labels[LabelVersion] + " (" + commit + "-dirty, "
	if err != nil || !strings.HasPrefix(string(out), want) {
		t.Errorf("%s --version = %q, %v; want it to start with %q", testProgram, out, err, want)
	}
}

func TestReadInfo(t *testing.T) {
	t.Parallel()
	const rev = "0123456789abcdef0123456789abcdef01234567"
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: at.Format(time.RFC3339)}, {Key: "vcs.modified", Value: modified}}
	}
	tests := []struct {
		name    string
		bi      buildinfo.BuildInfo
		want    info
		wantTag string
	}{
		{name: "no version control data", bi: buildinfo.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			want: info{version: "(devel)", created: time.Unix(0, 0).UTC()}, wantTag: "devel"},
		{name: "clean", bi: buildinfo.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201100000-0123456789ab"}, Settings: vcs("false")},
			want: info{version: "v0.0.0-20261201100000-0123456789ab", revision: rev, created: at}, wantTag: "v0.0.0-20261201100000-0123456789ab"},
		{name: "dirty", bi: buildinfo.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201100000-0123456789ab+dirty"}, Settings: vcs("true")},
			want: info{version: "v0.0.0-20261201100000-0123456789ab+dirty", revision: rev + "-dirty", created: at}, wantTag: "v0.0.0-20261201100000-0123456789ab-dirty"},
		{name: "release", bi: buildinfo.BuildInfo{Main: debug.Module{Version: "v0.3.0"}, Settings: vcs("false")},
			want: info{version: "v0.3.0", revision: rev, created: at}, wantTag: "v0.3.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := readInfo(&tc.bi)
			if got != tc.want || got.tag() != tc.wantTag {
				t.Errorf("readInfo() = %+v, tag %q; want %+v, tag %q", got, got.tag(), tc.want, tc.wantTag)
			}
		})
	}
}

// TestCACertificates: the bundle is x509roots/fallback's unconstrained
// roots, every one a CA certificate.
func TestCACertificates(t *testing.T) {
	t.Parallel()
	b, err := caCertificates()
	if err != nil {
		t.Fatal(err)
	}
	n := checkCABundle(t, b)
	all, constrained := 0, 0
	for r := range bundle.Roots() {
		all++
		if r.Constraint != nil {
			constrained++
		}
	}
	t.Logf("observed: %d roots in x509roots/fallback, %d with a constraint left out", all, constrained)
	if n != all-constrained {
		t.Errorf("the bundle holds %d certificates; want %d (%d roots, %d constrained)", n, all-constrained, all, constrained)
	}
}

// checkCABundle fails unless b is a PEM bundle of many CA certificates,
// and returns how many.
func checkCABundle(t *testing.T, b []byte) int {
	t.Helper()
	n := 0
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil || !c.IsCA {
			t.Errorf("certificate %d of the CA bundle: %v (CA %v)", n, err, err == nil && c.IsCA)
		}
		n++
	}
	if len(bytes.TrimSpace(b)) != 0 || n < 100 {
		t.Errorf("the CA bundle holds %d certificates and %d bytes of something else; want more than 100 and nothing else", n, len(b))
	}
	return n
}

// loadLayout reads the image ref from the OCI layout in dir.
func loadLayout(t *testing.T, dir, ref string) v1.Image {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations[refNameKey] != ref {
		t.Fatalf("index = %+v; want one image named %s", im.Manifests, ref)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

type file struct {
	header *tar.Header
	data   []byte
}

// layerFiles returns the files of the image's flattened filesystem.
func layerFiles(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]file{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = file{header: h, data: b}
	}
}

func mustConfigName(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func mustDigest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	h, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestPinCommand: the command that pins an image in its program's
// kustomization names the image as the shipped manifests do
// (reviewauth/PROGRAM) and sets where it was pushed, by the digest, for
// any repository (a registry with a port included); a digest that is not
// sha256 is refused.
func TestPinCommand(t *testing.T) {
	t.Parallel()
	const hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	digest := v1.Hash{Algorithm: "sha256", Hex: hex}
	tests := []struct {
		ref    string
		digest v1.Hash
		want   string // "" for an error
	}{
		{"reviewauth/rbacproxy:v0.1.0", digest, "kustomize edit set image reviewauth/rbacproxy=reviewauth/rbacproxy@sha256:" + hex},
		{"registry.example.com:5000/team/metricsproxy:v0.0.0-20261201000000-abcdef123456", digest,
			"kustomize edit set image reviewauth/metricsproxy=registry.example.com:5000/team/metricsproxy@sha256:" + hex},
		{"reviewauth/snapshotmetadata:v0.1.0", v1.Hash{Algorithm: "sha512", Hex: hex + hex}, ""},
		{"reviewauth/snapshotmetadata:v0.1.0", v1.Hash{Algorithm: "sha256", Hex: "abc"}, ""},
		{"Not A Reference", digest, ""},
	}
	for _, tc := range tests {
		got, err := (&Image{Ref: tc.ref}).PinCommand(tc.digest)
		if (err != nil) != (tc.want == "") || got != tc.want {
			t.Errorf("PinCommand(%s, %s) = %q, %v; want %q", tc.ref, tc.digest, got, err, tc.want)
		}
	}
}

// TestPinLine: after the image of every example with a kustomization
// (draproxy's included, whose DaemonSet runs the image twice: its init
// container too), the tool prints the line that pins it there, and after
// the others none.
func TestPinLine(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	const hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	digest := v1.Hash{Algorithm: "sha256", Hex: hex}
	for _, tc := range []struct {
		program string
		want    string
	}{
		{"draproxy", "pin: (cd examples/draproxy/deploy && kustomize edit set image reviewauth/draproxy=registry.example.com/reviewauth/draproxy@sha256:" + hex + ")"},
		{"rbacproxy", "pin: (cd examples/rbacproxy/deploy && kustomize edit set image reviewauth/rbacproxy=registry.example.com/reviewauth/rbacproxy@sha256:" + hex + ")"},
		{"metricsproxy", "pin: (cd examples/metricsproxy/deploy && kustomize edit set image reviewauth/metricsproxy=registry.example.com/reviewauth/metricsproxy@sha256:" + hex + ")"},
		{"snapshotmetadata", "pin: (cd examples/snapshotmetadata/deploy && kustomize edit set image reviewauth/snapshotmetadata=registry.example.com/reviewauth/snapshotmetadata@sha256:" + hex + ")"},
		{"draplugin", ""},
		{"controllerruntime", ""},
	} {
		img := &Image{Ref: "registry.example.com/reviewauth/" + tc.program + ":v0.1.0"}
		if got, err := pinLine(root, tc.program, img, digest); err != nil || got != tc.want {
			t.Errorf("pinLine(%s) = %q, %v; want %q", tc.program, got, err, tc.want)
		}
	}
}
