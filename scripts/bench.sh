#!/usr/bin/env bash
# make bench: engram-store and its peers side by side (engram-bench), the
# section "Side by side (engram-bench)" of docs/benchmarks.md rewritten with
# the figures, and the batch-size plot drawn to docs/bench_batch.png.
#
#   scripts/bench.sh BUILD_DIR [engram-bench flags...]   (make bench runs it)
#
# Examples: scripts/bench.sh build --quick (the headline only, < 3 minutes);
# scripts/bench.sh build --tokens zipf --zipf-exponent 1.2. The default run
# takes under 10 minutes (the first one also builds its tables, about a
# minute more). Only a default run (no extra flags) rewrites the docs;
# BENCH_DOC=1 forces it, BENCH_DOC=0 prevents it.
#
# Then tables larger than RAM (engram-bench-client --table-over-ram: 3
# shards in memory cgroups, budgets of 5, 10, 25 and 50% of a shard, the
# tail read from disk; its last lines start with "bench-tiers:";
# docs/benchmarks.md, "Tables larger than RAM"), on the fp8 table and on a
# Q2_K table of about the same bytes (--encoding q2_k --tiers-vocab 345000:
# 84-byte rows, 3.1 times as many); about 10 minutes each, the first run
# also builds the 1.4 GB tables. BENCH_TIERS=0 skips both.
#
# Then, when the engram_store Python module is built, the Python binding's
# section (python/bench_python.py: decode steps at B = 64 from Python against
# the same loop in C++; its lines start with "bench-python:"; docs/python.md).
#
# engram-bench runs in a process group of its own, with every engram-shard
# and redis-server it starts; on exit, error or signal the whole group is
# stopped.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$here/build}" && pwd)"
shift || true
bin="$build/bin/engram-bench"
work="$build/engram-bench"
[ -x "$bin" ] || { echo "bench: no $bin; run make build first" >&2; exit 1; }
mkdir -p "$work"

write_doc="${BENCH_DOC:-}"
if [ -z "$write_doc" ]; then
  if [ $# -eq 0 ]; then write_doc=1; else write_doc=0; fi
fi
args=(--plot-data "$work/bench_batch.tsv")
[ "$write_doc" = 1 ] && args+=(--doc "$here/docs/benchmarks.md" --plot-png bench_batch.png)

pgid=""
stop_group() {
  [ -n "$pgid" ] || return 0
  kill -TERM -- "-$pgid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do
    kill -0 -- "-$pgid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL -- "-$pgid" 2>/dev/null || true
}
trap stop_group EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# setsid: engram-bench leads a new process group (its children join it).
setsid "$bin" "${args[@]}" "$@" > >(tee "$work/last-run.txt") &
pgid=$!
status=0
wait "$pgid" || status=$?
pgid=""
[ "$status" -eq 0 ] || { echo "bench: engram-bench failed (exit $status)" >&2; exit "$status"; }

if [ "$write_doc" = 1 ]; then
  if command -v gnuplot > /dev/null; then
    gnuplot -e "data='$work/bench_batch.tsv'; out='$here/docs/bench_batch.png'" \
      "$here/bench/engram_bench/plot_bench.gnuplot"
    echo "bench: wrote docs/benchmarks.md (Side by side) and docs/bench_batch.png" >&2
  else
    echo "bench: wrote docs/benchmarks.md; no gnuplot, so no docs/bench_batch.png" >&2
  fi
fi

# Tables larger than RAM: needs root for the memory cgroups.
if [ "${BENCH_TIERS:-1}" != 0 ]; then
  "$build/bin/engram-bench-client" --table-over-ram |
    tee "$work/last-tiers.txt" ||
    { echo "bench: engram-bench-client --table-over-ram failed" >&2; exit 1; }
  "$build/bin/engram-bench-client" --table-over-ram --encoding q2_k --tiers-vocab 345000 |
    tee "$work/last-tiers-q2_k.txt" ||
    { echo "bench: engram-bench-client --table-over-ram --encoding q2_k failed" >&2; exit 1; }
fi

# The Python binding (docs/python.md, "Benchmark"): prints its own lines.
if compgen -G "$build/python/engram_store*.so" > /dev/null && [ -x /usr/bin/python3 ]; then
  /usr/bin/python3 "$here/python/bench_python.py" "$build" ||
    { echo "bench: python/bench_python.py failed" >&2; exit 1; }
else
  echo "bench: no engram_store module in $build/python (pybind11 missing?); Python section skipped" >&2
fi
