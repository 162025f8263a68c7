#!/usr/bin/env bash
# fuzz.sh runs every native fuzz test in the repository's modules (the
# operator's and the runtime's) for the given time each
# (default 60s), one at a time, and prints each target's last status line
# (with its exec count). A failing target prints its whole output, including
# where the failing input was written, the other targets still run, and the
# script exits non-zero.
#
# One failure is not a finding: Go before 1.27 can fail a target with a bare
# "context deadline exceeded" when -fuzztime ends while a starved worker is
# mid-input (go.dev/issue/75804), writing no failing input. That case is
# reported as such and does not fail the run; any failure that writes an
# input, or says anything else, does.
set -uo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-60s}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=()
inputs() { ls "$1" 2>/dev/null | wc -l; }
# moduleOf prints the directory of the Go module that holds directory $1.
moduleOf() { local d=$1; while [[ ! -f $d/go.mod ]]; do d=$(dirname "$d"); done; echo "$d"; }
while read -r file; do
  mod=$(moduleOf "$(dirname "$file")")
  pkg=./$(realpath --relative-to="$mod" "$(dirname "$file")")
  for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
    echo "== $target ($mod: $pkg, $fuzztime)"
    corpus="$mod/$pkg/testdata/fuzz/$target"
    before=$(inputs "$corpus")
    if go -C "$mod" test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 10x "$pkg" >"$log" 2>&1; then
      grep '^fuzz: elapsed' "$log" | tail -1
      tail -1 "$log"
    elif [[ $(inputs "$corpus") == "$before" ]] && ! grep -q 'Failing input written' "$log" &&
      [[ $(grep -A1 -- '^--- FAIL' "$log" | sed -n 2p) == '    context deadline exceeded' ]]; then
      grep '^fuzz: elapsed' "$log" | tail -1
      echo "no finding: the run ended on Go's -fuzztime deadline race (go.dev/issue/75804), and no failing input was written"
    else
      cat "$log"
      failed+=("$target ($mod: $pkg)")
    fi
  done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | sort)
if ((${#failed[@]})); then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
