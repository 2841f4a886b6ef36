#!/usr/bin/env python3
"""Writes a hash golden file of any geometry with an independent implementation
of the rule in tests/golden/README.md (Python integers, explicit int64
wrap-around), so engramctl hash-check is tested beyond the shipped goldens.

usage: make_hash_golden.py OUT.json [--vocab V] [--layers L] [--max-ngram N]
                           [--heads H] [--seed S]
"""
import argparse
import json
import random


def wrap64(x):
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x


def is_prime(n):
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, default=777)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--max-ngram", type=int, default=3)
    ap.add_argument("--heads", type=int, default=5)
    ap.add_argument("--seed", type=int, default=11)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    V, L, N, H = a.vocab, a.layers, a.max_ngram, a.heads
    compressed = max(2, V * 3 // 4)
    token_map = [rng.randrange(compressed) for _ in range(V)]
    pad = token_map[min(2, V - 1)]
    # Overflowing multipliers, positive and negative.
    mults = [[rng.randrange(-(1 << 63), 1 << 63) for _ in range(N)] for _ in range(L)]
    primes, offsets, rows = [], [], []
    used = set()
    for _ in range(L):
        lp = []
        for _ in range(N - 1):
            start = rng.randrange(50, 400)
            hp = []
            for _ in range(H):
                c = start + 1
                while not is_prime(c) or c in used:
                    c += 1
                used.add(c)
                hp.append(c)
                start = c
            lp.append(hp)
        flat = [p for o in lp for p in o]
        offs, acc = [], 0
        for p in flat:
            offs.append(acc)
            acc += p
        primes.append(lp)
        offsets.append(offs)
        rows.append(acc)
    layout = dict(vocab_size=V, engram_layer_ids=list(range(1, 1 + 7 * L, 7)),
                  max_ngram_size=N, n_heads=H, pad_id=pad, dead_id=-1,
                  token_map=token_map, multipliers=mults, primes=primes,
                  offsets=offsets, table_rows=rows)

    B = 2
    caches = [[] for _ in range(B)]
    calls = []
    plan = [(0, 9), (9, 1), (10, 1), (11, 4), (0, 5), (5, 1)]
    for start, T in plan:
        ids = [[rng.randrange(V) for _ in range(T)] for _ in range(B)]
        mask = [[rng.random() > 0.15 for _ in range(T)] for _ in range(B)]
        expected = []
        for b in range(B):
            c = caches[b]
            del c[start:]
            for t in range(T):
                c.append(token_map[ids[b][t]] if mask[b][t] else -1)
            eb = []
            for t in range(T):
                p = start + t
                toks, dead = [], False
                for s in range(N):
                    if not dead and (p < s or c[max(p - s, 0)] == -1):
                        dead = True
                    toks.append(pad if dead else c[p - s])
                el = []
                for l in range(L):
                    prod = [wrap64(toks[s] * mults[l][s]) for s in range(N)]
                    rolling = prod[0]
                    cols = []
                    for i in range(1, N):
                        rolling = wrap64(rolling ^ prod[i])
                        for h in range(H):
                            cols.append(rolling % primes[l][i - 1][h] + offsets[l][(i - 1) * H + h])
                    el.append(cols)
                eb.append(el)
            expected.append(eb)
        calls.append(dict(start_pos=start, input_ids=ids, token_mask=mask, expected=expected))
    with open(a.out, "w") as f:
        json.dump(dict(layout=layout, calls=calls), f)


if __name__ == "__main__":
    main()
