#!/usr/bin/env bash
# node-assets.sh builds the node and control-plane binaries that the end-to-end
# cluster runs beside kube-apiserver and etcd (kubelet, kube-proxy,
# kube-scheduler, kube-controller-manager) and prints the directory that holds
# them.
#
# They come from source, pinned by the same wrapper module as the envtest
# assets (hack/envtest/go.mod, k8s.io/kubernetes v1.37.2), with the same
# version ldflags, and are cached outside the checkout so that every clone on
# the machine shares one build. Only a complete, verified set is published: the
# binaries are built into a scratch directory and moved into place, then the
# .complete stamp is written. About 6 minutes cold on 2 cores; a warm call
# returns at once.
#
#   RETRYGUARD_ENVTEST_CACHE  cache root (default ~/.cache/retryguard/k8s)
set -euo pipefail

K8S_VERSION=1.37.2
K8S_MINOR=37
BINARIES=(kubelet kube-proxy kube-scheduler kube-controller-manager)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_root=${RETRYGUARD_ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/retryguard/k8s}
platform="$(go env GOOS)-$(go env GOARCH)"
dir="$cache_root/${K8S_VERSION}-${platform}-node"
stamp="$dir/.complete"

ready() {
	[[ -f $stamp ]] || return 1
	local b
	for b in "${BINARIES[@]}"; do [[ -x $dir/$b ]] || return 1; done
}

if ready; then echo "$dir"; exit 0; fi

start=$SECONDS
log() { echo "node-assets: [$((SECONDS - start))s] $*" >&2; }

mkdir -p "$cache_root"
# One builder at a time: a second caller waits, then finds the cache warm.
# The lock is separate from envtest-assets.sh's so the two builds never wait on
# each other; they share the Go build cache.
exec 9>"$cache_root/.node.lock"
if ! flock -n 9; then
	log "waiting for another node-assets build to finish (lock $cache_root/.node.lock)"
	flock 9
fi
if ready; then echo "$dir"; exit 0; fi

work=$(mktemp -d "$cache_root/.node-build.XXXXXX")
trap 'rm -rf "$work"' EXIT

cd "$here/envtest"
# GOWORK=off: the binaries are pinned by hack/envtest/go.mod alone, not by the
# union of the workspace's modules (go.work).
export GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v${K8S_VERSION}"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_MINOR}"

envtest_dir="$cache_root/${K8S_VERSION}-${platform}"
for b in "${BINARIES[@]}"; do
	# envtest-assets.sh may already have built the same pinned binary.
	if [[ $b == kube-controller-manager && -f $envtest_dir/.complete && -x $envtest_dir/$b ]]; then
		log "reusing $b from $envtest_dir"
		cp "$envtest_dir/$b" "$work/$b"
	else
		log "building $b v${K8S_VERSION} (first run only)"
		go build -trimpath -ldflags "$ldflags" -o "$work/$b" "k8s.io/kubernetes/cmd/$b"
	fi
	got=$("$work/$b" --version 2>&1 || true)
	[[ $got == *"v${K8S_VERSION}"* ]] || { log "$b reports '$got', want v${K8S_VERSION}"; exit 1; }
	log "$b ready"
done

mkdir -p "$dir"
for b in "${BINARIES[@]}"; do mv "$work/$b" "$dir/$b"; done
touch "$stamp"
log "cached in $dir"
echo "$dir"
