#!/usr/bin/env python3
"""An Engram layer in PyTorch whose rows come from engram-store shards.

    torch_engram_layer.py --table DIR --shards HOST:PORT,HOST:PORT,HOST:PORT
                          [--batch 4] [--prefill 12] [--decode 6] [--seed 1]

The layer computes what the reference Engram layer computes: hash the
sequence's n-grams into row ids (engram_store.hash_ids, bit-exact), gather
the rows, dequantise them from fp8 (e4m3 codes, e8m0 block scales) to
bf16, and mix them into the hidden state (a fixed random projection and
gate standing in for the trained weights).

Two copies of the layer run side by side over a prefill and decode steps:

  served: at token time `client.prefetch(...)` hashes the step's tokens and
          sends the lookups; `forward` calls `step.wait(layer, out)`, which
          writes the rows, dequantised to bf16 by the client, into a
          preallocated torch.bfloat16 tensor;
  file:   the same layer reading the table file (rows.safetensors, see
          docs/table-format.md) directly: hash_ids, then a torch gather of
          the e4m3 and e8m0 tensors and the dequantisation in torch.

Every position's gathered rows and layer output must be equal bit for bit.
The last line is
    torch_engram_layer: N positions, M mismatches
and the exit status is 1 when M > 0. docs/python.md explains where the
prefetch and the wait go in an engine's decode step.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

import engram_store


# --- The table file, read directly (docs/table-format.md) ----------------

class TableFile:
    """The rows of a table directory: per Engram layer the e4m3 weight
    tensor [rows, head_dim] and the e8m0 scale tensor [rows, head_dim /
    scale_block] of rows.safetensors, memory-mapped (nothing is copied until
    rows are gathered)."""

    def __init__(self, table_dir):
        with open(os.path.join(table_dir, "manifest.json")) as f:
            self.manifest = json.load(f)
        path = os.path.join(table_dir, self.manifest.get("rows_file", "rows.safetensors"))
        with open(path, "rb") as f:
            header_len = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(header_len))
        data_start = 8 + header_len
        self.layers = []
        for info in self.manifest["layers"]:
            tensors = []
            for name in (info["weight_tensor"], info["scale_tensor"]):
                t = header[name]
                begin, end = t["data_offsets"]
                tensors.append(np.memmap(path, dtype=np.uint8, mode="r", offset=data_start + begin,
                                         shape=tuple(t["shape"])))
                assert end - begin == int(np.prod(t["shape"])), name
            self.layers.append((info, tensors[0], tensors[1]))

    def stored_rows(self, layer, ids):
        """The stored rows (e4m3 codes, then e8m0 scales) of `ids` (any
        shape), as uint8[*ids.shape, row_bytes]."""
        _, weight, scale = self.layers[layer]
        flat = np.asarray(ids, dtype=np.int64).reshape(-1)
        rows = np.concatenate([weight[flat], scale[flat]], axis=1)
        return rows.reshape(*np.shape(ids), rows.shape[1])


def e4m3_table():
    """float32[256]: the value of each e4m3fn code (common/codec/fp8.h: no
    infinities, 0x7F/0xFF NaN, 0x80 decodes to +0.0)."""
    values = []
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exp, man = (code >> 3) & 0xF, code & 7
        if exp == 15 and man == 7:
            values.append(float("nan"))
        elif code == 0x80:
            values.append(0.0)
        elif exp == 0:
            values.append(sign * man / 8.0 * 2.0 ** -6)
        else:
            values.append(sign * (1.0 + man / 8.0) * 2.0 ** (exp - 7))
    return torch.tensor(values, dtype=torch.float32)


E4M3 = e4m3_table()


def dequantize(rows, head_dim, scale_block, dtype=torch.bfloat16):
    """uint8[..., row_bytes] stored rows -> [..., head_dim] values in torch:
    e4m3(code[j]) * 2^(scale[j / scale_block] - 127), rounded from float32
    to `dtype` (round to nearest even for bf16)."""
    rows = torch.as_tensor(np.ascontiguousarray(rows))
    codes = rows[..., :head_dim].long()
    exps = rows[..., head_dim:].to(torch.float32) - 127.0
    scale = torch.exp2(exps).repeat_interleave(scale_block, dim=-1)
    return (E4M3[codes] * scale).to(dtype)


# --- The layer ------------------------------------------------------------

class EngramLayer(torch.nn.Module):
    """One Engram layer: rows of its table for every (position, column),
    dequantised to bf16, projected to the hidden size and gated into the
    residual stream. `rows_for(...)` supplies the bf16 rows [B, T, n_cols,
    head_dim]: from the shards (ServedRows) or the file (FileRows)."""

    def __init__(self, layer, n_cols, head_dim, hidden, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed + layer)
        self.layer = layer
        self.proj = torch.randn(n_cols * head_dim, hidden, generator=g) / (n_cols * head_dim) ** 0.5
        self.gate = torch.randn(hidden, generator=g) / hidden ** 0.5

    def forward(self, hidden, rows):
        emb = rows.flatten(2).to(torch.float32)  # [B, T, n_cols * head_dim]
        gate = torch.sigmoid(hidden @ self.gate).unsqueeze(-1)
        return hidden + gate * (emb @ self.proj)


class ServedRows:
    """Rows through engram_store: prefetch at token time, wait in forward,
    into one preallocated bf16 tensor per layer (pinned where CUDA is, so a
    copy to the GPU can be asynchronous)."""

    def __init__(self, client, batch):
        self.client = client
        self.seqs = [client.new_sequence() for _ in range(batch)]
        self.step = None
        self.out = {}

    def token_time(self, start_pos, tokens):
        self.step = self.client.prefetch(self.seqs, start_pos, tokens)

    def rows_for(self, layer, B, T):
        out = self.out.get((layer, T))
        if out is None:
            shape = (B, T, self.client.n_cols, self.client.head_dim(layer))
            out = torch.empty(shape, dtype=torch.bfloat16, pin_memory=torch.cuda.is_available())
            self.out[(layer, T)] = out
        return self.step.wait(layer, out, format="bf16")


class FileRows:
    """The same rows from the table file: hash_ids, gather, dequantise."""

    def __init__(self, table_dir, batch):
        self.table = TableFile(table_dir)
        self.hasher = engram_store.Hasher(table_dir)
        self.states = [engram_store.HashState() for _ in range(batch)]
        self.ids = None

    def token_time(self, start_pos, tokens):
        self.ids = engram_store.hash_ids(self.hasher, tokens, start_pos, states=self.states)

    def rows_for(self, layer, B, T):
        info = self.table.layers[layer][0]
        stored = self.table.stored_rows(layer, self.ids[:, :, layer, :])
        return dequantize(stored, info["head_dim"], info["scale_block"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", required=True)
    ap.add_argument("--shards", required=True, help="host:port per shard, ',' between shards")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--prefill", type=int, default=12)
    ap.add_argument("--decode", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    client = engram_store.Client(args.table, args.shards)
    served = ServedRows(client, args.batch)
    direct = FileRows(args.table, args.batch)
    layers = [EngramLayer(l, client.n_cols, client.head_dim(l), args.hidden, args.seed)
              for l in range(client.n_layers)]
    rng = np.random.default_rng(args.seed)
    vocab = direct.hasher.vocab_size

    positions = mismatches = 0
    pos = 0
    for T in [args.prefill] + [1] * args.decode:
        tokens = rng.integers(0, vocab, size=(args.batch, T), dtype=np.int64)
        served.token_time(pos, tokens)  # token time: the lookups go out now
        direct.token_time(pos, tokens)
        hidden = torch.from_numpy(rng.standard_normal((args.batch, T, args.hidden),
                                                      dtype=np.float32))
        h_served, h_file = hidden, hidden
        bad = torch.zeros(args.batch, T, dtype=torch.bool)
        for layer in layers:  # the model's blocks; each Engram layer waits for its rows
            r_served = served.rows_for(layer.layer, args.batch, T)
            r_file = direct.rows_for(layer.layer, args.batch, T)
            bad |= (r_served.view(torch.int16) != r_file.view(torch.int16)).flatten(2).any(-1)
            h_served = layer(h_served, r_served)
            h_file = layer(h_file, r_file)
        bad |= (h_served.view(torch.int32) != h_file.view(torch.int32)).any(-1)
        positions += args.batch * T
        mismatches += int(bad.sum())
        pos += T
    stats = client.stats()
    print(f"torch_engram_layer: {client.n_layers} Engram layers, {stats['steps']} steps, "
          f"{stats['rows_fetched']} rows fetched from {client.n_shards} shards")
    print(f"torch_engram_layer: {positions} positions, {mismatches} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
