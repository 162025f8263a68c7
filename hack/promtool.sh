#!/usr/bin/env bash
# promtool.sh builds Prometheus's promtool from the Go module proxy (once) and
# prints its path, for `promtool test rules` over the chart's alerts
# (charts/retryguard/files/alerts.yaml and alerts_test.yaml; make chart-check).
#
# Output, stable for other scripts: the binary
#   $RETRYGUARD_PROMTOOL_CACHE/<version>-<GOOS>-<GOARCH>/promtool
# (by default ~/.cache/retryguard/promtool/v0.316.0-linux-amd64/promtool) is the
# only line on stdout; progress goes to stderr. The binary is published by a
# rename once it has built and reported its version, so one that exists is
# complete.
#
# Prebuilt Prometheus releases cannot be downloaded here, so promtool comes from
# source, pinned below by its module version: `go install pkg@version` reads
# Prometheus's own go.mod alone (it has no replace directive), so none of its
# dependencies enters a module of this repository or the workspace. A cold
# build takes a few minutes on 2 cores; a warm call returns at once.
#
#   RETRYGUARD_PROMTOOL_CACHE  cache root (default ~/.cache/retryguard/promtool)
set -euo pipefail

PROMETHEUS_VERSION=v0.316.0
cache_root=${RETRYGUARD_PROMTOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/retryguard/promtool}
dir="$cache_root/${PROMETHEUS_VERSION}-$(go env GOOS)-$(go env GOARCH)"
bin="$dir/promtool"

if [[ -x $bin ]]; then echo "$bin"; exit 0; fi

mkdir -p "$cache_root"
# One builder at a time: a second caller waits, then finds the cache warm.
exec 9>"$cache_root/.lock"
flock 9
if [[ -x $bin ]]; then echo "$bin"; exit 0; fi

work=$(mktemp -d "$cache_root/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "promtool: building github.com/prometheus/prometheus/cmd/promtool@${PROMETHEUS_VERSION} (cold: a few minutes)" >&2
# GOWORK=off and a neutral directory: the build list is Prometheus's go.mod alone.
(cd "$work" && GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$work" \
	go install -trimpath -tags remove_all_sd -ldflags "-s -w -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v}" \
	"github.com/prometheus/prometheus/cmd/promtool@${PROMETHEUS_VERSION}")
"$work/promtool" --version >&2
mkdir -p "$dir"
mv -f "$work/promtool" "$bin"
echo "$bin"
