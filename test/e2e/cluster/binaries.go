package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Pinned versions; build.sh pins the same.
const (
	// KubeVersion is the kube-apiserver version the suite runs against.
	KubeVersion = "v1.37.2"
	// EtcdVersion is the etcd version the suite runs against.
	EtcdVersion = "v3.6.16"
)

// Binaries returns the paths of kube-apiserver and etcd at the pinned
// versions, running test/e2e/build.sh to build whatever is missing (several
// minutes cold; instant when cached). build.sh's progress goes to stderr.
// It finds build.sh by walking up from the working directory. It honours
// REVIEWAUTH_E2E_BIN_DIR like build.sh does. ctx bounds the build.
func Binaries(ctx context.Context) (kubeAPIServer, etcd string, err error) {
	script, err := findBuildScript()
	if err != nil {
		return "", "", err
	}
	cmd := exec.CommandContext(ctx, "bash", script)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("cluster: %s failed: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	kubeAPIServer = filepath.Join(dir, "kube-apiserver-"+KubeVersion)
	etcd = filepath.Join(dir, "etcd-"+EtcdVersion)
	for _, p := range []string{kubeAPIServer, etcd} {
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			return "", "", fmt.Errorf("cluster: %s did not produce executable %s (%v)", script, p, err)
		}
	}
	return kubeAPIServer, etcd, nil
}

func findBuildScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("cluster: %w", err)
	}
	for {
		p := filepath.Join(dir, "build.sh")
		if _, err := os.Stat(filepath.Join(dir, "tools", "kube", "go.mod")); err == nil {
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cluster: cannot find test/e2e/build.sh above the working directory")
		}
		dir = parent
	}
}
