#!/usr/bin/env bash
# envtest-assets.sh builds the local control plane from the Go module proxy and
# prints the directory that holds it, for KUBEBUILDER_ASSETS:
#
#   kube-apiserver           what envtest runs (with etcd)
#   etcd
#   kube-controller-manager  garbage collector and namespace controller, for the
#                            local cluster and the suites that need them
#
# Output, stable for other scripts: the directory
#   $RETRYGUARD_ENVTEST_CACHE/<k8s version>-<GOOS>-<GOARCH>/
# (by default ~/.cache/retryguard/k8s/1.37.2-linux-amd64/) is the only line on
# stdout; progress goes to stderr. Each binary there is published by a rename
# once it has built and reported its version, so a binary that exists is
# complete; .complete marks kube-apiserver and etcd, what envtest needs.
#
# Prebuilt envtest archives cannot be downloaded here, so the binaries come from
# source, pinned by hack/envtest/go.mod. They are cached outside the checkout so
# that every clone on the machine (CI's included) shares one build. A cold build
# takes about 15 minutes on 2 cores for kube-apiserver and etcd, and a few more
# for kube-controller-manager, which shares most of kube-apiserver's packages;
# a warm call returns at once. A cache with kube-apiserver and etcd but no
# kube-controller-manager (built before it was added here) gets only the
# missing binary.
#
#   RETRYGUARD_ENVTEST_CACHE  cache root (default ~/.cache/retryguard/k8s)
set -euo pipefail

K8S_VERSION=1.37.2
K8S_MINOR=37
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${RETRYGUARD_ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/retryguard/k8s}
dir="$cache_root/${K8S_VERSION}-$(go env GOOS)-$(go env GOARCH)"
stamp="$dir/.complete"
binaries=(etcd kube-apiserver kube-controller-manager)

missing() {
	local b
	for b in "${binaries[@]}"; do [[ -x $dir/$b ]] || echo "$b"; done
}

if [[ -f $stamp && -z $(missing) ]]; then echo "$dir"; exit 0; fi

started=$SECONDS
elapsed() { local s=$((SECONDS - started)); printf '%d:%02d' $((s / 60)) $((s % 60)); }
log() { echo "envtest-assets [$(elapsed)]: $*" >&2; }

mkdir -p "$cache_root"
# One builder at a time: a second caller waits, saying so, then finds the
# cache warm (or builds only what is still missing).
lock="$cache_root/.lock" holder="$cache_root/.lock.holder"
exec 9>"$lock"
if ! flock -n 9; then
	log "waiting for another build to finish: $(cat "$holder" 2>/dev/null || echo "holder not recorded") (lock $lock)"
	until flock -w 60 9; do log "still waiting for the other build's lock"; done
	log "the other build finished"
fi
echo "pid $$ started $(date -u +%FT%TZ) from $here" >"$holder"

todo=$(missing)
if [[ -f $stamp && -z $todo ]]; then rm -f "$holder"; echo "$dir"; exit 0; fi

work=$(mktemp -d "$cache_root/.build.XXXXXX")
trap 'rm -rf "$work"; rm -f "$holder"' EXIT

cd "$here/envtest"
# GOWORK=off: the binaries are pinned by hack/envtest/go.mod alone, not by the
# union of the workspace's modules (go.work).
export GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v${K8S_VERSION}"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_MINOR}"

# build NAME PACKAGE [LDFLAGS]: go build into the scratch directory, check the
# version a Kubernetes binary reports, then publish it by a rename.
build() {
	local name=$1 pkg=$2 t0=$SECONDS
	log "building $name from $pkg (cold: several minutes on 2 cores)"
	go build -trimpath -ldflags "${3:-}" -o "$work/$name" "$pkg"
	if [[ $name == kube-* ]] && ! "$work/$name" --version | grep -q "v${K8S_VERSION}\$"; then
		log "$name reports $("$work/$name" --version), want v${K8S_VERSION}"
		exit 1
	fi
	mkdir -p "$dir"
	mv -f "$work/$name" "$dir/$name"
	log "built $name in $((SECONDS - t0))s"
}

log "building into $dir: ${todo//$'\n'/ }"
for b in $todo; do
	case $b in
	etcd) build etcd go.etcd.io/etcd/server/v3 ;;
	kube-apiserver) build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$ldflags" ;;
	kube-controller-manager) build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$ldflags" ;;
	esac
	if [[ -x $dir/etcd && -x $dir/kube-apiserver ]]; then touch "$stamp"; fi
done
log "cached in $dir"
echo "$dir"
