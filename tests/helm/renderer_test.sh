#!/usr/bin/env bash
# Tests the chart renderer (tests/helm/render) on its own: renders the
# fixture chart tests/helm/testdata/fixture, which uses the Helm semantics the
# renderer must reproduce, and compares with the expected output; then checks
# that each kind of error fails with one line naming the file.
# Exits 77 (skip) when go is missing.
#
#   bash tests/helm/renderer_test.sh BUILD_DIR
#   RENDERER_TEST_UPDATE=1 bash tests/helm/renderer_test.sh BUILD_DIR
#       (rewrites the expected files: review their diff before committing)
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: renderer_test.sh BUILD_DIR" >&2; exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
data="$here/testdata"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

render="$(bash "$here/build_renderer.sh" "$1" 2>"$work/build.log")"
rc=$?
if [ $rc -eq 77 ]; then
  echo "renderer_test: $(tail -1 "$work/build.log")"; exit 77
elif [ $rc -ne 0 ]; then
  cat "$work/build.log"
  echo "renderer_test: FAILED: the renderer does not build"; exit 1
fi
passed=0
failed=0
pass() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAILED: $*"; }

# expect_output NAME EXPECTED_FILE RENDER_ARGS...: the render succeeds and
# prints exactly EXPECTED_FILE.
expect_output() {
  local name="$1" expected="$2"
  shift 2
  if ! "$render" "$@" >"$work/out.yaml" 2>"$work/err"; then
    fail "$name: render failed: $(cat "$work/err")"
  elif [ "${RENDERER_TEST_UPDATE:-}" = 1 ]; then
    cp "$work/out.yaml" "$expected"
    echo "renderer_test: wrote $expected"
    pass
  elif diff -u "$expected" "$work/out.yaml" >"$work/diff"; then
    pass
  else
    fail "$name: output differs from $expected:"
    cat "$work/diff"
  fi
}

# expect_error NAME MESSAGE RENDER_ARGS...: the render exits 1 and prints
# exactly the one line "render: MESSAGE" on stderr, nothing on stdout.
expect_error() {
  local name="$1" message="$2" rc
  shift 2
  "$render" "$@" >"$work/out.yaml" 2>"$work/err"
  rc=$?
  if [ $rc -eq 1 ] && [ "$(cat "$work/err")" = "render: $message" ] && [ ! -s "$work/out.yaml" ]; then
    pass
  else
    fail "$name: want exit 1 and \"render: $message\", got exit $rc and \"$(cat "$work/err")\""
  fi
}

expect_output "default values" "$data/fixture.expected.yaml" --chart "$data/fixture"
expect_output "values file, --set, release, namespace, notes" \
  "$data/fixture-override.expected.yaml" --chart "$data/fixture" \
  --values "$data/fixture-override.yaml" \
  --set 'greeting=hi there,extraArgs={--a,--b\,c},image.pullPolicy=Always' \
  --set 'port=6543,newKey.sub=0,empty={},leadingZero=007,negative=-3' \
  --release r1 --namespace ns1 --notes

expect_error "required value removed by a null" \
  "execution error at (fixture/templates/z-configmap.yaml:11:15): greeting is required" \
  --chart "$data/fixture" --set greeting=null
expect_error "required value empty" \
  "execution error at (fixture/templates/z-configmap.yaml:11:15): greeting is required" \
  --chart "$data/fixture" --set greeting=
expect_error "--set without a value" '--set port: key "port" has no value' \
  --chart "$data/fixture" --set port
expect_error "--set with an open list" '--set a={x: key "a": a list must be {a,b,...}' \
  --chart "$data/fixture" --set 'a={x'
expect_error "missing values file" \
  "$work/none.yaml: open $work/none.yaml: no such file or directory" \
  --chart "$data/fixture" --values "$work/none.yaml"

# Faults planted in a copy of the fixture (symlinks resolved).
chart="$work/fixture"
plant() { rm -rf "$chart"; cp -rL "$data/fixture" "$chart"; }
plant
printf '{{ .Values.greeting | nosuchfunc }}\n' >"$chart/templates/bad.yaml"
expect_error "unknown function" \
  'parse error at (fixture/templates/bad.yaml:1): function "nosuchfunc" not defined' --chart "$chart"
plant
printf 'a: {{ fail "planted" }}\n' >"$chart/templates/bad.yaml"
expect_error "fail" \
  'template: fixture/templates/bad.yaml:1:6: executing "fixture/templates/bad.yaml" at <fail "planted">: error calling fail: planted' \
  --chart "$chart"
plant
printf 'a: b\n  c: d\n' >"$chart/templates/bad.yaml"
expect_error "a template renders bad YAML" \
  'YAML parse error on fixture/templates/bad.yaml: error converting YAML to JSON: yaml: line 2: mapping values are not allowed in this context' \
  --chart "$chart"
plant
ln -s missing.txt "$chart/files/broken.txt"
expect_error "broken symlink" \
  "error evaluating symlink $chart/files/broken.txt: lstat $chart/files/missing.txt: no such file or directory" \
  --chart "$chart"

echo "renderer_test: $passed passed, $failed failed"
[ $failed -eq 0 ]
