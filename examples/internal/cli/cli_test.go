package cli_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/version"

	"github.com/reviewauth/reviewauth/examples/internal/cli"
)

func TestVersionInfo(t *testing.T) {
	t.Parallel()
	const rev = "53923c2a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"
	settings := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "-compiler", Value: "gc"}, {Key: "GOARCH", Value: "arm64"}, {Key: "GOOS", Value: "linux"},
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: modified}}
	}
	toolchain := version.Info{GitVersion: "(devel)", GoVersion: runtime.Version(), Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH}
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		want version.Info
	}{
		{name: "no build information", bi: nil, want: toolchain},
		{name: "no version control data", bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			want: version.Info{GitVersion: "(devel)", GoVersion: "go1.26.8", Compiler: runtime.Compiler, Platform: toolchain.Platform}},
		{name: "clean tree", bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261201100000-53923c2a0b1c"}, Settings: settings("false")},
			want: version.Info{GitVersion: "v0.0.0-20261201100000-53923c2a0b1c", GitCommit: rev, GitTreeState: "clean", BuildDate: "2026-12-01T10:00:00Z",
				GoVersion: "go1.26.8", Compiler: "gc", Platform: "linux/arm64"}},
		{name: "modified tree", bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261201100000-53923c2a0b1c+dirty"}, Settings: settings("true")},
			want: version.Info{GitVersion: "v0.0.0-20261201100000-53923c2a0b1c+dirty", GitCommit: rev + "-dirty", GitTreeState: "dirty", BuildDate: "2026-12-01T10:00:00Z",
				GoVersion: "go1.26.8", Compiler: "gc", Platform: "linux/arm64"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := cli.VersionInfo(tc.bi); got != tc.want {
				t.Errorf("VersionInfo() = %#v; want %#v", got, tc.want)
			}
		})
	}
}

// TestVersionFlag: --version prints one line, --version=raw every field,
// as component-base's verflag does, and Start returns ErrVersion.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{args: []string{"--version"}, want: "example " + cli.BuildInfo().GitVersion + " ("},
		{args: []string{"--version=true"}, want: "example " + cli.BuildInfo().GitVersion + " ("},
		{args: []string{"--version=raw"}, want: "version.Info{Major:"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			f := cli.New()
			fs := pflag.NewFlagSet("example", pflag.ContinueOnError)
			f.AddBaseFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if _, err := f.Start(context.Background(), "example", &out); !errors.Is(err, cli.ErrVersion) {
				t.Fatalf("Start(%q) = %v; want ErrVersion", tc.args, err)
			}
			if !strings.HasPrefix(out.String(), tc.want) || strings.Count(out.String(), "\n") != 1 {
				t.Errorf("Start(%q) printed %q; want one line starting with %q", tc.args, out.String(), tc.want)
			}
		})
	}
	fs := pflag.NewFlagSet("example", pflag.ContinueOnError)
	cli.New().AddBaseFlags(fs)
	if err := fs.Parse([]string{"--version=yes"}); err == nil {
		t.Error(`Parse(--version=yes) = nil; want an error`)
	}
}
