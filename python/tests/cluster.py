"""Three real engram-shard processes on 127.0.0.1 serving a generated
table imported with engramctl: what the tests (conftest.py) and the
benchmark (bench_python.py) run against."""
import os
import re
import signal
import subprocess
import time

N_SHARDS = 3


def run(argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} exited {r.returncode}: {(r.stderr or r.stdout)[-400:]}")
    return r.stdout


class Cluster:
    """The table directory, the shards' processes and addresses."""

    def __init__(self, work, bin_dir, vocab=3000):
        self.work = work
        self.table = os.path.join(work, "table")
        ctl = os.path.join(bin_dir, "engramctl")
        run([ctl, "gen-table", "--preset", "small", "--engram-vocab-size", str(vocab), "--seed",
             "22", "--out", self.table])
        self.procs, self.addrs = [], []
        for i in range(N_SHARDS):
            db = os.path.join(work, f"shard-{i}")
            run([ctl, "import", "--table", self.table, "--shards", str(N_SHARDS), "--shard-index",
                 str(i), "--out", db])
        for i in range(N_SHARDS):
            out_path = os.path.join(work, f"shard-{i}.out")
            p = subprocess.Popen([os.path.join(bin_dir, "engram-shard"), "--db",
                                  os.path.join(work, f"shard-{i}"), "--listen", "127.0.0.1:0"],
                                 stdout=open(out_path, "w"),
                                 stderr=open(os.path.join(work, f"shard-{i}.err"), "w"))
            self.procs.append(p)
            for _ in range(300):
                m = re.search(r"serving shard .* on (\S+) ", open(out_path).read())
                if m:
                    self.addrs.append(m.group(1))
                    break
                if p.poll() is not None:
                    raise RuntimeError(f"engram-shard {i} exited")
                time.sleep(0.05)
            else:
                raise RuntimeError(f"engram-shard {i} did not start")

    @property
    def shards(self):
        return [[a] for a in self.addrs]

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
