#!/usr/bin/env bash
# fuzz.sh runs every native fuzz test in the module for the given time each
# (default 60s), one at a time, and prints each target's last status line.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-60s}
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
  pkg=./$(dirname "${file#./}")
  for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
    echo "== $target ($pkg, $fuzztime)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tail -3
  done
done
