#!/usr/bin/env bash
# engramctl lookup against two real engram-shard processes: the text and the
# --json output, every value checked against rows.safetensors by an
# independent decoder (Python), and bad input.
set -euo pipefail
bin="$1"; here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"; pids=()
cleanup() {
  local rc=$?
  [[ $rc -eq 0 ]] || { echo "lookup_cli_test: failed (exit $rc); server logs:" >&2; cat "$tmp"/log* >&2 2>/dev/null; }
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

"$bin/engramctl" gen-table --out "$tmp/table" --preset small --engram-vocab-size 400 --seed 5 >/dev/null
addrs=()
for i in 0 1; do
  "$bin/engramctl" import --table "$tmp/table" --shards 2 --shard-index $i --out "$tmp/s$i" >/dev/null
  "$bin/engram-shard" --db "$tmp/s$i" --listen 127.0.0.1:0 > "$tmp/log$i" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do grep -q "serving shard" "$tmp/log$i" && break; sleep 0.1; done
  addrs+=("$(grep -o '127.0.0.1:[0-9]*' "$tmp/log$i" | head -1)")
done
shards="${addrs[0]},${addrs[1]}"

out="$("$bin/engramctl" lookup --table "$tmp/table" --shards "$shards" --tokens "12 7 99")"
# 3 positions x 2 layers x 24 columns
[[ "$(wc -l <<<"$out")" -eq 144 ]]
grep -q "^pos 2 layer 1 (transformer layer 14) col 23 row [0-9]* shard [01]: " <<<"$out"

"$bin/engramctl" lookup --table "$tmp/table" --shards "$shards" --tokens "12 7 99 4 4 4" --json > "$tmp/rows.json"
python3 "$here/check_lookup_json.py" "$tmp/table" "$tmp/rows.json" 6 2

# Wrong shard order: the servers refuse rows that are not theirs.
set +e
err="$("$bin/engramctl" lookup --table "$tmp/table" --shards "${addrs[1]},${addrs[0]}" --tokens "12 7" 2>&1 >/dev/null)"; rc=$?
set -e
[[ $rc -eq 1 ]] && grep -q "belongs to shard" <<<"$err"
# Bad input: one line, non-zero exit.
for args in "--tokens x1" "--tokens 99999999" "--tokens ''"; do
  set +e
  err="$(eval "$bin/engramctl" lookup --table "$tmp/table" --shards "$shards" $args 2>&1 >/dev/null)"; rc=$?
  set -e
  [[ $rc -ne 0 && "$(wc -l <<<"$err")" -eq 1 ]] || { echo "bad input $args: rc=$rc: $err"; exit 1; }
done
echo "lookup CLI: all checks passed"
