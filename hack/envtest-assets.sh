#!/usr/bin/env bash
# envtest-assets.sh builds kube-apiserver and etcd for the test suites from the
# Go module proxy and prints the directory that holds them (KUBEBUILDER_ASSETS).
#
# Prebuilt envtest archives cannot be downloaded here, so the binaries come from
# source, pinned by hack/envtest/go.mod. They are cached outside the checkout so
# that every clone on the machine (CI's included) shares one build; a cold build
# takes about 15 minutes on 2 cores, a warm call returns at once.
#
#   RETRYGUARD_ENVTEST_CACHE  cache root (default ~/.cache/retryguard/k8s)
set -euo pipefail

K8S_VERSION=1.37.2
K8S_MINOR=37
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${RETRYGUARD_ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/retryguard/k8s}
dir="$cache_root/${K8S_VERSION}-$(go env GOOS)-$(go env GOARCH)"
stamp="$dir/.complete"

ready() { [[ -f $stamp && -x $dir/kube-apiserver && -x $dir/etcd ]]; }

if ready; then echo "$dir"; exit 0; fi

mkdir -p "$cache_root"
# One builder at a time: a second caller waits, then finds the cache warm.
exec 9>"$cache_root/.lock"
flock 9
if ready; then echo "$dir"; exit 0; fi

work=$(mktemp -d "$cache_root/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log() { echo "envtest-assets: $*" >&2; }

cd "$here/envtest"
export GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v${K8S_VERSION}"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_MINOR}"

log "building etcd (first run only)"
go build -trimpath -o "$work/etcd" go.etcd.io/etcd/server/v3
log "building kube-apiserver v${K8S_VERSION} (first run only; ~15 min on 2 cores)"
go build -trimpath -ldflags "$ldflags" -o "$work/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver

"$work/kube-apiserver" --version | grep -q "v${K8S_VERSION}" || { log "kube-apiserver reports $("$work/kube-apiserver" --version)"; exit 1; }

mkdir -p "$dir"
mv "$work/etcd" "$work/kube-apiserver" "$dir/"
touch "$stamp"
log "cached in $dir"
echo "$dir"
