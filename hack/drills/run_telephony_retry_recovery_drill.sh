#!/usr/bin/env bash
# The telephony retry recovery drill (RETRY-SMS-001, MC-RT-01) in real time:
# builds and runs hack/drills/recovery. Every flag is passed on; --help lists
# them. Exit status: 0 when Option C (Retryguard) meets the spec, 1 when it
# does not, 2 when the drill could not run, 3 when C missed only a timing
# mark while the machine kept the load off schedule. See docs/drill.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin="$root/bin/drills"
mkdir -p "$bin"
(cd "$here" && "${GO:-go}" build -o "$bin/recovery" ./recovery)
exec "$bin/recovery" --samples "$root/config/samples" "$@"
