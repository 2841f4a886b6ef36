"""Processes and Prometheus' HTTP API for tests/prometheus/dashboard_test.py:
children that die with the test, waiting for a line of their output, and
instant and range queries."""
import ctypes
import json
import math
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

T0 = time.monotonic()
DEADLINE = 800.0           # the whole test, seconds (ctest TIMEOUT is 900); ~75 s idle


def say(line):
    print(f"dashboard: {line}", flush=True)


class Fatal(Exception):
    """A step the rest of the test cannot do without."""


def check_time(what):
    if time.monotonic() - T0 > DEADLINE:
        raise Fatal(f"over {DEADLINE:.0f} s, while {what}")


# --- Child processes --------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent():
    # PR_SET_PDEATHSIG = 1: the child gets SIGTERM when this process dies,
    # even by SIGKILL (a ctest timeout).
    _libc.prctl(1, signal.SIGTERM, 0, 0, 0)


class Children:
    """The processes this test started; stop() ends each by its pid."""

    def __init__(self):
        self.procs = []  # (name, Popen)

    def start(self, name, argv, stdout_path, stderr_path):
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            p = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                 preexec_fn=_die_with_parent)
        self.procs.append((name, p))
        return p

    def stop(self):
        for _, p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for name, p in self.procs:
            try:
                p.wait(timeout=12)  # engram-shard drains for up to 10 s
            except subprocess.TimeoutExpired:
                say(f"{name} (pid {p.pid}) ignored SIGTERM; killing it")
                p.kill()
                p.wait()
        self.procs = []


def run(argv, **kw):
    """Runs a short command; Fatal with its stderr when it fails."""
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise Fatal(f"{' '.join(map(str, argv[:3]))} ... exited {r.returncode}: "
                    f"{(r.stderr or r.stdout).strip()[-400:]}")
    return r


def wait_for_line(path, pattern, proc, what, timeout):
    """Polls a child's output file until `pattern` matches; returns the match."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(path, errors="replace") as f:
                m = re.search(pattern, f.read())
        except FileNotFoundError:
            m = None
        if m:
            return m
        if proc.poll() is not None:
            raise Fatal(f"{what} exited {proc.returncode} before printing it; see {path}")
        time.sleep(0.05)
    raise Fatal(f"{what}: no line matching {pattern!r} in {timeout:.0f} s; see {path}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- HTTP and Prometheus' API -------------------------------------------------

def http_get(url, timeout=60):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


class Prometheus:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def api(self, path, **params):
        url = f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            body = json.loads(http_get(url))
        except urllib.error.HTTPError as e:  # a 400 carries the PromQL error
            body = json.loads(e.read().decode())
        if body.get("status") != "success":
            raise ValueError(body.get("error", "unknown error"))
        return body["data"]

    def instant(self, expr, t):
        """[(labels, value)] of an instant query at time t."""
        data = self.api("query", query=expr, time=f"{t:.3f}")
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def last_of_range(self, expr, start, end):
        """[(labels, last non-NaN value)] over [start, end], 1 s steps."""
        data = self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
                        step="1")
        out = []
        for r in data["result"]:
            vals = [float(v) for _, v in r["values"] if not math.isnan(float(v))]
            if vals:
                out.append((r["metric"], vals[-1]))
        return out

    def series(self, expr, start, end):
        """[(labels, [(t, value)])] over [start, end], 1 s steps."""
        data = self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
                        step="1")
        return [(r["metric"], [(float(t), float(v)) for t, v in r["values"]])
                for r in data["result"]]
