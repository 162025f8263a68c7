#!/usr/bin/env bash
# gotool.sh NAME builds one of the release tools below from the Go module proxy
# (once) and prints its path: the binary
#   $RETRYGUARD_TOOLS_CACHE/<name>-<version>-<GOOS>-<GOARCH>/<name>
# (by default ~/.cache/retryguard/tools/cosign-v3.1.3-linux-amd64/cosign) is the
# only line on stdout; progress goes to stderr.
#
#   cosign           signs and verifies the images and the chart (make release-push, docs/release.md)
#   cyclonedx-gomod  writes each image's SBOM from its binary's Go build information
#   registry         CNCF Distribution, the OCI registry the e2e node and hack/publish's test run
#   promtool         Prometheus's, for `promtool test rules` over the chart's alerts (make chart-check)
#
# Prebuilt releases cannot be downloaded here, so each comes from source, pinned
# here by its module version (each reports it from its build information): `go install pkg@version` in a neutral directory
# with GOWORK=off reads the tool's own go.mod alone, so none of its dependencies
# enters a module of this repository. The binary is published by a rename once
# it has built and reported its version, so one that exists is complete. Cold,
# on 2 shared cores: cosign about 8 minutes, registry 3, cyclonedx-gomod 1.5,
# promtool a few; a warm call returns at once. Every checkout on the machine shares the cache.
#
#   RETRYGUARD_TOOLS_CACHE  cache root (default ~/.cache/retryguard/tools)
set -euo pipefail

name=${1:-}
tags="" ldflags=""
case $name in
cosign)
	pkg=github.com/sigstore/cosign/v3/cmd/cosign version=v3.1.3 check=(version) ;;
cyclonedx-gomod)
	pkg=github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod version=v1.10.0 check=(version) ;;
registry)
	pkg=github.com/distribution/distribution/v3/cmd/registry version=v3.1.2 check=(--version) ;;
promtool)
	# remove_all_sd leaves out the service-discovery plugins, which rule
	# tests never use; Prometheus stamps its version by ldflag only.
	pkg=github.com/prometheus/prometheus/cmd/promtool version=v0.316.0 check=(--version) tags=remove_all_sd
	ldflags="-X github.com/prometheus/common/version.Version=${version#v}" ;;
*)
	echo "usage: $0 cosign|cyclonedx-gomod|registry|promtool" >&2
	exit 2 ;;
esac

cache_root=${RETRYGUARD_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/retryguard/tools}
dir="$cache_root/${name}-${version}-$(go env GOOS)-$(go env GOARCH)"
bin="$dir/$name"

if [[ -x $bin ]]; then echo "$bin"; exit 0; fi

mkdir -p "$cache_root"
# One builder per tool at a time: a second caller waits, then finds the cache warm.
exec 9>"$cache_root/.$name.lock"
flock 9
if [[ -x $bin ]]; then echo "$bin"; exit 0; fi

work=$(mktemp -d "$cache_root/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$SECONDS
echo "gotool: building $pkg@$version (first run only)" >&2
(cd "$work" && GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$work" \
	go install -trimpath -tags "$tags" -ldflags "-s -w $ldflags" "$pkg@$version")
got=$("$work/$name" "${check[@]}" 2>&1 || true)
[[ $got == *"${version#v}"* ]] || { echo "gotool: $name reports '$got', want $version" >&2; exit 1; }
echo "gotool: $name $version built in $((SECONDS - start))s" >&2
mkdir -p "$dir"
mv -f "$work/$name" "$bin"
echo "$bin"
