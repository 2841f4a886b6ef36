#!/usr/bin/env bash
# The container image against the Helm chart, without a container runtime:
#
#   bash tests/image/image_test.sh BUILD_DIR
#
# 1. `make image`'s script (scripts/image.sh) builds the image and writes its
#    OCI archive; image_contract.py unpacks the archive and checks its config
#    (user, entrypoint, ports, workdir) against the chart and the Dockerfile.
# 2. In the unpacked root file system, as the image's user (chroot), the
#    chart's rendered init container script imports a shard (and, run again,
#    keeps it and frees an older version's directory), then engram-shard runs
#    with the chart's rendered arguments in a network namespace of its own
#    (the chart's fixed ports), and from this machine's engramctl:
#    `info` shows the advertised row stream port is the chart's, a `lookup`
#    is answered over the row stream with rows equal to the table file's,
#    /metrics is on the chart's metrics port, and SIGTERM exits 0.
# Exits 77 (skip) when not root or buildah, unshare or the renderer is
# missing; the last line is "image_test: passed" or "image_test: FAILED: ...".
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: image_test.sh BUILD_DIR" >&2; exit 2
fi
build="$(cd "$1" && pwd)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
skip() { echo "image_test: skipped: $*"; exit 77; }
fail() { echo "image_test: FAILED: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "not root (buildah's storage and chroot need root)"
command -v buildah >/dev/null || skip "buildah is not installed (Debian package buildah)"
command -v unshare >/dev/null || skip "unshare is missing (util-linux)"
python=/usr/bin/python3
[ -x "$python" ] || python=python3
"$python" -c 'import yaml' 2>/dev/null || skip "no Python yaml module (Debian package python3-yaml)"
render="$(bash "$repo/tests/helm/build_renderer.sh" "$build" 2>/dev/null)"
case $? in 0) ;; 77) skip "the chart renderer cannot be built (go)" ;; *) fail "the chart renderer does not build" ;; esac

work="$(mktemp -d)"
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$work"' EXIT

# 1. Build, unpack, check the config.
ENGRAM_IMAGE_ARCHIVE=oci bash "$repo/scripts/image.sh" "$build" >"$work/image.log" 2>&1 ||
  fail "scripts/image.sh: $(tail -1 "$work/image.log")"
echo "image_test: $(tail -1 "$work/image.log")"
tag="$(sed -n 's/^appVersion:[[:space:]]*"\{0,1\}\([^"[:space:]]*\).*/\1/p' "$repo/helm/engram-store/Chart.yaml")"
archive="$build/image/engram-store-$tag.oci.tar"
chart="$repo/helm/engram-store"
"$render" --chart "$chart" --release engram-store --namespace engram >"$work/default.yaml" ||
  fail "the chart does not render"
"$python" "$here/image_contract.py" "$archive" "$work" "$repo" "$work/default.yaml" >"$work/contract.log"
rc=$?
sed '$d' "$work/contract.log"
[ $rc -eq 0 ] || fail "$(tail -1 "$work/contract.log")"
echo "image_test: $(tail -1 "$work/contract.log")"
rootfs="$work/rootfs"

# 2. One shard of one (it holds every row, so a lookup needs no other
#    server) with the table on the chart's source volume path.
"$render" --chart "$chart" --release engram-store --namespace engram \
  --set shards=1,replicasPerShard=1 >"$work/one.yaml" || fail "the chart does not render with shards=1"
"$python" - "$work/one.yaml" "$work" <<'PY' || fail "no StatefulSet in the rendering"
import sys, yaml
sts = [o for o in yaml.safe_load_all(open(sys.argv[1])) if o and o["kind"] == "StatefulSet"][0]
pod = sts["spec"]["template"]["spec"]
init = [c for c in pod["initContainers"] if c["name"] == "import"][0]
open(sys.argv[2] + "/import.sh", "w").write(init["args"][0])
open(sys.argv[2] + "/args", "w").write("\n".join(pod["containers"][0]["args"]) + "\n")
PY
"$build/bin/engramctl" gen-table --out "$rootfs/table" --preset small --engram-vocab-size 400 --seed 3 >/dev/null ||
  fail "engramctl gen-table"
mkdir "$rootfs/data/v0" && chown -R 10001:10001 "$rootfs/data"
in_image() { chroot --userspec=10001:10001 "$rootfs" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/data "$@"; }
in_image /bin/sh -ec "$(cat "$work/import.sh")" >"$work/import.log" 2>&1 ||
  fail "the init container's script failed in the image: $(tail -1 "$work/import.log")"
[ -f "$rootfs/data/v1/shard.json" ] || fail "the init container's script left no /data/v1/shard.json"
grep -q "removing /data/v0" "$work/import.log" && [ ! -e "$rootfs/data/v0" ] ||
  fail "the init container's script did not free /data/v0 (another table version)"
before="$(stat -c %Y "$rootfs/data/v1/shard.json")"
in_image /bin/sh -ec "$(cat "$work/import.sh")" >"$work/import2.log" 2>&1 ||
  fail "the init container's script failed on an imported shard: $(tail -1 "$work/import2.log")"
[ "$(stat -c %Y "$rootfs/data/v1/shard.json")" = "$before" ] && ! grep -q . "$work/import2.log" ||
  fail "the init container's script touched an imported shard: $(cat "$work/import2.log")"
echo "image_test: the chart's init container imported shard 0 of 1 in the image, kept it on a rerun, freed /data/v0"

export ROOTFS="$rootfs" WORK="$work" BIN="$build/bin" REPO="$repo" PYTHON="$python"
unshare --net bash "$here/serve_in_image.sh" || fail "$(tail -1 "$work/serve.log" 2>/dev/null)"
echo "image_test: passed"
