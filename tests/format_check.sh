#!/usr/bin/env bash
# Every C++ file of the tree follows .clang-format (`make format` fixes them).
# Usage: format_check.sh SOURCE_DIR. Exit 77 (skipped) without clang-format.
set -uo pipefail
root="$1"
cd "$root" || exit 1
if ! command -v clang-format >/dev/null 2>&1; then
  echo "format_check: skipped: clang-format is not installed (scripts/setup.sh installs it)"
  exit 77
fi
mapfile -t files < <(find client common proto service shard inference tools bench tests fuzz python \
  \( -name node_modules -o -name golden \) -prune -o \( -name '*.cc' -o -name '*.h' \) \
  -print 2>/dev/null | sort)
bad=0
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "format_check: $f does not follow .clang-format (run: make format)"
    bad=$((bad + 1))
  fi
done
echo "format_check: ${#files[@]} files checked, $bad not formatted"
[ "$bad" -eq 0 ]
