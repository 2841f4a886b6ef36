#!/usr/bin/env bash
# The main job: a real 3-shard deployment on loopback with a real workload.
#
#   scripts/demo.sh BUILD_DIR        (make demo runs it)
#
# Environment: DEMO_SCALE (table size factor, default 1 = ~250 MB),
# DEMO_TOKENS (real | zipf, default real), DEMO_DIR (work dir, default
# BUILD_DIR/demo), DEMO_SHARDS (default 3), DEMO_BLOCK_US (default 500),
# DEMO_DECODE_STEPS (default 150), DEMO_RAM_SHARE (hot tier share of each
# shard's row bytes, percent, default 25), DEMO_TAIL (engramctl import --tail-format:
# cuckoo, the default, for a tail the page cache holds, or block).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$here/build}" && pwd)"
bin="$build/bin"
dir="${DEMO_DIR:-$build/demo}"
scale="${DEMO_SCALE:-1}"
tokens="${DEMO_TOKENS:-real}"
shards="${DEMO_SHARDS:-3}"
ram_share="${DEMO_RAM_SHARE:-25}"
tail_format="${DEMO_TAIL:-cuckoo}"
mkdir -p "$dir"
say() { echo "demo: $*" >&2; }

case "$scale" in (*[!0-9]*|'') echo "demo: DEMO_SCALE must be a whole number (got '$scale')" >&2; exit 2;; esac
vocab=$((20000 * scale))
case "$tail_format" in (block|cuckoo) ;; (*) echo "demo: DEMO_TAIL must be block or cuckoo (got '$tail_format')" >&2; exit 2;; esac

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

# 3. Shard servers on 127.0.0.1, RAM budget below the shard size.
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
addrs=(); mports=()
# The RAM budget is a share of a shard's row bytes (not of its files, whose
# size depends on the tail format).
bytes=$(( $(stat -c %s "$dir/table/rows.safetensors") / shards ))
budget=$((bytes * ram_share / 100))
for ((i = 0; i < shards; i++)); do
  "$bin/engram-shard" --db "$dir/shard-$i" --listen 127.0.0.1:0 --metrics-port 0 \
    --ram-budget "$budget" > "$dir/shard-$i.log" 2> "$dir/shard-$i.err" &
  pids+=($!)
  for _ in $(seq 1 300); do
    grep -q "serving shard" "$dir/shard-$i.log" 2>/dev/null && break
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$dir/shard-$i.err" >&2; echo "demo: shard $i failed to start" >&2; exit 1; }
    sleep 0.1
  done
  line=$(grep "serving shard" "$dir/shard-$i.log") || { echo "demo: shard $i did not start in 30 s" >&2; exit 1; }
  addrs+=("$(sed -E 's/.* on ([^ ]+) .*/\1/' <<<"$line")")
  mports+=("$(sed -E 's/.*metrics :([0-9]+).*/\1/' <<<"$line")")
  say "shard $i: ${addrs[-1]} (metrics :${mports[-1]}, hot tier $budget of $bytes bytes)"
done

# 4. The simulated inference loop.
IFS=,
"$bin/engram-demo" --table "$dir/table" --shard-map "$dir/shard-0/shard_map.json" \
  --shards "${addrs[*]}" --metrics-ports "${mports[*]}" --trace "$dir/workload.trace" \
  --block-us "${DEMO_BLOCK_US:-500}" --decode-steps "${DEMO_DECODE_STEPS:-150}"
