#!/usr/bin/env bash
# The main job: a real 3-shard deployment on loopback with a real workload.
#
#   scripts/demo.sh BUILD_DIR        (make demo runs it)
#
# Environment: DEMO_SCALE (table size factor, 1 = ~250 MB), DEMO_TOKENS
# (real | zipf, default real), DEMO_DIR (work dir, default BUILD_DIR/demo,
# BUILD_DIR/demo-disk with DEMO_TAIL=disk), DEMO_SHARDS (default 3), DEMO_BLOCK_US (default 500),
# DEMO_DECODE_STEPS (default 150), DEMO_TAIL (ram, the default: every shard
# held whole in RAM; disk: a block tail read with O_DIRECT, each shard in a
# memory cgroup capped at its --ram-budget + DEMO_OVERHEAD_MB, default 64,
# on a table of DEMO_SCALE 6 by default), DEMO_RAM_SHARE (with disk: each
# shard's --ram-budget, percent of the budget that holds it whole, default
# 10).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$here/build}" && pwd)"
bin="$build/bin"
tail="${DEMO_TAIL:-ram}"
case "$tail" in
  ram) scale="${DEMO_SCALE:-1}";;
  disk) scale="${DEMO_SCALE:-6}";;
  *) echo "demo: DEMO_TAIL must be ram or disk (got '$tail')" >&2; exit 2;;
esac
# The disk demo's bigger table lives apart, so switching back and forth
# regenerates nothing; it reuses the ram demo's tokenised text.
if [ "$tail" = disk ]; then dir="${DEMO_DIR:-$build/demo-disk}"; else dir="${DEMO_DIR:-$build/demo}"; fi
tokens="${DEMO_TOKENS:-real}"
shards="${DEMO_SHARDS:-3}"
ram_share="${DEMO_RAM_SHARE:-10}"
overhead_mb="${DEMO_OVERHEAD_MB:-64}"
tail_format=block
mkdir -p "$dir"
for f in token_map.json corpus.trace; do
  [ -s "$dir/$f" ] || [ ! -s "$build/demo/$f" ] || cp "$build/demo/$f" "$dir/$f"
done
say() { echo "demo: $*" >&2; }

case "$scale" in (*[!0-9]*|'') echo "demo: DEMO_SCALE must be a whole number (got '$scale')" >&2; exit 2;; esac
vocab=$((20000 * scale))
case "$ram_share$overhead_mb" in (*[!0-9]*|'') echo "demo: DEMO_RAM_SHARE and DEMO_OVERHEAD_MB must be whole numbers" >&2; exit 2;; esac

# 1. Tokens: real English text through DeepSeek's tokenizer, or Zipf.
if [ "$tokens" = real ]; then
  [ -s "$dir/token_map.json" ] || "$here/tools/make-token-map" --out "$dir/token_map.json"
  [ -s "$dir/corpus.trace" ] || "$here/tools/make-trace" --default-corpus --out "$dir/corpus.trace"
  src="$dir/corpus.trace"; map_flag=(--token-map "$dir/token_map.json")
elif [ "$tokens" = zipf ]; then
  [ -s "$dir/zipf.trace" ] || "$here/tools/make-zipf-trace" --out "$dir/zipf.trace" --sequences 1024 --length 2048
  src="$dir/zipf.trace"; map_flag=()
else
  echo "demo: DEMO_TOKENS must be real or zipf (got '$tokens')" >&2; exit 2
fi
# The hot-row profile learns from one half of the sequences; the workload
# replays the other half, so the profile never saw the workload's text.
awk 'NR % 2 == 1' "$src" > "$dir/profile.trace"
awk 'NR % 2 == 0' "$src" > "$dir/workload.trace"

