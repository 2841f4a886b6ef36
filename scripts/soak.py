#!/usr/bin/env python3
"""make soak: mixed load against 3 shards for a long run, with table version
switches spread over it.

    scripts/soak.py BUILD_DIR [--minutes 10] [--switches 1]

On 127.0.0.1: versions 1 to N+1 of a synthetic table (same geometry, other
rows), each imported into 3 shard directories side by side (shard-I/v1,
shard-I/v2, ...), 3 engram-shard processes serving version 1 with a RAM
budget of a quarter of their rows (the rest from RocksDB). Two
engram-fault-driver processes run decode steps the whole time (8 sequences
at 40 steps/s and 32 at 10 steps/s), every row of every step compared with
the table file. The run is cut into N+1 equal parts (N = --switches, or
SOAK_SWITCHES; 1: one switch at half time); between two parts the drivers
stop, `engramctl activate --to-version V+1` switches the shards, and the
drivers go on against the new version. Every 5 s the shards' RSS is read
from /proc (the least of 10 readings over those 5 s: memory a shard keeps,
not a buffer it holds for a while); after each switch the shards'
anonymous RSS over the part that follows it is printed.

Passes when no step failed, no row was wrong, and each shard's RSS (its
anonymous memory: heap, hot tier, buffers; the file-backed pages of mapped
table files are the kernel's to keep or drop, and are shown beside it)
stayed within 5% of its median over the whole run, every switch included
(the first minute, and the first WARMUP_AFTER_SWITCH seconds after each
switch, while hot tiers and caches fill, left out). The last line is
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
# An RSS sample every 5 s: the least of 10 readings 0.5 s apart, the memory
# a shard keeps, not a buffer it holds for a while (a scrub step's
# read-ahead, ~0.4 MiB here, held for as long as the step waits for a core:
# the scrubber runs at SCHED_IDLE).
SAMPLE_EVERY = 5.0
READINGS, READING_GAP = 10, 0.5
WARMUP = 60.0  # seconds at the start left out of the RSS bound
# Seconds after each version switch left out of the RSS bound: the new
# version's admission cache fills (within 2 s at this load).
WARMUP_AFTER_SWITCH = 15.0


def switches_text(n):
    return f"{n} version switch{'' if n == 1 else 'es'}"


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


def settled_rss(pids):
    """Each process's rss_bytes, the least of READINGS readings READING_GAP s
    apart."""
    least = [rss_bytes(pid) for pid in pids]
    for _ in range(READINGS - 1):
        time.sleep(READING_GAP)
        least = [tuple(map(min, old, rss_bytes(pid))) for old, pid in zip(least, pids)]
    return least


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", 10)))
    ap.add_argument("--switches", type=int, default=int(os.environ.get("SOAK_SWITCHES", 1)),
                    help="table version switches, spread evenly over the run (SOAK_SWITCHES)")
    args = ap.parse_args()
    if args.switches < 0:
        ap.error(f"--switches {args.switches} is negative")
    bin_dir = os.path.join(os.path.abspath(args.build), "bin")
    work = os.path.join(os.path.abspath(args.build), "soak")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ctl = os.path.join(bin_dir, "engramctl")
    # The run in switches + 1 equal parts, one version each.
    part = args.minutes * 60 / (args.switches + 1)
    versions = range(1, args.switches + 2)

    for v in versions:
        run([ctl, "gen-table", "--preset", "small", "--engram-vocab-size", "4000", "--seed", str(10 + v),
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
        say(f"3 shards of version 1 on {', '.join(addrs)}, hot tier {budget} bytes each; "
            f"{switches_text(args.switches)}{f', one every {part:.0f} s' if args.switches else ''}")

        samples = []  # (t, version, [rss per shard])
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
                samples.append((time.time() - start, version, settled_rss(shard_pids)))
                time.sleep(max(0.0, SAMPLE_EVERY - (READINGS - 1) * READING_GAP))
            for k, d in enumerate(drivers):
                if d.returncode not in (0,):
                    raise RuntimeError(f"driver {tag}-{k} exited {d.returncode}: "
                                       f"{open(f'{work}/driver-{tag}-{k}.err').read()[-300:]}")

        def anon_mib(version, since):
            """Each shard's median anonymous RSS, MiB, over `version`'s samples past `since`."""
            rows = [s for t, v, s in samples if v == version and t >= since] or \
                [s for t, v, s in samples if v == version]
            return " / ".join(f"{statistics.median(r[i][0] for r in rows) / 2**20:.1f}"
                              for i in range(SHARDS))

        switch_times = []
        drive(1, part, "v1")
        say(f"version 1 until {time.time() - start:.0f} s: anonymous RSS {anon_mib(1, WARMUP)} MiB "
            f"(shards 0 / 1 / 2)")
        for v in versions[1:]:
            switch_times.append(time.time() - start)
            out = run([ctl, "activate", "--shards", ",".join(addrs), "--to-version", str(v),
                       "--timeout", "120s"])
            # One line per shard: "ADDR: version A -> B (load L s, drain D s)".
            times = [tuple(map(float, m)) for m in
                     re.findall(r"\(load ([0-9.]+) s, drain ([0-9.]+) s\)", out)]
            if len(times) != SHARDS:
                raise RuntimeError(f"activate --to-version {v} printed: {out.strip()[-300:]}")
            drive(v, part, f"v{v}")
            say(f"switch {v - 1}/{args.switches} at {switch_times[-1]:.0f} s, version {v - 1} -> {v} "
                f"(load {max(t[0] for t in times):.2f} s, drain {max(t[1] for t in times):.2f} s at "
                f"most): anonymous RSS after it "
                f"{anon_mib(v, switch_times[-1] + WARMUP_AFTER_SWITCH)} MiB")
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
        for t, v, s in samples:
            f.write(json.dumps({"t": round(t, 1), "version": v, "anon": [a for a, _ in s],
                                "file": [b for _, b in s]}) + "\n")
    # Every sample of the run but those of the warm-ups, all versions together.
    steady = [s for t, _, s in samples
              if t > WARMUP and not any(w <= t < w + WARMUP_AFTER_SWITCH for w in switch_times)]
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
    at = ", ".join(f"{t:.0f}" for t in switch_times)
    say(f"{end:.0f} s in all, {switches_text(len(switch_times))}"
        f"{f' (at {at} s)' if switch_times else ''}; {len(samples)} RSS samples")
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
