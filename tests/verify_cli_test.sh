#!/usr/bin/env bash
# engramctl verify on real shard directories: a sound shard (with and
# without --table), a flipped byte in an SST's data block, a shard.json
# whose layer checksum disagrees, and a missing shard.
set -euo pipefail
bin="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$bin/engramctl" gen-table --out "$tmp/table" --preset small --engram-vocab-size 400 --seed 5 >/dev/null
"$bin/engramctl" import --table "$tmp/table" --shards 2 --shard-index 1 --out "$tmp/s1" >/dev/null
"$bin/engramctl" import --table "$tmp/table" --shards 2 --shard-index 1 --out "$tmp/c1" \
    --tail-format cuckoo >/dev/null

# Sound: one line per layer, then the verdict; exit 0.
for shard in s1 c1; do
  out="$("$bin/engramctl" verify --db "$tmp/$shard")"
  [[ "$(wc -l <<<"$out")" -eq 3 ]] || { echo "$shard: $out"; exit 1; }
  grep -q "^layer 0 (layer id 1): [0-9]* rows, checksum xxh3_64:[0-9a-f]* matches shard.json$" <<<"$out"
  grep -q "^layer 1 (layer id 14): " <<<"$out"
  grep -q "^verify: [0-9]* rows, all match$" <<<"$out" || { echo "$shard: $out"; exit 1; }
  out="$("$bin/engramctl" verify --db "$tmp/$shard" --table "$tmp/table")"
  grep -q "every readable row equals the table's" <<<"$out"
  [[ "$(tail -1 <<<"$out")" =~ ^verify:\ [0-9]+\ rows,\ all\ match$ ]]
done
rows="$(tail -1 <<<"$out" | awk '{print $2}')"

# A flipped byte a third into the largest SST (a data block): the rows of
# that block differ; exit 1.
cp -r "$tmp/s1" "$tmp/bad"
sst="$(ls -S "$tmp"/bad/rocksdb/*.sst | head -1)"
python3 - "$sst" <<'PY'
import os, sys
path = sys.argv[1]
at = os.path.getsize(path) // 3
with open(path, "r+b") as f:
    f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x5A]))
PY
set +e
out="$("$bin/engramctl" verify --db "$tmp/bad" --table "$tmp/table")"; rc=$?
set -e
[[ $rc -eq 1 ]] || { echo "damaged shard: rc=$rc: $out"; exit 1; }
last="$(tail -1 <<<"$out")"
[[ "$last" =~ ^verify:\ [0-9]+\ of\ $rows\ rows\ differ\ \(first:\ layer\ [01]\ row\ [0-9]+\)$ ]] \
    || { echo "damaged shard: $last"; exit 1; }
grep -q "unreadable, checksum not comparable.*; first bad row [0-9]*: .*Corruption" <<<"$out"

# shard.json's checksum of layer 1 changed: every row reads, the sum differs.
cp -r "$tmp/c1" "$tmp/sum"
python3 - "$tmp/sum/shard.json" <<'PY'
import json, sys
path = sys.argv[1]
info = json.load(open(path))
info["layers"][1]["checksum"] = "xxh3_64:0123456789abcdef"
json.dump(info, open(path, "w"), indent=2)
PY
set +e
out="$("$bin/engramctl" verify --db "$tmp/sum")"; rc=$?
set -e
[[ $rc -eq 1 ]] && [[ "$(tail -1 <<<"$out")" == "verify: $rows rows, but the checksum of layer 1 differs from shard.json" ]] \
    || { echo "edited shard.json: rc=$rc: $out"; exit 1; }

# Missing shard: one line on stderr, exit 1. No --db: usage error, exit 2.
set +e
err="$("$bin/engramctl" verify --db "$tmp/none" 2>&1 >/dev/null)"; rc=$?
set -e
[[ $rc -eq 1 && "$(wc -l <<<"$err")" -eq 1 ]] || { echo "missing shard: rc=$rc: $err"; exit 1; }
grep -q "^engramctl: verify: NOT_FOUND: " <<<"$err"
set +e
err="$("$bin/engramctl" verify 2>&1 >/dev/null)"; rc=$?
set -e
[[ $rc -eq 2 ]] && grep -q "needs --db" <<<"$err"

# A table of Q2_K rows (gen-table --encoding): imported, every row the
# table's; an encoding the geometry cannot hold is one line, exit 2, and
# leaves no table.
"$bin/engramctl" gen-table --out "$tmp/q2k" --preset small --head-dim 256 --encoding q2_k \
    --engram-vocab-size 400 --seed 5 >/dev/null
grep -q '"encoding": *"q2_k"' "$tmp/q2k/manifest.json"
"$bin/engramctl" import --table "$tmp/q2k" --shards 2 --shard-index 0 --out "$tmp/q0" >/dev/null
out="$("$bin/engramctl" verify --db "$tmp/q0" --table "$tmp/q2k")"
grep -q "every readable row equals the table's" <<<"$out" || { echo "q2_k: $out"; exit 1; }
[[ "$(tail -1 <<<"$out")" =~ ^verify:\ [0-9]+\ rows,\ all\ match$ ]] || { echo "q2_k: $out"; exit 1; }
set +e
err="$("$bin/engramctl" gen-table --out "$tmp/q64" --preset small --encoding q2_k 2>&1 >/dev/null)"
rc=$?
set -e
[[ $rc -ne 0 && "$(wc -l <<<"$err")" -eq 1 && ! -e "$tmp/q64/manifest.json" ]] \
    || { echo "q2_k at head_dim 64: rc=$rc: $err"; exit 1; }
grep -q "head_dim must be a positive multiple of 256" <<<"$err"
echo "verify CLI: all checks passed"
