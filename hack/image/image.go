package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// DefaultSource is the default org.opencontainers.image.source.
const DefaultSource = "https://github.com/reviewauth/reviewauth"

// The image's user: the non-root user distroless images name "nonroot".
const (
	uid      = 65532
	userName = "nonroot"
)

// Where things are in the image.
const (
	binDir     = "usr/local/bin"
	caBundle   = "etc/ssl/certs/ca-certificates.crt" // where Go's crypto/x509 looks first on Linux
	refNameKey = "org.opencontainers.image.ref.name"
)

// The OCI annotation keys the image carries, as annotations of its
// manifest and labels of its configuration.
const (
	LabelTitle    = "org.opencontainers.image.title"
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelCreated  = "org.opencontainers.image.created"
	LabelSource   = "org.opencontainers.image.source"
)

// Options configure [Build]. Arch, Repository and Root are required.
type Options struct {
	// Arch is the target GOARCH; the OS is linux.
	Arch string
	// Repository is where the image is tagged: REPOSITORY/PROGRAM:VERSION.
	Repository string
	// Source is org.opencontainers.image.source.
	Source string
	// Root is the repository's root directory.
	Root string
}

// Image is a built image.
type Image struct {
	v1.Image
	// Ref is REPOSITORY/PROGRAM:VERSION.
	Ref string
}

// Build compiles examples/program and makes its image (see the package
// doc).
func Build(ctx context.Context, program string, o Options) (*Image, error) {
	if !regexp.MustCompile(`^[a-z0-9]+$`).MatchString(program) {
		return nil, fmt.Errorf("%q is not the name of an example", program)
	}
	// examples/controllerruntime is a module of its own.
	moduleDir, pkg := filepath.Join(o.Root, "examples"), "./"+program
	if _, err := os.Stat(filepath.Join(o.Root, "examples", program, "go.mod")); err == nil {
		moduleDir, pkg = filepath.Join(o.Root, "examples", program), "."
	}
	tmp, err := os.MkdirTemp("", "reviewauth-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, program)
	// -trimpath: no build machine paths in the binary; -buildvcs=auto
	// overrides a GOFLAGS=-buildvcs=false, so that the commit is stamped
	// whenever the tree is a git checkout.
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=auto", "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.Arch, "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %v\n%s", program, err, out)
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", program, err)
	}
	info := readInfo(bi)

	layer, err := rootfs(program, exe, info.created)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: info.created}, CreatedBy: "hack/image: " + program + ", CA certificates, /etc/passwd"},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	labels := map[string]string{LabelTitle: program, LabelVersion: info.version, LabelSource: o.Source}
	if info.revision != "" {
		labels[LabelRevision] = info.revision
		labels[LabelCreated] = info.created.Format(time.RFC3339)
	}
	cfg.OS, cfg.Architecture = "linux", o.Arch
	cfg.Created = v1.Time{Time: info.created}
	cfg.Config.Entrypoint = []string{"/" + binDir + "/" + program}
	cfg.Config.Cmd = nil
	cfg.Config.User = fmt.Sprintf("%d:%d", uid, uid)
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = []string{"PATH=/" + binDir}
	cfg.Config.Labels = labels
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	img = mutate.Annotations(img, labels).(v1.Image)
	return &Image{Image: img, Ref: o.Repository + "/" + program + ":" + info.tag()}, nil
}

// ManifestName is the image name the shipped manifests run PROGRAM's
// image by (examples/PROGRAM/deploy), which their kustomization's images
// transformer pins.
func ManifestName(program string) string { return "reviewauth/" + program }

