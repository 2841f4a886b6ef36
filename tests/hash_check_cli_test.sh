#!/usr/bin/env bash
# engramctl hash-check on the shipped goldens, on goldens of other geometries
# written by an independent implementation, and on a tampered file.
set -euo pipefail
bin="$1"; golden="$2"; here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT

out="$("$bin/engramctl" hash-check "$golden"/*.json)"
echo "$out"
[[ "$(tail -n1 <<<"$out")" =~ ^[1-9][0-9]*\ passed,\ 0\ failed$ ]]

python3 "$here/make_hash_golden.py" "$tmp/a.json" --vocab 777 --layers 3 --max-ngram 3 --heads 5
python3 "$here/make_hash_golden.py" "$tmp/b.json" --vocab 50 --layers 1 --max-ngram 5 --heads 1 --seed 3
python3 "$here/make_hash_golden.py" "$tmp/c.json" --vocab 3000 --layers 2 --max-ngram 2 --heads 16 --seed 9
out="$("$bin/engramctl" hash-check "$tmp"/a.json "$tmp"/b.json "$tmp"/c.json)"
echo "$out"
[[ "$(tail -n1 <<<"$out")" == "18 passed, 0 failed" ]]

# One wrong expected id: exactly one failed call, exit 1.
python3 - "$tmp/a.json" "$tmp/bad.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["calls"][2]["expected"][1][0][0][0] += 1
json.dump(d, open(sys.argv[2], "w"))
PY
set +e
out="$("$bin/engramctl" hash-check "$tmp/bad.json")"; rc=$?
set -e
echo "$out"
[[ $rc -eq 1 ]]
[[ "$(tail -n1 <<<"$out")" == "5 passed, 1 failed" ]]

# Not JSON: one line on stderr-free stdout saying so, non-zero exit.
echo "garbage" > "$tmp/junk.json"
set +e; out="$("$bin/engramctl" hash-check "$tmp/junk.json")"; rc=$?; set -e
echo "$out"
[[ $rc -ne 0 ]] && grep -q "not a JSON object" <<<"$out"
echo "hash-check CLI: all checks passed"
