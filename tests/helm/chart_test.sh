#!/usr/bin/env bash
# Renders a Helm chart with tests/helm/render, once with its default values,
# once with each VALUES file and once per import source format
# (table.source.format table, checkpoint, gguf), validates every rendering
# against the Kubernetes API schemas with tests/helm/validate.mjs, and checks
# what the chart's parts promise each other with tests/helm/chart_contract.py
# (with BUILD_DIR/bin/engramctl's shardmap; for the source formats, the
# import command's source flag and path). Then checks that bad values are
# refused with one line saying what to change. The renderings are kept in
# BUILD_DIR/helm-chart-test/ for a look. Exits 77 (skip) when go, node, the
# tools' npm packages (tools/node_modules) or Python's yaml are missing.
#
#   bash tests/helm/chart_test.sh BUILD_DIR CHART_DIR [VALUES]...
set -uo pipefail

if [ $# -lt 2 ]; then
  echo "usage: chart_test.sh BUILD_DIR CHART_DIR [VALUES]..." >&2; exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build_dir="$1"
chart="$2"
shift 2

if ! command -v node >/dev/null 2>&1; then
  echo "chart_test: skipped: node is not installed"; exit 77
fi
if [ ! -d "$here/../../tools/node_modules/kubernetes-models" ]; then
  echo "chart_test: skipped: no tools/node_modules/kubernetes-models (run scripts/setup.sh)"; exit 77
fi
python=/usr/bin/python3
[ -x "$python" ] || python=python3
if ! "$python" -c 'import yaml' 2>/dev/null; then
  echo "chart_test: skipped: no Python yaml module (Debian package python3-yaml)"; exit 77
fi
engramctl=()
[ -x "$build_dir/bin/engramctl" ] && engramctl=("$build_dir/bin/engramctl")
if [ ! -f "$chart/Chart.yaml" ]; then
  echo "chart_test: FAILED: no chart at $chart"; exit 1
fi
out_dir="$build_dir/helm-chart-test"
mkdir -p "$out_dir"
render="$(bash "$here/build_renderer.sh" "$build_dir" 2>"$out_dir/build.log")"
rc=$?
if [ $rc -eq 77 ]; then
  echo "chart_test: $(tail -1 "$out_dir/build.log")"; exit 77
elif [ $rc -ne 0 ]; then
  cat "$out_dir/build.log"
  echo "chart_test: FAILED: the renderer does not build"; exit 1
fi

failed=0
# check_with NAME [RENDER_ARGS]... [-- CONTRACT_ARGS...]: renders the chart (as
# `helm template engram-store` would, in namespace engram) with RENDER_ARGS
# (--values FILE, --set k=v), validates, and checks the contract with
# CONTRACT_ARGS (--import-flag NAME=VALUE, --no-import-flag NAME).
check_with() {
  local name="$1" out="$out_dir/$1.yaml" args=() contract=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  contract=("$@")
  if ! "$render" --chart "$chart" --release engram-store --namespace engram "${args[@]}" \
      >"$out" 2>"$out_dir/$name.err"; then
    echo "chart_test: FAILED: rendering with $name: $(cat "$out_dir/$name.err")"
    failed=$((failed + 1))
    return
  fi
  if ! node "$here/validate.mjs" "$out" >"$out_dir/$name.validate"; then
    sed 's/^/  /' "$out_dir/$name.validate"
    echo "chart_test: FAILED: rendering with $name ($out): $(tail -1 "$out_dir/$name.validate")"
    failed=$((failed + 1))
    return
  fi
  if ! "$python" "$here/chart_contract.py" "${contract[@]}" "$out" "$here/../.." "${engramctl[@]}" \
      >"$out_dir/$name.contract"; then
    sed 's/^/  /' "$out_dir/$name.contract"
    echo "chart_test: FAILED: rendering with $name ($out): $(tail -1 "$out_dir/$name.contract")"
    failed=$((failed + 1))
    return
  fi
  echo "chart_test: $name: $(tail -1 "$out_dir/$name.validate"); $(tail -1 "$out_dir/$name.contract")"
}
# check NAME [VALUES]: check_with the VALUES file if given.
check() {
  if [ $# -ge 2 ]; then check_with "$1" --values "$2"; else check_with "$1"; fi
}

check_with default-values -- --import-flag table=/table --no-import-flag table-version \
  --no-import-flag profile-trace
for values in "$@"; do
  check "$(basename "$values" .yaml)" "$values"
done
# The import's source for each table.source.format: exactly that source flag
# and path (chart_contract.py refuses a second source flag), the profile
# trace in the source's directory, a checkpoint or GGUF imported as
# table.version.
check_with source-table \
  --set table.source.format=table,table.source.path=/v41-flash/v7/,table.profileTrace=trace.txt -- \
  --import-flag table=/table/v41-flash/v7 --import-flag profile-trace=/table/v41-flash/v7/trace.txt \
  --no-import-flag table-version
check_with source-checkpoint \
  --set table.source.format=checkpoint,table.source.path=DeepSeek-V4.1-Flash,table.profileTrace=trace.txt \
  --set table.version=3 -- \
  --import-flag checkpoint=/table/DeepSeek-V4.1-Flash \
  --import-flag profile-trace=/table/DeepSeek-V4.1-Flash/trace.txt --import-flag table-version=3
check_with source-gguf-split \
  --set table.source.format=gguf,table.source.path=/gguf/Q4_K_M/,table.profileTrace=trace.txt \
  --set table.source.file=DeepSeek-V4.1-Flash-Q4_K_M-00002-of-00009.gguf,table.version=2 -- \
  --import-flag gguf=/table/gguf/Q4_K_M/DeepSeek-V4.1-Flash-Q4_K_M-00002-of-00009.gguf \
  --import-flag profile-trace=/table/gguf/Q4_K_M/trace.txt --import-flag table-version=2
check_with source-gguf-file \
  --set table.source.format=gguf,table.source.file=DeepSeek-V4.1-Flash-Q8_0.gguf -- \
  --import-flag gguf=/table/DeepSeek-V4.1-Flash-Q8_0.gguf --import-flag table-version=1 \
  --no-import-flag profile-trace
# Values the chart refuses, with one line saying what to change.
refuse() {
  local set="$1" want="$2" err
  if "$render" --chart "$chart" --release engram-store --namespace engram --set "$set" \
      >/dev/null 2>"$out_dir/refuse.err"; then
    echo "chart_test: FAILED: --set $set rendered"; failed=$((failed + 1)); return
  fi
  err="$(cat "$out_dir/refuse.err")"
  if [ "$(wc -l <<<"$err")" -ne 1 ] || ! grep -qF -- "$want" <<<"$err"; then
    echo "chart_test: FAILED: --set $set: want one line with \"$want\", got: $err"
    failed=$((failed + 1)); return
  fi
  refused=$((refused + 1))
}
refused=0
refuse shards=0 "shards must be at least 1"
refuse replicasPerShard=0 "replicasPerShard must be at least 1"
refuse table.source.type=s3 'table.source.type must be volume or url, not "s3"'
refuse table.source.type=url "table.source.url is required with table.source.type url"
refuse tls.enabled=true "tls.secretName is required with tls.enabled"
refuse auth.enabled=true "auth.secretName is required with auth.enabled"
refuse antiAffinity=always 'antiAffinity must be required, preferred or none, not "always"'
refuse table.source.format=safetensors \
  'table.source.format must be table, checkpoint or gguf, not "safetensors"'
refuse table.source.format=gguf \
  "table.source.file is required with table.source.format gguf: the GGUF file's name inside table.source.path"
refuse table.source.format=gguf,table.source.file=Q4_K_M/DeepSeek-V4.1-Flash-Q4_K_M-00001-of-00009.gguf \
  'table.source.file must be a file name, not a path ("Q4_K_M/DeepSeek-V4.1-Flash-Q4_K_M-00001-of-00009.gguf"): put its directory in table.source.path'
refuse table.source.format=checkpoint,table.source.type=url,table.source.url=https://models.example.com/v41/ \
  'table.source.format checkpoint needs table.source.type volume, not "url": a checkpoint or GGUF is hundreds of GB of files, mount it read-only'
refuse table.source.format=gguf,table.source.file=DeepSeek-V4.1-Flash-Q8_0.gguf,table.source.type=url,table.source.url=https://models.example.com/v41/ \
  'table.source.format gguf needs table.source.type volume, not "url"'
refuse table.source.file=DeepSeek-V4.1-Flash-Q8_0.gguf \
  'table.source.file is read with table.source.format gguf only (format is "table"): set table.source.format gguf, or unset table.source.file'
refuse fullnameOverride=engram-store-with-a-very-long-name-for-its-pods-to-fit-in-dns-labels \
  "longer than 63 characters: set fullnameOverride to a shorter name"
echo "chart_test: $refused bad values refused with one line each"
[ $failed -eq 0 ] || { echo "chart_test: $failed check(s) failed"; exit 1; }
