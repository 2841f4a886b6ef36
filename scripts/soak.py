#!/usr/bin/env python3
"""make soak: mixed load against 3 shards for a long run, with a table
version switch in the middle.

    scripts/soak.py BUILD_DIR [--minutes 10]

On 127.0.0.1: versions 1 and 2 of a synthetic table (same geometry, other
rows), each imported into 3 shard directories side by side (shard-I/v1,
shard-I/v2), 3 engram-shard processes serving version 1 with a RAM budget of
a quarter of their rows (the rest from RocksDB). Two engram-fault-driver
processes run decode steps the whole time (8 sequences at 40 steps/s and 32
at 10 steps/s), every row of every step compared with the table file. At
half time the drivers stop, `engramctl activate --to-version 2` switches
the shards, and the drivers go on against version 2. Every 5 s the shards'
RSS is read from /proc.

Passes when no step failed, no row was wrong, and each shard's RSS (its
anonymous memory: heap, hot tier, buffers; the file-backed pages of mapped
table files are the kernel's to keep or drop, and are shown beside it)
stayed within 5% of its median over the run (the first minute of each half,
while hot tiers and caches warm, left out). The last line is
    soak: S steps, 0 errors, 0 wrong rows, RSS within ±P% of each shard's median
or `soak: FAILED: ...`.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

SHARDS = 3
DRIVERS = [  # (batch, steps per second)
    (8, 40.0),
    (32, 10.0),
]
RSS_BOUND = 0.05
WARMUP = 60.0  # seconds of each half left out of the RSS bound


def say(line):
    print(f"soak: {line}", flush=True)


def run(argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} exited {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
    return r.stdout


def rss_bytes(pid):
    """(anonymous, file-backed) resident bytes of a process."""
    with open(f"/proc/{pid}/status") as f:
        status = f.read()
    out = []
    for field in ("RssAnon", "RssFile"):
        m = re.search(rf"^{field}:\s+(\d+) kB", status, re.M)
        out.append(int(m.group(1)) * 1024 if m else 0)
    return tuple(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", 10)))
    args = ap.parse_args()
    bin_dir = os.path.join(os.path.abspath(args.build), "bin")
    work = os.path.join(os.path.abspath(args.build), "soak")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ctl = os.path.join(bin_dir, "engramctl")
    half = args.minutes * 60 / 2

    for v, seed in ((1, 11), (2, 12)):
        run([ctl, "gen-table", "--preset", "small", "--engram-vocab-size", "4000", "--seed", str(seed),
             "--table-version", str(v), "--out", f"{work}/table-v{v}"])
        for i in range(SHARDS):
            os.makedirs(f"{work}/shard-{i}", exist_ok=True)
            run([ctl, "import", "--table", f"{work}/table-v{v}", "--shards", str(SHARDS),
                 "--shard-index", str(i), "--out", f"{work}/shard-{i}/v{v}"])
    rows = os.path.getsize(f"{work}/table-v1/rows.safetensors")
    budget = rows // SHARDS // 4

    procs, shard_pids, addrs = [], [], []

    def stop_all():
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()

    try:
        for i in range(SHARDS):
            out = open(f"{work}/shard-{i}.out", "w")
            p = subprocess.Popen([os.path.join(bin_dir, "engram-shard"), "--db", f"{work}/shard-{i}/v1",
                                  "--listen", "127.0.0.1:0", "--ram-budget", str(budget)],
                                 stdout=out, stderr=open(f"{work}/shard-{i}.err", "w"))
            procs.append(p)
            shard_pids.append(p.pid)
            for _ in range(600):
                m = re.search(r"serving shard .* on (\S+) ", open(f"{work}/shard-{i}.out").read())
                if m:
                    addrs.append(m.group(1))
                    break
                if p.poll() is not None:
                    raise RuntimeError(f"engram-shard {i} exited: {open(f'{work}/shard-{i}.err').read()[-300:]}")
                time.sleep(0.1)
            else:
                raise RuntimeError(f"engram-shard {i} did not start")
        say(f"3 shards of version 1 on {', '.join(addrs)}, hot tier {budget} bytes each")

        samples = []  # (t, [rss per shard])
        start = time.time()

        def drive(version, seconds, tag):
            drivers = []
            for k, (batch, rate) in enumerate(DRIVERS):
                drivers.append(subprocess.Popen(
                    [os.path.join(bin_dir, "engram-fault-driver"),
                     "--table", f"{work}/table-v{version}",
                     "--shard-map", f"{work}/shard-0/v{version}/shard_map.json",
                     "--shards", ",".join(addrs), "--batch", str(batch),
                     "--steps-per-second", str(rate), "--seconds", str(seconds),
                     "--rpc-deadline", "2s", "--hang-limit", "120s", "--seed", str(version * 10 + k),
                     "--out", f"{work}/steps-{tag}-{k}.jsonl"],
                    stdout=subprocess.DEVNULL, stderr=open(f"{work}/driver-{tag}-{k}.err", "w")))
            while any(d.poll() is None for d in drivers):
                samples.append((time.time() - start, [rss_bytes(pid) for pid in shard_pids]))
                time.sleep(5)
            for k, d in enumerate(drivers):
                if d.returncode not in (0,):
                    raise RuntimeError(f"driver {tag}-{k} exited {d.returncode}: "
                                       f"{open(f'{work}/driver-{tag}-{k}.err').read()[-300:]}")

        drive(1, half, "v1")
        switch_at = time.time() - start
        out = run([ctl, "activate", "--shards", ",".join(addrs), "--to-version", "2", "--timeout", "120s"])
        for line in out.strip().splitlines():
            say(f"activate: {line}")
        drive(2, half, "v2")
        end = time.time() - start
    finally:
        stop_all()

    steps = errors = wrong = 0
    first_error = ""
    for name in sorted(os.listdir(work)):
        if not name.startswith("steps-"):
            continue
        for line in open(os.path.join(work, name)):
            rec = json.loads(line)
            if "step" not in rec:
                continue
            steps += 1
            wrong += rec.get("wrong_rows", 0)
            if rec.get("status") != "OK":
                errors += 1
                first_error = first_error or rec.get("error", "")
    problems = []
    if steps == 0:
        problems.append("no steps ran")
    if errors:
        problems.append(f"{errors} steps failed (first: {first_error[:200]})")
    if wrong:
        problems.append(f"{wrong} wrong rows")

    with open(f"{work}/rss.jsonl", "w") as f:  # the samples, for a closer look
        for t, s in samples:
            f.write(json.dumps({"t": round(t, 1), "anon": [a for a, _ in s],
                                "file": [b for _, b in s]}) + "\n")
    steady = [s for t, s in samples if WARMUP < t < switch_at or t > switch_at + WARMUP]
    worst = 0.0
    # The bound is on the shard's own memory (anonymous: heap, hot tier,
    # buffers), where a leak would show. File-backed pages (RocksDB's mapped
    # table files) are the kernel's to keep or drop, so they are shown, not
    # bounded.
    say(f"{'shard':>5} {'anon median MiB':>16} {'min':>6} {'max':>6} {'spread':>7}"
        f" {'file-backed MiB min-max':>24}")
    for i in range(SHARDS):
        values = [s[i][0] for s in steady]
        files = [s[i][1] for s in steady]
        if not values:
            problems.append("no RSS samples past the warm-up: run longer (--minutes)")
            break
        med = statistics.median(values)
        spread = max(abs(v - med) / med for v in values)
        worst = max(worst, spread)
        say(f"{i:>5} {med / 2**20:>16.1f} {min(values) / 2**20:>6.1f} {max(values) / 2**20:>6.1f} "
            f"{100 * spread:>6.1f}% {min(files) / 2**20:>15.1f}-{max(files) / 2**20:.1f}")
        if spread > RSS_BOUND:
            problems.append(f"shard {i}'s anonymous RSS moved {100 * spread:.1f}% from its median "
                            f"(bound {100 * RSS_BOUND:.0f}%)")
    say(f"{end:.0f} s in all, version switch at {switch_at:.0f} s; {len(samples)} RSS samples")
    if problems:
        print("soak: FAILED: " + "; ".join(problems), flush=True)
        return 1
    print(f"soak: {steps} steps, 0 errors, 0 wrong rows, RSS within ±{100 * worst:.1f}% "
          f"of each shard's median", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        print(f"soak: FAILED: {e}", flush=True)
        sys.exit(1)
