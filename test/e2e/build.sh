#!/usr/bin/env bash
# build.sh builds the pinned kube-apiserver and etcd binaries used by the e2e suite
# from the Go module proxy, into a cache directory keyed by version. Binaries that
# already exist are not rebuilt. Prints the directory holding them on its last line.
#
# Env:
#   REVIEWAUTH_E2E_BIN_DIR  where binaries go (default ${XDG_CACHE_HOME:-$HOME/.cache}/reviewauth-e2e)
#
# Needs only Go and the module proxy. The root module's go.mod is never touched:
# kube-apiserver builds inside test/e2e/tools/kube (its own go.mod/go.sum), etcd
# inside test/e2e/tools/etcd.
set -euo pipefail

KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.6.16

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin_dir="${REVIEWAUTH_E2E_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/reviewauth-e2e}"
mkdir -p "$bin_dir"

kube_bin="$bin_dir/kube-apiserver-$KUBE_VERSION"
etcd_bin="$bin_dir/etcd-$ETCD_VERSION"

# Build with the tools modules' own go.mod; ignore any go.work or GOFLAGS of the caller
# that could change module resolution.
export GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0 GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

build() { # build NAME OUT DIR PKG LDFLAGS
	local name=$1 out=$2 dir=$3 pkg=$4 ldflags=$5
	if [[ -x "$out" ]]; then
		echo "build.sh: $name: cached at $out" >&2
		return 0
	fi
	echo "build.sh: $name: building $pkg (this can take several minutes)" >&2
	local start=$SECONDS tmp="$out.tmp.$$"
	(cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$tmp" "$pkg")
	mv -f "$tmp" "$out"
	echo "build.sh: $name: built in $((SECONDS - start))s -> $out" >&2
}

build etcd "$etcd_bin" "$here/tools/etcd" go.etcd.io/etcd/server/v3 \
	"-s -w"
build kube-apiserver "$kube_bin" "$here/tools/kube" k8s.io/kubernetes/cmd/kube-apiserver \
	"-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean"

echo "$bin_dir"
