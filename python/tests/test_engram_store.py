"""engram_store against 3 real engram-shard processes (conftest.py): every
byte equal to the table file, the golden hash ids, the GIL released during
a wait, every bad argument refused, and the PyTorch example."""
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import engram_store
import torch_engram_layer as tel
from conftest import EXAMPLES_DIR, GOLDEN_DIR


def expected_rows(table, layer, ids, fmt):
    """What wait/lookup_into must write for `ids` of `layer`, from the file."""
    stored = table.stored_rows(layer, ids)
    if fmt == "raw":
        return stored
    info = table.layers[layer][0]
    dtype = torch.bfloat16 if fmt == "bf16" else torch.float32
    values = tel.dequantize(stored, info["head_dim"], info["scale_block"], dtype)
    return values.view(torch.int16).numpy().view(np.uint16) if fmt == "bf16" else values.numpy()


def out_array(client, layer, B, T, fmt):
    if fmt == "raw":
        return np.zeros((B, T, client.n_cols, client.row_bytes(layer)), np.uint8)
    dtype = np.uint16 if fmt == "bf16" else np.float32
    return np.zeros((B, T, client.n_cols, client.head_dim(layer)), dtype)


def same_bits(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def test_prefetch_wait_every_format_equals_the_table(client, cluster, table):
    B = 3
    rng = np.random.default_rng(5)
    seqs = [client.new_sequence() for _ in range(B)]
    hasher = engram_store.Hasher(cluster.table)
    states = [engram_store.HashState() for _ in range(B)]
    pos, checked = 0, 0
    for T in (7, 1, 1, 1):
        tokens = rng.integers(0, hasher.vocab_size, size=(B, T), dtype=np.int64)
        step = client.prefetch(seqs, pos, tokens)
        ids = engram_store.hash_ids(hasher, tokens, pos, states=states)
        assert np.array_equal(step.row_ids(), ids)
        for layer in range(client.n_layers):
            for fmt in ("raw", "f32", "bf16"):
                out = out_array(client, layer, B, T, fmt)
                address = out.ctypes.data
                assert step.wait(layer, out, format=fmt) is out
                assert out.ctypes.data == address
                assert same_bits(out, expected_rows(table, layer, ids[:, :, layer, :], fmt))
                checked += out.nbytes
        pos += T
    assert all(s.length == pos for s in seqs)
    assert checked > 0


def test_chunked_prefill_prefetches_the_next_chunk_while_one_is_in_flight(client, cluster, table):
    # docs/python.md's chunked prefill: chunk k + 1 is prefetched before
    # chunk k's rows are waited for; every chunk's rows are the table's,
    # hashed from the state the chunk before left.
    B, K, chunks = 2, 5, 3
    rng = np.random.default_rng(9)
    seqs = [client.new_sequence() for _ in range(B)]
    hasher = engram_store.Hasher(cluster.table)
    states = [engram_store.HashState() for _ in range(B)]
    tokens = rng.integers(0, hasher.vocab_size, size=(B, K * chunks), dtype=np.int64)
    chunk = [np.ascontiguousarray(tokens[:, k * K:(k + 1) * K]) for k in range(chunks)]
    step = client.prefetch(seqs, 0, chunk[0])
    for k in range(chunks):
        nxt = client.prefetch(seqs, (k + 1) * K, chunk[k + 1]) if k + 1 < chunks else None
        ids = engram_store.hash_ids(hasher, chunk[k], k * K, states=states)
        assert np.array_equal(step.row_ids(), ids)
        for layer in range(client.n_layers):
            out = out_array(client, layer, B, K, "raw")
            step.wait(layer, out, format="raw")
            assert same_bits(out, expected_rows(table, layer, ids[:, :, layer, :], "raw"))
        step.close()
        step = nxt
    assert all(s.length == K * chunks for s in seqs)


def test_torch_tensors_in_and_out(client, table):
    B, T = 2, 3
    tokens = torch.randint(0, 3000, (B, T), dtype=torch.int64)
    seqs = [client.new_sequence() for _ in range(B)]
    step = client.prefetch(seqs, [0, 0], tokens)
    ids = step.row_ids()
    for layer in range(client.n_layers):
        D = client.head_dim(layer)
        bf = torch.empty((B, T, client.n_cols, D), dtype=torch.bfloat16)
        assert step.wait(layer, bf) is bf
        assert same_bits(bf.view(torch.int16).numpy(),
                         expected_rows(table, layer, ids[:, :, layer, :], "bf16"))
        f = torch.empty((B, T, client.n_cols, D), dtype=torch.float32)
        step.wait(layer, f, format="f32")
        assert same_bits(f.numpy(), expected_rows(table, layer, ids[:, :, layer, :], "f32"))
        raw = torch.empty((B, T, client.n_cols, client.row_bytes(layer)), dtype=torch.uint8)
        step.wait(layer, raw, format="raw")
        assert same_bits(raw.numpy(), expected_rows(table, layer, ids[:, :, layer, :], "raw"))


def test_lookup_into_equals_the_table(client, table):
    rng = np.random.default_rng(9)
    before = client.stats()
    for layer in range(client.n_layers):
        rows = table.layers[layer][0]["rows"]
        ids = rng.integers(0, rows, size=(2, 5, client.n_cols), dtype=np.int64)
        ids[1, 4] = ids[0, 0]  # duplicates are fetched once, written twice
        ids[0, 1, 0] = rows - 1
        out = np.zeros(ids.shape + (client.row_bytes(layer),), np.uint8)
        client.lookup_into(layer, ids, out)
        assert same_bits(out, table.stored_rows(layer, ids))
        bf = np.zeros(ids.shape + (client.head_dim(layer),), np.uint16)
        client.lookup_into(layer, torch.from_numpy(ids), bf, format="bf16")
        assert same_bits(bf, expected_rows(table, layer, ids, "bf16"))
    after = client.stats()
    assert after["ids"] - before["ids"] == 4 * 2 * 5 * client.n_cols
    assert after["steps"] == before["steps"]
    assert after["rows_fetched"] > before["rows_fetched"]


def test_hash_ids_equal_the_golden_vectors():
    files = [f for f in sorted(glob.glob(os.path.join(GOLDEN_DIR, "engram_hash_*.json")))]
    assert files
    checked = 0
    for path in files:
        golden = json.load(open(path))
        hasher = engram_store.Hasher(golden["layout"])
        assert engram_store.Hasher(path).n_cols == hasher.n_cols
        states = None
        for call in golden["calls"]:
            tokens = np.array(call["input_ids"], dtype=np.int64)
            if states is None:
                states = [engram_store.HashState() for _ in range(tokens.shape[0])]
            mask = np.array(call["token_mask"], dtype=bool)
            ids = engram_store.hash_ids(hasher, tokens, call["start_pos"], mask, states=states)
            assert np.array_equal(ids, np.array(call["expected"], dtype=np.int64)), path
            checked += ids.size
    assert checked > 1000


def test_wait_releases_the_gil_on_a_stopped_shard(cluster, client):
    slow = engram_store.Client(cluster.table, cluster.shards, step_deadline=1.0, rpc_deadline=5.0)
    seqs = [slow.new_sequence() for _ in range(8)]
    tokens = np.random.default_rng(1).integers(0, 3000, size=(8, 16), dtype=np.int64)
    # Connected first: the request then sits unanswered on an open row
    # stream, and the step deadline, not a connect, ends the wait.
    slow.prefetch(seqs, 0, tokens).wait(0, out_array(slow, 0, 8, 16, "bf16"))
    count, stop = [0], threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    stopped = cluster.procs[1]
    stopped.send_signal(signal.SIGSTOP)
    try:
        t = threading.Thread(target=spin)
        t.start()
        started = time.monotonic()
        step = slow.prefetch(seqs, 0, tokens)
        at_prefetch = count[0]
        with pytest.raises(engram_store.EngramError) as e:
            step.wait(0, out_array(slow, 0, 8, 16, "bf16"))
        waited = time.monotonic() - started
        during = count[0] - at_prefetch
        stop.set()
        t.join()
    finally:
        stopped.send_signal(signal.SIGCONT)
    assert e.value.code == "DEADLINE_EXCEEDED", e.value
    assert "shard(s) 1" in e.value.message
    assert 0.9 < waited < 3.0
    assert during > 10000, f"the other thread ran {during} iterations during the wait"
    # The shard serves again once continued.
    step = client.prefetch([client.new_sequence()], 0, tokens[:1])
    step.wait(0, out_array(client, 0, 1, 16, "bf16"))


def test_arrived_and_step_lifetime(cluster, table):
    c = engram_store.Client(cluster.table, cluster.shards)
    seqs = [c.new_sequence() for _ in range(2)]
    tokens = np.arange(6, dtype=np.int64).reshape(2, 3)
    step = c.prefetch(seqs, 0, tokens)
    ids = step.row_ids()
    deadline = time.monotonic() + 5
    while not step.arrived(0) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert step.arrived(0)
    del c  # the step keeps its client alive
    out = np.zeros((2, 3, ids.shape[3], table.layers[1][0]["row_bytes"]), np.uint8)
    step.wait(1, out, format="raw")
    assert step.arrived(1)
    assert same_bits(out, table.stored_rows(1, ids[:, :, 1, :]))
    assert step.fetch_latency(1) > 0
    step.close()
    with pytest.raises(ValueError):
        step.wait(1, out, format="raw")
    # Steps dropped with their rows still in flight, and a context manager.
    c = engram_store.Client(cluster.table, cluster.shards)
    for _ in range(20):
        c.prefetch([c.new_sequence()], 0, tokens[:1])
    with c.prefetch(seqs, 0, tokens) as s:
        s.wait(0, np.zeros((2, 3, c.n_cols, c.head_dim(0)), np.uint16))
    assert c.stats()["steps"] == 21


def test_bad_arguments_raise_before_any_work(client, cluster):
    seqs = [client.new_sequence() for _ in range(2)]
    tok = np.ones((2, 3), np.int64)
    step = client.prefetch(seqs, 0, tok)
    D, C, R = client.head_dim(0), client.n_cols, client.row_bytes(0)
    good = np.zeros((2, 3, C, D), np.uint16)
    ro = good.copy()
    ro.setflags(write=False)
    cases = [
        (TypeError, lambda: client.prefetch(seqs, 3, tok.astype(np.float64))),
        (TypeError, lambda: client.prefetch(seqs, 3, tok.astype(np.int32))),
        (ValueError, lambda: client.prefetch(seqs, 3, np.ones(6, np.int64))),
        (ValueError, lambda: client.prefetch(seqs, 3, np.ones((2, 6), np.int64)[:, ::2])),
        (ValueError, lambda: client.prefetch(seqs[:1], 3, tok)),
        (ValueError, lambda: client.prefetch([seqs[0], seqs[0]], 3, tok)),
        (TypeError, lambda: client.prefetch([seqs[0], "x"], 3, tok)),
        (ValueError, lambda: client.prefetch(seqs, [3], tok)),
        (ValueError, lambda: client.prefetch(seqs, 3, tok, mask=np.ones((2, 2), np.uint8))),
        (TypeError, lambda: client.prefetch(seqs, 3, tok, mask=np.ones((2, 3), np.float32))),
        (TypeError, lambda: client.prefetch(seqs, 3, [[1, 2, 3], [4, 5, 6]])),
        (TypeError, lambda: client.prefetch(seqs, 3, torch.ones((2, 3), dtype=torch.int32))),
        (TypeError, lambda: step.wait(0, np.zeros((2, 3, C, D), np.float32))),
        (TypeError, lambda: step.wait(0, np.zeros((2, 3, C, D), np.int16))),
        (TypeError, lambda: step.wait(0, torch.zeros((2, 3, C, D), dtype=torch.float16))),
        (ValueError, lambda: step.wait(0, np.zeros((2, 3, C, D + 1), np.uint16))),
        (ValueError, lambda: step.wait(0, np.zeros((3, 3, C, D), np.uint16))),
        (ValueError, lambda: step.wait(0, np.zeros((2, 3, C * D), np.uint16))),
        (ValueError, lambda: step.wait(0, ro)),
        (ValueError, lambda: step.wait(0, np.zeros((2, 3, C, 2 * D), np.uint16)[..., ::2])),
        (ValueError, lambda: step.wait(0, torch.zeros((2, 3, D, C), dtype=torch.bfloat16).transpose(2, 3))),
        (ValueError, lambda: step.wait(0, good, format="fp16")),
        (ValueError, lambda: step.wait(client.n_layers, good)),
        (ValueError, lambda: step.wait(-1, good)),
        (ValueError, lambda: step.arrived(7)),
        (TypeError, lambda: step.wait(0, None)),
        (TypeError, lambda: client.lookup_into(0, np.zeros((2, C), np.uint8), np.zeros((2, C, R), np.uint8))),
        (ValueError, lambda: client.lookup_into(0, np.zeros((2, C), np.int64), np.zeros((2, C, R + 1), np.uint8))),
        (TypeError, lambda: client.lookup_into(0, np.zeros((2, C), np.int64), np.zeros((2, C, R), np.uint16))),
        (ValueError, lambda: client.lookup_into(9, np.zeros((2, C), np.int64), np.zeros((2, C, R), np.uint8))),
        (TypeError, lambda: engram_store.Client(cluster.table, cluster.shards, no_such_option=1)),
        (TypeError, lambda: engram_store.Client(cluster.table, cluster.shards, rpc_deadline="2s")),
        (ValueError, lambda: engram_store.Client(cluster.table, cluster.shards, transport="udp")),
        (TypeError, lambda: engram_store.hash_ids(3, tok)),
        (ValueError, lambda: engram_store.hash_ids(cluster.table, tok, 5)),
    ]
    for i, (exc, call) in enumerate(cases):
        with pytest.raises(exc):
            call()
            pytest.fail(f"case {i} raised nothing")
    assert [s.length for s in seqs] == [3, 3]  # no failed prefetch advanced a sequence
    assert not good.any()

    # What only the client can check is an EngramError with the status code.
    errors = [
        ("INVALID_ARGUMENT", lambda: client.prefetch(seqs, 3, np.full((2, 3), 10 ** 9, np.int64))),
        ("INVALID_ARGUMENT", lambda: client.prefetch(seqs, 7, tok)),
        ("INVALID_ARGUMENT", lambda: client.lookup_into(0, np.full((1, C), -1, np.int64),
                                                        np.zeros((1, C, R), np.uint8))),
        ("NOT_FOUND", lambda: engram_store.Client(os.path.join(cluster.work, "nope"), cluster.shards)),
        ("INVALID_ARGUMENT", lambda: engram_store.Client(cluster.table, [cluster.addrs, []])),
        ("INVALID_ARGUMENT", lambda: engram_store.Client(cluster.table, cluster.shards, step_deadline=0)),
    ]
    for i, (code, call) in enumerate(errors):
        with pytest.raises(engram_store.EngramError) as e:
            call()
            pytest.fail(f"error case {i} raised nothing")
        assert e.value.code == code, e.value
        assert isinstance(e.value, RuntimeError) and e.value.message
    assert [s.length for s in seqs] == [3, 3]


def test_options_and_stats(client):
    d = engram_store.default_options()
    assert d["rpc_deadline"] == 2.0 and d["step_deadline"] == 5.0
    assert d["max_rows_per_rpc"] == 16384 and d["channels_per_replica"] == 1
    assert d["pipeline_layers"] is True and d["hedge"] is False
    assert d["min_hedge_delay"] == 0.0005 and d["sequence_capacity"] == 65536
    assert d["transport"] == "row_stream" and d["http2_window_bytes"] == 16 << 20
    s = client.stats()
    for key in ("steps", "ids", "unique_rows", "rows_fetched", "bytes_received", "rpcs",
                "shard_rpcs", "failed_rpcs"):
        assert key in s
    assert len(s["shard_rpcs"]) == 3 and s["bytes_received"] > 0


def test_every_default_option_is_a_keyword(cluster):
    opts = {k: v for k, v in engram_store.default_options().items() if k != "shards"}
    c = engram_store.Client(cluster.table, cluster.shards, **opts)
    assert c.n_shards == 3


def test_the_torch_example_reports_no_mismatch(cluster):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.environ.get("ENGRAM_STORE_MODULE_DIR"),
                                                    env.get("PYTHONPATH")] if p)
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES_DIR, "torch_engram_layer.py"),
                        "--table", cluster.table, "--shards", ",".join(cluster.addrs)],
                       capture_output=True, text=True, env=env, timeout=120)
    print(r.stdout, r.stderr)
    assert r.returncode == 0
    last = r.stdout.strip().splitlines()[-1]
    assert last == "torch_engram_layer: 72 positions, 0 mismatches"


def test_threads_share_a_client(client, table):
    """Two threads prefetch and wait on one client at once (the GIL is
    released in both calls); every row is still right."""
    errors = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            seqs = [client.new_sequence() for _ in range(4)]
            for pos in range(10):
                tokens = rng.integers(0, 3000, size=(4, 1), dtype=np.int64)
                step = client.prefetch(seqs, pos, tokens)
                ids = step.row_ids()
                for layer in range(client.n_layers):
                    out = step.wait(layer, out_array(client, layer, 4, 1, "raw"), format="raw")
                    if not same_bits(out, table.stored_rows(layer, ids[:, :, layer, :])):
                        errors.append(f"thread {seed} step {pos} layer {layer}: wrong rows")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
