#!/usr/bin/env bash
# tests/golden (the copy the tests read) against the workplace's shared
# golden vectors, where those exist beside the repository: every shared file
# must be in the copy, byte for byte. A clone on its own has no shared
# folder: then this test is skipped (exit 77), and the copy is the spec.
#
#   golden_copy_test.sh COPY_DIR SHARED_DIR
set -euo pipefail
copy="$1"; shared="$2"
if [ ! -d "$shared" ]; then
  echo "golden copy: skipped, no $shared beside the repository (the copy in $copy is the spec)"
  exit 77
fi
n=0; bad=0
for f in "$shared"/*; do
  [ -f "$f" ] || continue
  name="$(basename "$f")"; n=$((n + 1))
  if [ ! -f "$copy/$name" ]; then
    echo "golden copy: $name is in $shared but not in $copy; copy it (cp $f $copy/)"; bad=$((bad + 1))
  elif ! cmp -s "$f" "$copy/$name"; then
    echo "golden copy: $copy/$name differs from $f; the shared file is the spec, copy it over"; bad=$((bad + 1))
  fi
done
[ "$n" -gt 0 ] || { echo "golden copy: $shared holds no files"; exit 1; }
echo "golden copy: $n shared files, $bad missing or different"
[ "$bad" -eq 0 ]
