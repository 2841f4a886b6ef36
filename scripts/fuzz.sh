#!/usr/bin/env bash
# make fuzz: builds the libFuzzer targets of fuzz/ in build-fuzz/ (clang,
# -DENGRAM_FUZZ=ON: ASan + UBSan + coverage) and runs each for FUZZ_SECONDS
# (default 30) on a copy of its seed corpus, fuzz/corpus/<target>/ (a built
# target without one fails the run, exit 2). Prints
# one line per target and exits 1 if any crashed; a crash's input is kept
# in build-fuzz/fuzz-runs/<target>/ (replay: build-fuzz/bin/<target> FILE).
#
#   FUZZ_SECONDS=N   seconds per target          FUZZ_TARGETS="a b"  a subset
#   FUZZ_BUILD=DIR   build directory             JOBS=N              build jobs
#
# Needs clang and its libFuzzer runtime (Debian: clang, libclang-rt-14-dev).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FUZZ_BUILD:-$here/build-fuzz}"
seconds="${FUZZ_SECONDS:-30}"
jobs="${JOBS:-2}"

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ not found; install clang and libclang-rt-14-dev" >&2
  exit 2
fi
mkdir -p "$build"
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S "$here" -B "$build" -DENGRAM_FUZZ=ON -DBUILD_TESTING=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/configure.log" 2>&1 || {
    cat "$build/configure.log" >&2
    rm -f "$build/CMakeCache.txt"
    exit 2
  }
fi
cmake --build "$build" -j "$jobs" --target fuzzers >"$build/fuzz-build.log" 2>&1 || {
  tail -n 40 "$build/fuzz-build.log" >&2
  echo "fuzz: build failed (log: $build/fuzz-build.log)" >&2
  exit 2
}

# Every target the build made runs; one without a seed corpus is an error,
# not a silent skip (fuzz/corpus/ is written by engram-fuzz-corpus).
if [ -n "${FUZZ_TARGETS:-}" ]; then
  read -r -a targets <<<"$FUZZ_TARGETS"
else
  targets=()
  for b in "$build"/bin/*_fuzz; do [ -x "$b" ] && targets+=("$(basename "$b")"); done
fi
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: the build made no *_fuzz target in $build/bin" >&2
  exit 2
fi
missing=0
for t in "${targets[@]}"; do
  if [ ! -x "$build/bin/$t" ]; then
    echo "fuzz: $t: no such target in $build/bin (FUZZ_TARGETS names fuzz/*_fuzz.cc)" >&2
    missing=1
  elif [ -z "$(ls -A "$here/fuzz/corpus/$t" 2>/dev/null)" ]; then
    echo "fuzz: $t: no seed corpus in fuzz/corpus/$t; write it with" \
      "'cmake --build build --target engram-fuzz-corpus && build/bin/engram-fuzz-corpus fuzz/corpus'" \
      "and commit it" >&2
    missing=1
  fi
done
[ "$missing" -eq 0 ] || exit 2

crashed=0
for t in "${targets[@]}"; do
  run="$build/fuzz-runs/$t"
  rm -rf "$run"
  mkdir -p "$run/corpus"
  cp "$here/fuzz/corpus/$t/"* "$run/corpus/"
  rc=0
  # -rss_limit_mb: a parser that allocates what its input does not justify
  # is a crash (libFuzzer's "out-of-memory"), as is one input taking 10 s.
  "$build/bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$run/" "$run/corpus" >"$run/log" 2>&1 || rc=$?
  runs="$(awk '/stat::number_of_executed_units/ {print $2}' "$run/log")"
  crash="$(find "$run" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' \
    -o -name 'oom-*' -o -name 'timeout-*' \) | head -n 1)"
  if [ "$rc" -eq 0 ] && [ -z "$crash" ]; then
    echo "fuzz: $t: ${runs:-0} runs, no crash"
  else
    crashed=1
    echo "fuzz: $t: CRASH after ${runs:-?} runs: ${crash:-exit status $rc} (log: $run/log)"
    grep -m 3 -E 'ERROR: |FUZZ_CHECK|runtime error' "$run/log" | sed 's/^/fuzz:   /' || true
  fi
done
exit "$crashed"
