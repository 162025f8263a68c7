#!/usr/bin/env bash
# fuzz.sh runs every native fuzz test in the module for the given time each
# (default 60s), one at a time, and prints each target's last status line
# (with its exec count). A failing target prints its whole output, including
# where the failing input was written, the other targets still run, and the
# script exits non-zero.
set -uo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-60s}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=()
while read -r file; do
  pkg=./$(dirname "${file#./}")
  for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
    echo "== $target ($pkg, $fuzztime)"
    if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >"$log" 2>&1; then
      grep '^fuzz: elapsed' "$log" | tail -1
      tail -1 "$log"
    else
      cat "$log"
      failed+=("$target ($pkg)")
    fi
  done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | sort)
if ((${#failed[@]})); then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
