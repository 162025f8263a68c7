#!/usr/bin/env bash
# busybox-asset.sh fetches Debian's busybox-static package (the end-to-end
# suite's client that is not Go: its wget calls the vendor through the
# injected retryguard-proxy), extracts the static binary and prints the
# directory that holds it. The .deb comes from the Debian mirror apt is
# configured with (apt-get download, no root needed), and the binary is cached
# beside the node assets, so that every clone on the machine shares it. Only a
# checked binary is published: it must be static and run its own --help.
#
#   RETRYGUARD_ENVTEST_CACHE  cache root (default ~/.cache/retryguard/k8s)
set -euo pipefail

cache_root=${RETRYGUARD_ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/retryguard/k8s}
dir="$cache_root/busybox-static-$(go env GOARCH)"
stamp="$dir/.complete"

if [[ -f $stamp && -x $dir/busybox ]]; then echo "$dir"; exit 0; fi

log() { echo "busybox-asset: $*" >&2; }
mkdir -p "$cache_root"
exec 9>"$cache_root/.busybox.lock"
flock 9
if [[ -f $stamp && -x $dir/busybox ]]; then echo "$dir"; exit 0; fi

work=$(mktemp -d "$cache_root/.busybox-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
# Every package operation of the suite holds one lock (cluster.PackageLock):
# apt refuses two at once, and on a new machine the node's setup may be
# installing containerd while this runs.
apt_lock=${RETRYGUARD_APT_LOCK:-/run/lock/retryguard-apt.lock}
exec 8>"$apt_lock"
flock 8
download() { apt-get download busybox-static >"$work/apt.log" 2>&1; }
log "downloading busybox-static from the Debian mirror"
if ! download; then
	# A new machine has no package lists until apt-get update has run.
	if [[ $(id -u) -eq 0 ]]; then
		log "apt-get download failed; running apt-get update"
		apt-get update -q >>"$work/apt.log" 2>&1 && download || {
			cat "$work/apt.log" >&2
			log "apt-get download failed after apt-get update"
			exit 1
		}
	else
		cat "$work/apt.log" >&2
		log "apt-get download failed; run apt-get update as root first"
		exit 1
	fi
fi
exec 8>&-
deb=$(ls ./*.deb)
dpkg-deb -x "$deb" root
bin=root/bin/busybox
[[ -x $bin ]] || { log "$deb holds no bin/busybox"; exit 1; }
if file "$bin" 2>/dev/null | grep -q dynamically; then log "$bin is not static"; exit 1; fi
# sed reads the whole help (head would close the pipe early: busybox gets
# SIGPIPE, and pipefail fails the script with 141).
version=$({ "$bin" --help 2>&1 || true; } | sed -n 1p)
[[ $version == BusyBox* ]] || { log "$bin --help says '$version'"; exit 1; }
mkdir -p "$dir"
cp "$bin" "$dir/busybox.new" && mv "$dir/busybox.new" "$dir/busybox"
echo "$version (${deb#./})" >"$dir/VERSION"
touch "$stamp"
log "cached $version in $dir"
echo "$dir"
