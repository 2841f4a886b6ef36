#!/usr/bin/env bash
# Builds tests/helm/render into BUILD_DIR/helm-render when its source is newer
# than the binary, offline, from Debian's Go packages (golang-go,
# golang-github-masterminds-sprig-dev, golang-gopkg-yaml.v2-dev), and prints
# the binary's path. Exits 77 (skip) when go is missing, 1 when the build fails.
#
#   bash tests/helm/build_renderer.sh BUILD_DIR
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: build_renderer.sh BUILD_DIR" >&2; exit 2
fi
mkdir -p "$1"
build_dir="$(cd "$1" && pwd)"
source="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/render/main.go"
binary="$build_dir/helm-render"

if ! command -v go >/dev/null 2>&1; then
  echo "skipped: go is not installed (Debian package golang-go)" >&2; exit 77
fi
if [ ! -d /usr/share/gocode/src/github.com/Masterminds/sprig ]; then
  echo "skipped: no Sprig (Debian package golang-github-masterminds-sprig-dev)" >&2; exit 77
fi

if [ ! -x "$binary" ] || [ "$source" -nt "$binary" ]; then
  # GOPATH mode, Debian's sources only: no module proxy, no network. The
  # binary is built beside its final name and moved, so that tests building
  # it at once never run a half-written file.
  if ! env GOPATH="/usr/share/gocode:$build_dir/helm-render.gopath" \
      GOCACHE="$build_dir/helm-render.gocache" GO111MODULE=off GOFLAGS= \
      GOENV=off GOPROXY=off CGO_ENABLED=0 \
      go build -o "$binary.tmp.$$" "$source" >&2; then
    rm -f "$binary.tmp.$$"
    echo "build_renderer: go build of $source failed" >&2; exit 1
  fi
  mv -f "$binary.tmp.$$" "$binary"
fi
echo "$binary"
