#!/usr/bin/env python3
"""Checks `engramctl lookup --json` output against a table's safetensors file
with an independent fp8 decoder: every value must equal
e4m3(code) * 2^(scale - 127) exactly (as float32).

usage: check_lookup_json.py TABLE_DIR ROWS.json N_POSITIONS N_SHARDS
"""
import json
import struct
import sys


def e4m3(code):
    s = -1.0 if code & 0x80 else 1.0
    e = (code >> 3) & 0xF
    m = code & 0x7
    if e == 0xF and m == 0x7:
        return float("nan")
    if e == 0:
        return s * (m / 8.0) * 2.0 ** -6
    return s * (1 + m / 8.0) * 2.0 ** (e - 7)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    table, rows_json, n_pos, n_shards = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    manifest = json.load(open(f"{table}/manifest.json"))
    data = open(f"{table}/{manifest['rows_file']}", "rb").read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen])
    base = 8 + hlen
    rows = json.load(open(rows_json))
    layers = manifest["layers"]
    cols = len(manifest["layout"]["offsets"][0])
    assert len(rows) == n_pos * len(layers) * cols, len(rows)
    seen = set()
    for r in rows:
        layer = layers[r["layer"]]
        hd, sb, row = layer["head_dim"], layer["scale_block"], r["row_id"]
        assert r["shard"] == row % n_shards, r
        assert 0 <= row < layer["rows"], r
        w = header[layer["weight_tensor"]]["data_offsets"][0] + base + row * hd
        s = header[layer["scale_tensor"]]["data_offsets"][0] + base + row * (hd // sb)
        want = [e4m3(data[w + j]) * 2.0 ** (data[s + j // sb] - 127) for j in range(hd)]
        # The tool prints the shortest text that reads back as the same
        # float32, so compare after rounding the text to float32.
        got = [f32(v) for v in r["values"]]
        assert got == want, (r["pos"], r["layer"], r["col"], row, got[:4], want[:4])
        seen.add((r["pos"], r["layer"], r["col"]))
    assert len(seen) == len(rows)
    print(f"check_lookup_json: {len(rows)} rows match {table}")


if __name__ == "__main__":
    main()
