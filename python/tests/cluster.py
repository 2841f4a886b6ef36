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

    def __init__(self, work, bin_dir, vocab=3000, source=None, n_shards=N_SHARDS,
                 shard_flags=()):
        """source: None for a generated table, or the engramctl source flag
        and path of published files (["--gguf", PATH]); the workers' table
        directory is then written by engramctl manifest. shard_flags: more
        engram-shard flags (e.g. ["--ram-budget", "1G"])."""
        self.work = work
        self.table = os.path.join(work, "table")
        ctl = os.path.join(bin_dir, "engramctl")
        if source is None:
            run([ctl, "gen-table", "--preset", "small", "--engram-vocab-size", str(vocab),
                 "--seed", "22", "--out", self.table])
            source = ["--table", self.table]
        else:
            run([ctl, "manifest", *source, "--out", self.table])
        self.procs, self.addrs = [], []
        for i in range(n_shards):
            db = os.path.join(work, f"shard-{i}")
            run([ctl, "import", *source, "--shards", str(n_shards), "--shard-index",
                 str(i), "--out", db])
        for i in range(n_shards):
            out_path = os.path.join(work, f"shard-{i}.out")
            p = subprocess.Popen([os.path.join(bin_dir, "engram-shard"), "--db",
                                  os.path.join(work, f"shard-{i}"), "--listen", "127.0.0.1:0",
                                  *shard_flags],
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
