#!/usr/bin/env python3
"""The Python binding's cost: decode steps at B = 64 from Python against the
same loop in C++, in one run, against 3 real engram-shard processes.

    /usr/bin/python3 python/bench_python.py BUILD_DIR [--steps 20] [--rounds 30]

BUILD_DIR holds bin/engram-shard, bin/engramctl and the module (python/,
or set ENGRAM_STORE_MODULE_DIR). A step is what an engine's decode step
does: prefetch of 64 sequences' next token at token time, then a wait of
every Engram layer into preallocated bf16 arrays. The C++ loop
(engram_store._cpp_decode_loop) runs the same steps with the same tokens
through the same client, calling EngramClient directly; the two loops
alternate in rounds so drift of the machine hits both. Printed:

    bench-python: C++ loop ...     median and mean step time
    bench-python: Python loop ...  the same
    bench-python: python overhead: X us/step = R% of the C++ step time (target <= 5%)
    bench-python: binding's own time ...  the Python steps' time outside the
                  EngramClient calls (prefetch, wait, release), measured in
                  the same steps, so network noise cancels
    bench-python: bytes copied beyond the C++ client: ...
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
import tracemalloc

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "tests"))
from cluster import Cluster  # noqa: E402


def say(line):
    print(f"bench-python: {line}", flush=True)


def python_loop(client, tokens, outs):
    B = tokens.shape[1]
    seqs = [client.new_sequence() for _ in range(B)]
    layers = range(client.n_layers)
    seconds = []
    for s in range(tokens.shape[0]):
        t0 = time.perf_counter()
        step = client.prefetch(seqs, s, tokens[s])
        for layer in layers:
            step.wait(layer, outs[layer])
        del step
        seconds.append(time.perf_counter() - t0)
    return seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.environ.get("ENGRAM_STORE_MODULE_DIR", os.path.join(build, "python")))
    import engram_store

    with tempfile.TemporaryDirectory(prefix="bench-python-") as work:
        # Every row in RAM (a budget above the shards' size): the binding's
        # cost is measured against the in-RAM step, not against disk reads.
        cluster = Cluster(work, os.path.join(build, "bin"), vocab=10000,
                          shard_flags=["--ram-budget", "1G"])
        try:
            client = engram_store.Client(cluster.table, cluster.shards)
            B, C = args.batch, client.n_cols
            rng = np.random.default_rng(7)
            vocab = engram_store.Hasher(cluster.table).vocab_size
            outs = [np.zeros((B, 1, C, client.head_dim(l)), np.uint16)
                    for l in range(client.n_layers)]
            addresses = [o.ctypes.data for o in outs]
            tokens = rng.integers(0, vocab, size=(args.steps, B, 1), dtype=np.int64)
            python_loop(client, tokens[:10], outs)  # connections up, pools warm
            engram_store._cpp_decode_loop(client, tokens[:10], outs)
            cpp, py, in_client = [], [], 0.0
            for r in range(args.rounds):
                tokens = rng.integers(0, vocab, size=(args.steps, B, 1), dtype=np.int64)
                order = [("cpp", cpp), ("py", py)] if r % 2 == 0 else [("py", py), ("cpp", cpp)]
                for kind, into in order:
                    if kind == "cpp":
                        into += engram_store._cpp_decode_loop(client, tokens, outs)
                    else:
                        before = engram_store._client_seconds()
                        into += python_loop(client, tokens, outs)
                        in_client += engram_store._client_seconds() - before
            # The Python heap during Python steps: a staging copy of the rows
            # would show as at least one step's rows allocated.
            tracemalloc.start()
            python_loop(client, tokens[:20], outs)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            stats = client.stats()
        finally:
            cluster.stop()

    us = lambda x: x * 1e6
    cpp_med, py_med = statistics.median(cpp), statistics.median(py)
    say(f"B={B} T=1, {client.n_layers} Engram layers x {C} columns, 3 shards on 127.0.0.1, "
        f"{len(cpp)} steps per loop in {args.rounds} alternating rounds")
    say(f"C++ loop: median {us(cpp_med):.1f} us/step, mean {us(statistics.mean(cpp)):.1f}")
    say(f"Python loop: median {us(py_med):.1f} us/step, mean {us(statistics.mean(py)):.1f}")
    say(f"python overhead: {us(py_med - cpp_med):.1f} us/step = "
        f"{100 * (py_med - cpp_med) / cpp_med:.1f}% of the C++ step time (target <= 5%)")
    outside = (sum(py) - in_client) / len(py)
    say(f"binding's own time in the Python steps (outside EngramClient calls): "
        f"{us(outside):.1f} us/step = {100 * outside / statistics.mean(cpp):.2f}% of the C++ step")
    step_bytes = sum(o.nbytes for o in outs)
    moved = [o.ctypes.data for o in outs] != addresses
    say(f"bytes copied beyond the C++ client: 0 (wait wrote {step_bytes} bytes a step into the "
        f"caller's arrays in place: addresses {'CHANGED' if moved else 'unchanged'}; Python heap "
        f"peak over 20 steps {peak} bytes against {step_bytes} bytes of rows a step; "
        f"{stats['bytes_received']} bytes received in all)")
    return 1 if moved or peak >= step_bytes else 0


if __name__ == "__main__":
    sys.exit(main())
