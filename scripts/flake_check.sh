#!/usr/bin/env bash
# scripts/flake_check.sh N: runs the whole ctest suite of build/ N times
# (default 5) with `stress-ng --cpu 2` loading the machine beside it, and
# ends with
#   flake_check: N runs, F failed
# followed by the name of every test that failed and how many runs it
# failed in. Exit 0 only when F is 0. A test that fails here checks the
# clock, not a property: fix it (the guide's rule), do not retry it. Each
# run's ctest output is kept in BUILD/flake_check/run-I.log.
#
#   FLAKE_BUILD=DIR    build directory (default build; built by make build)
#   FLAKE_JOBS=N       ctest -j (default 2, as make test runs it)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runs="${1:-5}"
build="${FLAKE_BUILD:-$here/build}"
jobs="${FLAKE_JOBS:-2}"
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
  echo "flake_check: N must be a positive whole number, not '$runs'" >&2
  exit 2
fi
if ! command -v stress-ng >/dev/null 2>&1; then
  echo "flake_check: stress-ng not found; run scripts/setup.sh (Debian package stress-ng)" >&2
  exit 2
fi
if [ ! -f "$build/CTestTestfile.cmake" ]; then
  echo "flake_check: no ctest suite in $build; run 'make build' first" >&2
  exit 2
fi

logs="$build/flake_check"
rm -rf "$logs"
mkdir -p "$logs"
stress_pid=""
cleanup() {
  [ -n "$stress_pid" ] && kill "$stress_pid" 2>/dev/null && wait "$stress_pid" 2>/dev/null
}
trap cleanup EXIT

stress-ng --cpu 2 --quiet --timeout 0 >/dev/null 2>&1 &
stress_pid=$!
failed=0
for i in $(seq 1 "$runs"); do
  log="$logs/run-$i.log"
  if (cd "$build" && ctest -j "$jobs" --timeout 900 --output-on-failure >"$log" 2>&1); then
    echo "flake_check: run $i/$runs passed"
  else
    failed=$((failed + 1))
    echo "flake_check: run $i/$runs FAILED: $(grep -E '^\s+[0-9]+ - ' "$log" | grep -vc '(Skipped)') test(s)"
  fi
done

echo "flake_check: $runs runs, $failed failed"
# Each failing test with the number of runs it failed in.
cat "$logs"/run-*.log | grep -v '(Skipped)$' | sed -n 's/^\s*[0-9]* - \(.*\) (.*)$/\1/p' |
  sort | uniq -c |
  sort -rn | sed 's/^ *\([0-9]*\) \(.*\)$/flake_check:   \2: failed in \1 run(s)/'
[ "$failed" -eq 0 ]
