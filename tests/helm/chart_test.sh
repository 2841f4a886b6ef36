#!/usr/bin/env bash
# Renders a Helm chart with tests/helm/render, once with its default values
# and once with each VALUES file, validates every rendering against the
# Kubernetes API schemas with tests/helm/validate.mjs, and checks what the
# chart's parts promise each other with tests/helm/chart_contract.py (with
# BUILD_DIR/bin/engramctl's shardmap). The renderings are kept in
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
# check NAME [VALUES]: renders the chart (as `helm template engram-store`
# would, in namespace engram) with the VALUES file if given, and validates.
check() {
  local name="$1" out="$out_dir/$1.yaml" args=()
  [ $# -ge 2 ] && args=(--values "$2")
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
  if ! "$python" "$here/chart_contract.py" "$out" "$here/../.." "${engramctl[@]}" >"$out_dir/$name.contract"; then
    sed 's/^/  /' "$out_dir/$name.contract"
    echo "chart_test: FAILED: rendering with $name ($out): $(tail -1 "$out_dir/$name.contract")"
    failed=$((failed + 1))
    return
  fi
  echo "chart_test: $name: $(tail -1 "$out_dir/$name.validate"); $(tail -1 "$out_dir/$name.contract")"
}

check default-values
for values in "$@"; do
  check "$(basename "$values" .yaml)" "$values"
done
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
refuse fullnameOverride=engram-store-with-a-very-long-name-for-its-pods-to-fit-in-dns-labels \
  "longer than 63 characters: set fullnameOverride to a shorter name"
echo "chart_test: $refused bad values refused with one line each"
[ $failed -eq 0 ] || { echo "chart_test: $failed check(s) failed"; exit 1; }
