"""engram_store on the published V4.1 file families: a fixture of each
(engram-test-fixture: the official checkpoint, llama.cpp-family GGUFs in
ggml block types, split or not, the MXFP4 fork in 12 splits, ds4), imported
into 2 real engram-shard processes; lookup_into and prefetch/wait return the
file's bytes ("raw") and their reference decoding ("f32", and "bf16" its
round to nearest even), and decode_rows is checked on ggml's own output
(the golden gguf_dequant.json)."""
import json
import os
import subprocess

import numpy as np
import pytest

import engram_store
from cluster import Cluster
from conftest import BIN_DIR, GOLDEN_DIR

FAMILIES = [
    ("checkpoint", None, 1, 64),
    ("llama.cpp", "q8_0", 1, 256),
    ("llama.cpp", "q3_k", 3, 256),
    ("llama.cpp", "q2_k", 2, 256),
    ("llama.cpp", "q6_k", 1, 256),
    ("fork", "mxfp4", 12, 256),
    ("ds4", None, 1, 256),
]


def bf16_of(f32):
    """Each f32 rounded to nearest even bf16 (no NaN here)."""
    u = f32.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


@pytest.fixture(scope="module", params=FAMILIES, ids=lambda f: f"{f[0]}-{f[1]}-{f[2]}")
def deployment(request, tmp_path_factory):
    family, encoding, splits, head_dim = request.param
    work = str(tmp_path_factory.mktemp(f"real-{family}"))
    argv = [os.path.join(BIN_DIR, "engram-test-fixture"), "--family", family, "--splits",
            str(splits), "--head-dim", str(head_dim), "--out", os.path.join(work, "fixture")]
    if encoding:
        argv += ["--encoding", encoding]
    flag, path = subprocess.run(argv, check=True, capture_output=True,
                                text=True).stdout.split()
    cluster = Cluster(os.path.join(work, "deploy"), BIN_DIR, source=[flag, path], n_shards=2)
    os.makedirs(cluster.work, exist_ok=True)
    client = engram_store.Client(cluster.table, cluster.shards)
    expected = os.path.join(work, "fixture", "expected")
    yield client, expected, (encoding or "e4m3_e8m0")
    cluster.stop()


def expected_rows(expected, client, layer, ids, fmt):
    if fmt == "raw":
        rb = client.row_bytes(layer)
        raw = np.fromfile(os.path.join(expected, f"layer{layer}.raw"), np.uint8).reshape(-1, rb)
        return raw[ids]
    d = client.head_dim(layer)
    f32 = np.fromfile(os.path.join(expected, f"layer{layer}.f32"), np.float32).reshape(-1, d)[ids]
    return bf16_of(f32) if fmt == "bf16" else f32


def test_lookup_into_and_wait_return_the_files_rows(deployment):
    client, expected, encoding = deployment
    rng = np.random.default_rng(3)
    for layer in range(client.n_layers):
        assert client.encoding(layer) == encoding
        rows = os.path.getsize(os.path.join(expected, f"layer{layer}.raw")) // client.row_bytes(layer)
        ids = rng.integers(0, rows, size=(5, client.n_cols), dtype=np.int64)
        ids[0, 0] = rows - 1
        for fmt, dtype, width in (("raw", np.uint8, client.row_bytes(layer)),
                                  ("f32", np.float32, client.head_dim(layer)),
                                  ("bf16", np.uint16, client.head_dim(layer))):
            out = np.zeros(ids.shape + (width,), dtype)
            client.lookup_into(layer, ids, out, format=fmt)
            want = expected_rows(expected, client, layer, ids, fmt)
            assert out.tobytes() == want.tobytes(), (layer, fmt)
    # prefetch/wait: the hashed rows of a token sequence.
    seqs = [client.new_sequence()]
    tokens = np.array([[3, 4, 5, 6, 7, 8, 9]], np.int64)
    step = client.prefetch(seqs, 0, tokens)
    ids = step.row_ids()
    for layer in range(client.n_layers):
        for fmt, dtype, width in (("raw", np.uint8, client.row_bytes(layer)),
                                  ("f32", np.float32, client.head_dim(layer)),
                                  ("bf16", np.uint16, client.head_dim(layer))):
            out = np.zeros(ids.shape[:2] + (client.n_cols, width), dtype)
            step.wait(layer, out, format=fmt)
            want = expected_rows(expected, client, layer, ids[:, :, layer, :], fmt)
            assert out.tobytes() == want.tobytes(), (layer, fmt)


def test_the_fixtures_decoding_is_ggmls():
    """The expected values above come from the library's decoder, which
    reproduces ggml's reference dequantisation bit for bit on its golden
    rows: checked here through the module."""
    golden = json.load(open(os.path.join(GOLDEN_DIR, "gguf_dequant.json")))
    checked = 0
    for t in golden["types"]:
        for r in t["rows"]:
            raw = np.frombuffer(bytes.fromhex(r["bytes"]), np.uint8)
            got = engram_store.decode_rows(t["name"].lower(), raw, len(r["f32"]))
            want = np.array([float(v) for v in r["f32"]], np.float64).astype(np.float32)
            # Compared as floats, as the golden README says: its text
            # cannot tell -0 from 0; every other value is exact.
            assert np.array_equal(got.reshape(-1), want), t["name"]
            checked += 1
    assert checked > 0
