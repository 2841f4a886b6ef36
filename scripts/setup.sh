#!/usr/bin/env bash
# Installs everything engram-store needs to build, test, demo and benchmark.
# Idempotent: when every package is already present, apt is not touched.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev librocksdb-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcivetweb-dev civetweb prometheus-cpp-dev
  nlohmann-json3-dev
  prometheus
  redis-server libhiredis-dev
  liburing-dev libxxhash-dev
  gnuplot-nox
  # scripts/flake_check.sh loads the machine beside the suite.
  stress-ng
  clang-format
  nodejs npm
  # Unicode normalisation for the checkpoint import's token map (shard/import/token_map.h).
  libicu-dev
  # The chart's renderer (tests/helm/render: Go text/template + Sprig) and
  # the tests' Python (chart contract, dashboard against Prometheus).
  golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v2-dev
  python3 python3-yaml
  # make image (scripts/image.sh): buildah, a static shell for the image.
  buildah busybox-static binutils ca-certificates
  # TLS (OpenSSL), and make fuzz (scripts/fuzz.sh): clang with libFuzzer.
  libssl-dev clang libclang-rt-14-dev
  # The Python module (python/, docs/python.md): pybind11, numpy, and for its
  # tests and example pytest and PyTorch (CPU); setuptools/wheel/pip build it
  # offline for `pip install ./python`.
  pybind11-dev python3-pybind11 python3-numpy python3-torch python3-pytest
  python3-setuptools python3-wheel python3-pip
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# The machine may bring its own Node.js outside Debian's packages; that one serves.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  filtered=()
  for p in "${missing[@]}"; do
    [[ "$p" == nodejs || "$p" == npm ]] || filtered+=("$p")
  done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The tokenizer tools (tools/package.json) are installed from the committed lock file.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -f "$here/tools/package-lock.json" ]; then
  if [ ! -d "$here/tools/node_modules" ] || [ "$here/tools/package-lock.json" -nt "$here/tools/node_modules/.package-lock.json" ]; then
    echo "setup: npm ci in tools/"
    (cd "$here/tools" && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi
