#!/usr/bin/env python3
"""The layering check: which components each component's C++ sources may include.

    layering_test.py ROOT        check the tree at ROOT (exit 1 on a violation)
    layering_test.py --self-test check that the check catches what it exists for

Components are folders, or the subfolders ALLOWED names on their own
(common/hash, shard/import ...; docs/architecture.md); a file belongs to the
longest one that holds it. An include of another component's header
("shard/row_store.h", or the generated "engram/v1/..." of proto/) is allowed
only along the arrows below, and only of a PUBLIC header when the component
lists them (tests and benchmarks may reach internals); a component may always
include its own headers. client/'s public headers include nothing of ours but
each other. A `testing/` helper folder may be included only from tests
(`*_test.cc`, another `testing/` folder, tests/, bench/ and fuzz/); a test
beside its code may include what tests/ may. Every violation is printed with
its file, line and include; the last line counts them.
"""
import os
import re
import sys
import tempfile

# component -> the components of ours its sources may include from. A
# component is a folder, or a subfolder listed here on its own (common/hash,
# shard/import ...); a file belongs to the longest one that holds it.
COMMON = {"common/util", "common/hash", "common/codec", "common/format", "common/net"}
ALLOWED = {
    "common/util": set(),
    "common/hash": {"common/util"},
    "common/codec": {"common/util"},
    "common/format": {"common/util", "common/hash", "common/codec"},
    "common/net": {"common/util"},
    "common/gen": COMMON,
    "common/testing": COMMON | {"common/gen"},
    "proto": set(),
    "client": COMMON | {"proto"},
    "python": COMMON | {"client"},
    "shard": COMMON,
    "shard/import": COMMON | {"shard"},
    "shard/plan": COMMON | {"shard", "shard/import"},
    "service": COMMON | {"shard", "proto"},
    "inference": COMMON | {"client"},
    "tools": COMMON | {"common/gen", "service", "client", "shard", "shard/import", "shard/plan",
                       "proto", "inference"},
}
EVERYTHING = set(ALLOWED) | {"common/testing"}
for _tests in ("bench", "tests", "fuzz"):
    ALLOWED[_tests] = EVERYTHING - {"tools"}
OURS = {name.split("/")[0] for name in ALLOWED}
# The public headers of the components a worker (client/) and an operator's
# tooling (engramctl: the store, import, planning, the server) build on: a
# source outside the component, tests and benchmarks aside, may include only
# these. A component not listed here makes all its headers public.
PUBLIC = {
    "client": {"client/engram_client.h", "client/engram_types.h"},
    "shard": {"shard/admission_cache.h", "shard/footprint.h", "shard/hot_tier.h",
              "shard/row_store.h", "shard/shard_format.h", "shard/verify.h"},
    "shard/import": {"shard/import/importer.h", "shard/import/row_source.h",
                     "shard/import/gguf.h"},
    "shard/plan": {"shard/plan/placement.h", "shard/plan/tier_plan.h", "shard/plan/tier_replay.h"},
    "service": {"service/shard_server.h", "service/auth.h"},
}
# Components whose public headers are self-contained: they include no header
# of ours but each other (a worker's build needs nothing of common/).
SELF_CONTAINED = {"client"}

# Include prefixes that are not folder names: generated code of a folder.
ALIASES = {"engram": "proto"}  # engram/v1/engram_store.pb.h, from proto/
SOURCE_SUFFIXES = (".h", ".hh", ".hpp", ".cc", ".cpp", ".c")
SKIP_DIRS = {".git", "node_modules", "build", "golden"}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')


def is_test_source(rel):
    parts = rel.split("/")
    return (parts[0] in ("tests", "bench", "fuzz") or "testing" in parts[1:-1]
            or parts[-1].endswith("_test.cc"))


def component(path):
    """The component (a key of ALLOWED) that holds PATH, or None."""
    parts = path.split("/")
    for n in range(len(parts) - 1, 0, -1):
        name = "/".join(parts[:n])
        if name in ALLOWED:
            return name
    return None


def check_file(root, rel):
    """Yields one message per bad include of ROOT/REL."""
    folder = component(rel)
    # A test beside its code may use what tests/ may: real servers, importers.
    allowed = ALLOWED["tests"] if is_test_source(rel) else ALLOWED[folder]
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            path = m.group(1)
            parts = path.split("/")
            if len(parts) < 2:
                continue
            if parts[0] in ALIASES:
                target = ALIASES[parts[0]]
            else:
                target = component(path)
            if target is None:
                if parts[0] in OURS:
                    yield (f'{rel}:{n} includes "{path}": no component of '
                           "tests/layering_test.py holds it")
                continue  # not ours: absl/, grpcpp/, rocksdb/, gtest/ ...
            if (folder in SELF_CONTAINED and rel in PUBLIC[folder]
                    and path not in PUBLIC[folder]):
                yield (f'{rel}:{n} includes "{path}": a public header of {folder}/ '
                       f"includes only {folder}/'s other public headers "
                       "(tests/layering_test.py PUBLIC)")
            elif target != folder and target not in allowed:
                may = (f"only {', '.join(sorted(allowed))}" if allowed
                       else "nothing of ours but its own headers")
                yield (f'{rel}:{n} includes "{path}": {folder}/ may include '
                       f"{may} (docs/architecture.md)")
            elif (target != folder and target in PUBLIC and path not in PUBLIC[target]
                  and not is_test_source(rel)):
                yield (f'{rel}:{n} includes "{path}": not a public header of {target}/ '
                       f"(public: {', '.join(sorted(PUBLIC[target]))})")
            elif "testing" in parts[1:-1] and not is_test_source(rel):
                yield (f'{rel}:{n} includes "{path}": a testing/ helper, '
                       f"which only tests and benchmarks may include")


def check_tree(root):
    """Returns (files checked, messages)."""
    messages, checked = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")
                             and not d.startswith("build-"))  # build-fuzz/, build-asan/ ...
        for name in sorted(filenames):
            if not name.endswith(SOURCE_SUFFIXES):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            folder = rel.split("/")[0]
            if "/" not in rel or folder == "examples":
                continue
            if component(rel) is None:
                messages.append(f"{rel}: C++ source in {folder}/, a folder the layering "
                                "table of tests/layering_test.py does not list; add it there "
                                "and to docs/architecture.md")
                continue
            checked += 1
            messages.extend(check_file(root, rel))
    return checked, messages


def self_test():
    """The five cross-folder includes the layout removed, and a testing/
    helper in a daemon, must each be reported; a clean tree must not."""
    bad = {
        "client/a.cc": '#include "service/wire.h"',
        "client/b.cc": '#include "service/stream_wire.h"',
        "client/c.cc": '#include "shard/shard_map.h"',
        "client/d.cc": '#include "shard/hot_profile.h"',
        "shard/e.cc": '#include "client/engram_hash.h"',
        "service/main.cc": '#include "service/testing/server_test_util.h"',
        "common/util/f.h": '#include "engram/v1/engram_store.pb.h"',
        "common/hash/l.cc": '#include "common/format/table.h"',
        "shard/m.cc": '#include "shard/import/importer.h"',
        "shard/import/n.cc": '#include "common/table.h"',
        "bench/o.cc": '#include "tools/demo/inference_loop.h"',
        "tools/q.cc": '#include "client/step_engine.h"',
        "client/engram_client.h": '#include "common/hash/layout.h"',
    }
    good = {
        "client/g.cc": '#include "client/x.h"\n#include "common/util/y.h"\n#include "proto/wire.h"\n'
                       '#include "engram/v1/engram_store.grpc.pb.h"\n#include "absl/status/status.h"',
        "service/h_test.cc": '#include "service/testing/server_test_util.h"\n#include "shard/row_store.h"',
        "shard/p_test.cc": '#include "shard/import/importer.h"\n#include "shard/import/testing/gguf_writer.h"',
        "tests/r_test.cc": '#include "client/step_engine.h"',
        "tools/s.cc": '#include "client/engram_client.h"\n#include "shard/import/importer.h"',
        "tests/i_test.cc": '#include "client/engram_client.h"\n#include "common/testing/test_files.h"',
        "bench/j.cc": '#include "inference/inference_loop.h"',
        "fuzz/k_fuzz.cc": '#include "shard/import/gguf.h"\n#include "shard/import/testing/gguf_writer.h"\n'
                          '#include "fuzz/fuzz_util.h"',
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in {**bad, **good}.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text + "\n")
        checked, messages = check_tree(root)
    for m in messages:
        print(f"layering self-test: reported {m}")
    failures = []
    for rel in bad:
        if not any(m.startswith(rel + ":") for m in messages):
            failures.append(f"{rel} ({bad[rel]}) was not reported")
    for rel in good:
        if any(m.startswith(rel + ":") for m in messages):
            failures.append(f"{rel} was reported but is allowed")
    for f in failures:
        print(f"layering self-test: FAIL {f}")
    print(f"layering self-test: {len(bad)} bad includes, {len(bad) - sum('was not' in f for f in failures)} "
          f"reported; {len(good)} allowed files, {sum('is allowed' in f for f in failures)} reported")
    return 1 if failures else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print("usage: layering_test.py ROOT | --self-test", file=sys.stderr)
        return 2
    checked, messages = check_tree(argv[1])
    for m in messages:
        print(f"layering: {m}")
    print(f"layering: {checked} files checked, {len(messages)} violations")
    return 1 if messages else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
