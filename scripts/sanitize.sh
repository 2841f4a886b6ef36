#!/usr/bin/env bash
# The unit tests under AddressSanitizer + UndefinedBehaviorSanitizer: builds
# the chosen test binaries in build-asan/ (-DENGRAM_SANITIZE=ON; gcc unless
# CC/CXX say otherwise) and runs each, one line per binary. Any sanitizer report fails the
# test that triggered it (-fno-sanitize-recover=all).
#
#   SANITIZE_TESTS="a_test b_test"   test targets (default: the parsers' tests)
#   SANITIZE_BUILD=DIR               build directory (default build-asan)
#   JOBS=N                           build and test jobs (default 2)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SANITIZE_BUILD:-$here/build-asan}"
jobs="${JOBS:-2}"
read -r -a tests <<<"${SANITIZE_TESTS:-gguf_test gguf_family_test hot_profile_test json_parse_test \
layout_test safetensors_test shard_map_test table_manifest_test table_test wire_test \
engram_hash_test row_encoding_test checkpoint_config_test token_map_test}"

mkdir -p "$build"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" -DENGRAM_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    >"$build/configure.log" 2>&1 || {
    cat "$build/configure.log" >&2
    rm -f "$build/CMakeCache.txt"
    exit 2
  }
fi
cmake --build "$build" -j "$jobs" --target "${tests[@]}" >"$build/sanitize-build.log" 2>&1 || {
  tail -n 40 "$build/sanitize-build.log" >&2
  echo "sanitize: build failed (log: $build/sanitize-build.log)" >&2
  exit 2
}
# Each test binary runs whole (ctest knows its tests only by Suite.Name).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
status=0
for t in "${tests[@]}"; do
  if "$build/bin/$t" >"$build/$t.log" 2>&1; then
    echo "sanitize: $t: $(grep -c '^\[       OK \]' "$build/$t.log") tests passed, no report"
  else
    status=1
    echo "sanitize: $t: FAILED (log: $build/$t.log)"
    grep -m 3 -E 'ERROR: |runtime error|FAILED  \]' "$build/$t.log" | sed 's/^/sanitize:   /' || true
  fi
done
exit "$status"