# 2. Table and shards (rebuilt only when the parameters change).
stamp="v41 vocab=$vocab tokens=$tokens shards=$shards tail=$tail_format"
if [ "$(cat "$dir/stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$dir/table" "$dir"/shard-* "$dir/stamp"
  say "generating a v41-geometry table (engram_vocab_size $vocab)"
  "$bin/engramctl" gen-table --out "$dir/table" --preset v41 --engram-vocab-size "$vocab" "${map_flag[@]}"
  for ((i = 0; i < shards; i++)); do
    "$bin/engramctl" import --table "$dir/table" --shards "$shards" --shard-index "$i" \
      --out "$dir/shard-$i" --profile-trace "$dir/profile.trace" --tail-format "$tail_format"
  done
  echo "$stamp" > "$dir/stamp"
fi

# 3. Shard servers on 127.0.0.1. ram: a budget that pins every row; disk: a
# share of it, the tail read with O_DIRECT, each server in a memory cgroup
# capped at its budget plus the process's own overhead, so the page cache
# cannot hold the tail for it.
pids=(); groups=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for g in "${groups[@]}"; do rmdir "$g" 2>/dev/null || true; done
}
trap cleanup EXIT
cgroup_root=""
if [ "$tail" = disk ]; then
  if own=$(sed -n 's/^[0-9]*:memory:\(.*\)$/\1/p' /proc/self/cgroup) && [ -n "$own" ] &&
     [ -w "/sys/fs/cgroup/memory${own%/}" ]; then
    cgroup_root="/sys/fs/cgroup/memory${own%/}"; limit_file=memory.limit_in_bytes; cg="cgroup v1 (memory.limit_in_bytes)"
  elif own=$(sed -n 's/^0::\(.*\)$/\1/p' /proc/self/cgroup) && grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null &&
       [ -w "/sys/fs/cgroup${own%/}" ]; then
    cgroup_root="/sys/fs/cgroup${own%/}"; limit_file=memory.max; cg="cgroup v2 (memory.max)"
  else
    say "no writable memory cgroup (run as root): the shards run without a memory cap"
  fi
fi
addrs=(); mports=(); caps=0
table_bytes=$(stat -c %s "$dir/table/rows.safetensors")
for ((i = 0; i < shards; i++)); do
  fp=$("$bin/engramctl" footprint "$dir/shard-$i")
  fixed=$(sed -E 's/.* fixed_bytes=([0-9]+) .*/\1/' <<<"$fp")
  whole=$(sed -E 's/.* whole_shard_budget=([0-9]+).*/\1/' <<<"$fp")
  if [ "$tail" = ram ]; then budget=$whole; else budget=$((whole * ram_share / 100)); fi
  [ "$budget" -ge "$fixed" ] || budget=$fixed
  launch=("$bin/engram-shard" --db "$dir/shard-$i" --listen 127.0.0.1:0 --metrics-port 0 --ram-budget "$budget")
  note="RAM budget $budget of $whole bytes"
  if [ -n "$cgroup_root" ]; then
    g="$cgroup_root/engram-demo-$$-$i"; mkdir "$g"; groups+=("$g")
    cap=$((budget + (overhead_mb << 20))); caps=$((caps + cap))
    echo "$cap" > "$g/$limit_file"
    launch=(sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$g" "${launch[@]}")
    note="$note, in a $cg group capped at $cap"
  fi
  "${launch[@]}" > "$dir/shard-$i.log" 2> "$dir/shard-$i.err" &
  pids+=($!)
  for _ in $(seq 1 300); do
    grep -q "serving shard" "$dir/shard-$i.log" 2>/dev/null && break
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$dir/shard-$i.err" >&2; echo "demo: shard $i failed to start" >&2; exit 1; }
    sleep 0.1
  done
  line=$(grep "serving shard" "$dir/shard-$i.log") || { echo "demo: shard $i did not start in 30 s" >&2; exit 1; }
  addrs+=("$(sed -E 's/.* on ([^ ]+) .*/\1/' <<<"$line")")
  mports+=("$(sed -E 's/.*metrics :([0-9]+).*/\1/' <<<"$line")")
  say "shard $i: ${addrs[-1]} (metrics :${mports[-1]}, $note)"
done
if [ "$caps" -gt 0 ]; then
  say "the table ($table_bytes bytes) is $(awk -v t="$table_bytes" -v c="$caps" 'BEGIN { printf "%.1f", t / c }')x the sum of the shards' memory caps"
fi

# 4. The simulated inference loop.
IFS=,
"$bin/engram-demo" --table "$dir/table" --shard-map "$dir/shard-0/shard_map.json" \
  --shards "${addrs[*]}" --metrics-ports "${mports[*]}" --trace "$dir/workload.trace" \
  --block-us "${DEMO_BLOCK_US:-500}" --decode-steps "${DEMO_DECODE_STEPS:-150}"