// PinCommand returns the kustomize command that pins the image by
// digest in its program's kustomization (run in examples/PROGRAM/deploy):
// kustomize edit set image reviewauth/PROGRAM=REPOSITORY/PROGRAM@DIGEST,
// which writes the images entry's newName and digest. The workloads then
// run exactly the image built, whatever a tag later points at.
func (img *Image) PinCommand(digest v1.Hash) (string, error) {
	if _, err := name.NewTag(img.Ref); err != nil {
		return "", err
	}
	repo := img.Ref // REPOSITORY/PROGRAM:VERSION, as written (no registry added)
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	if digest.Algorithm != "sha256" || len(digest.Hex) != 64 {
		return "", fmt.Errorf("image: %s is not a sha256 digest", digest)
	}
	return "kustomize edit set image " + ManifestName(path.Base(repo)) + "=" + repo + "@" + digest.String(), nil
}

// info is what a program's build information says about it.
type info struct {
	version  string    // the main module's version, "(devel)" without one
	revision string    // the commit, with "-dirty" for a modified tree; "" unknown
	created  time.Time // the commit's time; the Unix epoch when unknown
}

// readInfo reads bi as examples/internal/cli.VersionInfo does, so that
// the labels say what the program's --version says.
func readInfo(bi *buildinfo.BuildInfo) info {
	in := info{version: "(devel)", created: time.Unix(0, 0).UTC()}
	if bi.Main.Version != "" {
		in.version = bi.Main.Version
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				in.created = t.UTC()
			}
		}
	}
	if in.revision != "" && dirty {
		in.revision += "-dirty"
	}
	return in
}

// tag is the version as an image tag: "+" is not allowed there.
func (in info) tag() string {
	if in.version == "(devel)" {
		return "devel"
	}
	return strings.ReplaceAll(in.version, "+", "-")
}

// rootfs is the image's one layer: the program, the CA bundle, and
// /etc/passwd and /etc/group naming the user, every file owned by root
// and dated mtime.
func rootfs(program string, exe []byte, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entry := func(path string, mode int64, owner int, data []byte) error {
		h := &tar.Header{Name: path, Mode: mode, Uid: owner, Gid: owner, ModTime: mtime, Format: tar.FormatPAX}
		if strings.HasSuffix(path, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	ca, err := caCertificates()
	if err != nil {
		return nil, err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", userName, uid, uid, userName, userName)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", userName, uid)
	for _, e := range []struct {
		path  string
		mode  int64
		owner int
		data  []byte
	}{
		{"etc/", 0o755, 0, nil},
		{"etc/group", 0o644, 0, []byte(group)},
		{"etc/passwd", 0o644, 0, []byte(passwd)},
		{"etc/ssl/", 0o755, 0, nil},
		{"etc/ssl/certs/", 0o755, 0, nil},
		{caBundle, 0o644, 0, ca},
		{"home/", 0o755, 0, nil},
		{"home/" + userName + "/", 0o700, uid, nil},
		{"tmp/", 0o1777, 0, nil},
		{"usr/", 0o755, 0, nil},
		{"usr/local/", 0o755, 0, nil},
		{binDir + "/", 0o755, 0, nil},
		{binDir + "/" + program, 0o755, 0, exe},
	} {
		if err := entry(e.path, e.mode, e.owner, e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// caCertificates is the PEM bundle of the roots of
// golang.org/x/crypto/x509roots/fallback that have no constraint. A root
// with one (a distrust-after date that a PEM file cannot carry) is left
// out: a client reading the file would trust it without the constraint.
func caCertificates() ([]byte, error) {
	var buf bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
	}
	if buf.Len() == 0 {
		return nil, fmt.Errorf("x509roots/fallback holds no unconstrained root")
	}
	return buf.Bytes(), nil
}

// WriteLayout writes the image as an OCI image layout in dir (replacing
// what was there), its reference in the org.opencontainers.image.ref.name
// annotation of the index.
func (img *Image) WriteLayout(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img.Image, layout.WithAnnotations(map[string]string{refNameKey: img.Ref}))
}

// WriteTarball writes the image as a tarball (docker save's format, with
// the OCI manifest inside), tagged with its reference.
func (img *Image) WriteTarball(path string) error {
	tag, err := name.NewTag(img.Ref)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return tarball.WriteToFile(path, tag, img.Image)
}
