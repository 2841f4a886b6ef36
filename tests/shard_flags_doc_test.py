#!/usr/bin/env python3
"""engram-shard's flags and the table of docs/operating.md list the same flags.

    shard_flags_doc_test.py ENGRAM_SHARD OPERATING_MD

Runs `ENGRAM_SHARD --help`, takes every `  --name=DEFAULT` line, and compares
the names with the first column of the table under "## engram-shard". Each
flag missing from either side is printed; the last line counts them.
"""
import re
import subprocess
import sys


def help_flags(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        sys.exit(f"shard_flags_doc: {binary} --help exited {out.returncode}: {out.stderr.strip()}")
    return {m.group(1) for m in re.finditer(r"^  --([a-z0-9-]+)=", out.stdout, re.M)}


def doc_flags(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    section = re.search(r"^## engram-shard\n(.*?)(?=^## )", text, re.M | re.S)
    if section is None:
        sys.exit(f'shard_flags_doc: {path} has no "## engram-shard" section')
    return {m.group(1) for m in re.finditer(r"^\| `--([a-z0-9-]+)", section.group(1), re.M)}


def main(argv):
    if len(argv) != 3:
        print("usage: shard_flags_doc_test.py ENGRAM_SHARD OPERATING_MD", file=sys.stderr)
        return 2
    in_help, in_doc = help_flags(argv[1]), doc_flags(argv[2])
    if not in_help:
        print("shard_flags_doc: --help listed no flags")
        return 1
    for name in sorted(in_help - in_doc):
        print(f"shard_flags_doc: --{name} is in engram-shard --help but not in {argv[2]}")
    for name in sorted(in_doc - in_help):
        print(f"shard_flags_doc: --{name} is in {argv[2]} but engram-shard has no such flag")
    missing = len(in_help ^ in_doc)
    print(f"shard_flags_doc: {len(in_help)} flags in --help, {len(in_doc)} in the doc, "
          f"{missing} differences")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
