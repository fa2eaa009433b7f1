// Command image builds the container images of the example servers
// without a container runtime and without pulling a base image: each
// image is the program, built statically (CGO_ENABLED=0) for Linux, on
// an empty base, with the CA certificates of
// golang.org/x/crypto/x509roots/fallback (Mozilla's roots as Go ships
// them, not the build machine's), /etc/passwd and /etc/group naming the
// non-root user 65532 it runs as, and the OCI annotations and labels
// org.opencontainers.image.{title,version,revision,created,source} taken
// from the program's own build information (what its --version prints).
// It uses go-containerregistry's mutate API and writes an OCI image
// layout or a tarball that docker load, podman load, crane and skopeo
// read.
//
// Usage, from the repository's root:
//
//	go -C hack/image run . [-o DIR] [--format oci|tar] [--arch amd64|arm64] [--repository reviewauth] PROGRAM...
//
// PROGRAM is the name of an example under examples/ (rbacproxy,
// metricsproxy, snapshotmetadata, draproxy, draplugin, controllerruntime).
// Each image is written to DIR/PROGRAM (an OCI layout) or DIR/PROGRAM.tar,
// tagged REPOSITORY/PROGRAM:VERSION, where VERSION is the program's
// module version with "+" made "-" (a pseudo-version between releases).
// The build is reproducible: file times and the image's creation time
// are the commit's time. For each image it prints a line
//
//	REPOSITORY/PROGRAM:VERSION sha256:DIGEST PATH
//
// and, for a program with a kustomization (examples/PROGRAM/deploy), the
// command that pins the image by that digest there (see [PinCommand]):
//
//	pin: (cd examples/PROGRAM/deploy && kustomize edit set image reviewauth/PROGRAM=REPOSITORY/PROGRAM@sha256:DIGEST)
//
// The digest is the image manifest's, which a registry keeps when the
// OCI layout is copied as it is (skopeo copy); set --repository to where
// you push. Push with, for example,
//
//	go -C hack/image run . --repository registry.example.com/reviewauth rbacproxy
//	skopeo copy oci:out/images/rbacproxy docker://registry.example.com/reviewauth/rbacproxy:v0.1.0
//
// (crane push out/images/rbacproxy.tar ... writes the manifest anew from
// the tarball: pin the digest crane prints.)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// run parses args and builds each image they name.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := Options{}
	out := fs.String("o", "out/images", "directory to write the images to, relative to the repository's root")
	format := fs.String("format", "oci", "oci (an OCI image layout directory per image) or tar (a tarball per image, as docker save writes it)")
	fs.StringVar(&o.Arch, "arch", runtime.GOARCH, "target architecture (GOARCH); the OS is linux")
	fs.StringVar(&o.Repository, "repository", "reviewauth", "repository the images are tagged in: REPOSITORY/PROGRAM:VERSION")
	fs.StringVar(&o.Source, "source", DefaultSource, "org.opencontainers.image.source: where the sources are")
	fs.StringVar(&o.Root, "root", "", "the repository's root; empty: found from the working directory")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: go -C hack/image run . [flags] PROGRAM...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return flag.ErrHelp
	}
	if *format != "oci" && *format != "tar" {
		return fmt.Errorf("--format %q: want oci or tar", *format)
	}
	if o.Root == "" {
		root, err := findRoot()
		if err != nil {
			return err
		}
		o.Root = root
	}
	dir := *out
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(o.Root, dir)
	}
	for _, program := range fs.Args() {
		img, err := Build(ctx, program, o)
		if err != nil {
			return err
		}
		path := filepath.Join(dir, program)
		if *format == "tar" {
			path += ".tar"
			err = img.WriteTarball(path)
		} else {
			err = img.WriteLayout(path)
		}
		if err != nil {
			return err
		}
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s %s %s\n", img.Ref, digest, path)
		pin, err := pinLine(o.Root, program, img, digest)
		if err != nil {
			return err
		}
		if pin != "" {
			fmt.Fprintln(stdout, pin)
		}
	}
	return nil
}

// pinLine is the line run prints after an image of program whose
// repository at root has a kustomization (examples/PROGRAM/deploy): the
// command that pins img by digest there, to run from the repository's
// root; "" for a program without one.
func pinLine(root, program string, img *Image, digest v1.Hash) (string, error) {
	dir := filepath.Join("examples", program, "deploy")
	if _, err := os.Stat(filepath.Join(root, dir, "kustomization.yaml")); err != nil {
		return "", nil
	}
	pin, err := img.PinCommand(digest)
	if err != nil {
		return "", err
	}
	return "pin: (cd " + filepath.ToSlash(dir) + " && " + pin + ")", nil
}

// findRoot returns the first directory from the working directory up
// that holds examples/go.mod.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "examples", "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no examples/go.mod above the working directory: run it in the repository, or set --root")
		}
		dir = parent
	}
}
