#!/usr/bin/env bash
# netpol-assets.sh builds the NetworkPolicy enforcer that the end-to-end node
# runs (kube-router's network-policy controller, firewall only) and prints the
# directory that holds it.
#
# The e2e node's bridge CNI enforces no NetworkPolicy, so without this a spec
# about the chart's NetworkPolicy would prove nothing. kube-router is built
# from source at a pinned version through the Go module proxy (checksums from
# the checksum database), with its own go.mod: `go install pkg@version` needs no
# module in this tree. It is cached outside the checkout beside the node
# binaries, and only a complete, verified build is published (built into a
# scratch directory, moved into place, then the .complete stamp). About 3
# minutes cold on 2 cores; a warm call returns at once.
#
#   RETRYGUARD_ENVTEST_CACHE  cache root (default ~/.cache/retryguard/k8s)
set -euo pipefail

# v2.1.0 is the newest version the module proxy serves here. Security flaws are
# reported against it; it runs only on the throwaway e2e node, with a read-only
# ClusterRole and no listening port (hack/e2e/cluster/netpol.go).
KUBE_ROUTER_VERSION=v2.1.0
cache_root=${RETRYGUARD_ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/retryguard/k8s}
platform="$(go env GOOS)-$(go env GOARCH)"
dir="$cache_root/kube-router-${KUBE_ROUTER_VERSION}-${platform}"
stamp="$dir/.complete"

ready() { [[ -f $stamp && -x $dir/kube-router ]]; }

if ready; then echo "$dir"; exit 0; fi

start=$SECONDS
log() { echo "netpol-assets: [$((SECONDS - start))s] $*" >&2; }

mkdir -p "$cache_root"
exec 9>"$cache_root/.netpol.lock"
if ! flock -n 9; then
	log "waiting for another netpol-assets build to finish (lock $cache_root/.netpol.lock)"
	flock 9
fi
if ready; then echo "$dir"; exit 0; fi

work=$(mktemp -d "$cache_root/.netpol-build.XXXXXX")
trap 'rm -rf "$work"' EXIT

log "building kube-router ${KUBE_ROUTER_VERSION} (first run only)"
# GOWORK=off and a directory outside the tree: kube-router's own go.mod pins
# its dependencies, not this repository's workspace.
(cd "$work" && GOWORK=off GOFLAGS="-buildvcs=false" CGO_ENABLED=0 GOBIN="$work" \
	go install -trimpath -ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=${KUBE_ROUTER_VERSION}" \
	"github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@${KUBE_ROUTER_VERSION}")
got=$("$work/kube-router" --version 2>&1 || true)
[[ $got == *"${KUBE_ROUTER_VERSION}"* ]] || { log "kube-router reports '$got', want ${KUBE_ROUTER_VERSION}"; exit 1; }
log "kube-router ready"

mkdir -p "$dir"
mv "$work/kube-router" "$dir/kube-router"
touch "$stamp"
log "cached in $dir"
echo "$dir"
