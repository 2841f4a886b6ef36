#!/usr/bin/env python3
"""Multi-host fault test: engram-store under replica crashes, hangs and links cut.

    fault_test.py --bin BUILD/bin [--rate 50] [--batch 8] [--keep]
    fault_test.py --self-test    the analysis catches each problem it checks for

Three hosts and a client are network namespaces on this machine (es-PID-h1,
-h2, -h3, -c), each joined by a veth pair to a bridge in a fifth namespace
(es-PID-br), addresses 10.77.0.1-3 and .100 on 10.77.0.0/24: nothing touches
the machine's own interfaces or root namespace. Shard i's replica r runs on
host (i + r) % 3 + 1, so every host runs two engram-shard processes and no
host holds both replicas of a shard. engram-fault-driver (fault_driver.cc)
runs decode steps in the client namespace at a bounded rate, checking every
row against the table file, while this script injects faults one at a time
with quiet gaps: kill -9 a replica (then restart it), SIGSTOP one (then
SIGCONT), take a host's link down (then up), 50 ms delay + 5% loss with tc
netem (then remove it), and both replicas of a shard stopped (so steps must
fail, naming that shard).

It passes when (fault_analysis.py has the exact checks): no row of any
step differs from the table file; every step reported OK has every row of
every layer; every failed step's error names its shard and that shard's
replicas ("shard I (a|b)"); no step takes longer than its deadlines allow;
no step fails outside a fault; and within 2 s of each fault's end no step
waits on the faulted replica any more: the steps' p99 is back within the
bound, the RPC deadline or 10 x the reference p99 when lower (never below
the reference + 20 ms), the reference being the p99 before the first fault
or, if higher, that of the quiet steps just before this fault.
It prints a table of the faults and ends with
one line:
    fault: N faults, S steps, F failed, 0 wrong rows, recovered within X s
or  fault: FAILED: <why>
--no-hedge, --transport, --fault-seconds, --quiet-seconds and --faults run variants (see
docs/reliability.md, "Multi-host fault tests"); make test runs the defaults: hedging on, every
fault 3 s, 5 s apart, about 45 s in all.
Exit 77 with one line where namespaces cannot be made (not root, no ip
netns); a fault the kernel cannot inject (no sch_netem) is skipped with a
one-line reason, never imitated. Everything it made is removed on any exit.
"""
import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from fault_analysis import Fault, analyse, print_table, read_steps, self_test

SKIP = 77
SUBNET = "10.77.0"
HOSTS = {"h1": 1, "h2": 2, "h3": 3}
CLIENT_IP = 100
N_SHARDS, N_REPLICAS = 3, 2
FAULT_SECONDS = 3.0    # how long each fault lasts
QUIET_SECONDS = 5.0    # between a fault's end and the next one's start
FAULT_KEYS = ["kill", "stop", "link", "netem", "shard-down"]  # make_faults' order
BASELINE_SECONDS = 8.0
PREFIX = "es-%d-" % os.getpid()
# Exit 0 when argv[1] answers TCP on port 9 (refused counts: the host is there).
REACH = ("import socket, sys\n"
         "try:\n"
         "    socket.create_connection((sys.argv[1], 9), timeout=1).close()\n"
         "except ConnectionRefusedError:\n"
         "    pass\n")


def run(*cmd, check=True):
    """Runs a command; its stdout. Raises with its stderr when check fails."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), p.stderr.strip() or p.returncode))
    return p


def die_with_parent():
    """preexec_fn: the child gets SIGKILL when this script dies, however."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def live_run(pid):
    """Whether `pid` is a fault_test.py still running."""
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            return b"fault_test" in f.read()
    except OSError:
        return False


def remove_stale():
    """Deletes the namespaces and work directories of earlier runs that died
    without cleaning up (SIGKILL)."""
    p = run("ip", "netns", "list", check=False)
    for line in p.stdout.splitlines():
        m = re.match(r"(es-(\d+)-(?:br|h1|h2|h3|c))\b", line)
        if not m or m.group(1).startswith(PREFIX) or live_run(m.group(2)):
            continue
        for pid in run("ip", "netns", "pids", m.group(1), check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        run("ip", "netns", "del", m.group(1), check=False)
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        m = re.match(r"engram-fault-(\d+)-", name)
        path = os.path.join(tmp, name)
        if m and int(m.group(1)) != os.getpid() and not live_run(m.group(1)) and \
                not os.path.exists(os.path.join(path, "KEPT")):  # --keep's
            shutil.rmtree(path, ignore_errors=True)


class Network:
    """The namespaces, bridge and veth pairs of one run."""

    def __init__(self):
        self.made = []

    def ns(self, name):
        return PREFIX + name

    def add_ns(self, name):
        run("ip", "netns", "add", self.ns(name))
        self.made.append(self.ns(name))
        run("ip", "-n", self.ns(name), "link", "set", "lo", "up")

    def build(self):
        self.add_ns("br")
        br = self.ns("br")
        run("ip", "-n", br, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", br, "link", "set", "br0", "up")
        nodes = dict(HOSTS, c=CLIENT_IP)
        for name, last in nodes.items():
            self.add_ns(name)
            # The bridge-side end is named after the node ("h2"); the node's
            # end is its eth0.
            run("ip", "-n", br, "link", "add", name, "type", "veth", "peer", "name", "eth0",
                "netns", self.ns(name))
            run("ip", "-n", br, "link", "set", name, "master", "br0", "up")
            run("ip", "-n", self.ns(name), "addr", "add", "%s.%d/24" % (SUBNET, last), "dev",
                "eth0")
            run("ip", "-n", self.ns(name), "link", "set", "eth0", "up")
        for name, last in HOSTS.items():
            ok = False
            for _ in range(20):
                # A refused connection proves the host answers (no ping here).
                if run("ip", "netns", "exec", self.ns("c"), sys.executable, "-c", REACH,
                       "%s.%d" % (SUBNET, last), check=False).returncode == 0:
                    ok = True
                    break
                time.sleep(0.25)
            if not ok:
                raise RuntimeError("the client namespace cannot reach %s" % name)

    def netem_unavailable(self):
        """None when tc netem works on this kernel, else the one-line reason."""
        if shutil.which("tc") is None:
            return "tc is not installed (iproute2's tc)"
        p = run("tc", "-n", self.ns("br"), "qdisc", "add", "dev", "h3", "root", "netem", "delay",
                "50ms", "loss", "5%", check=False)
        if p.returncode != 0:
            return "tc netem unavailable (kernel without sch_netem?): " + p.stderr.strip()
        run("tc", "-n", self.ns("br"), "qdisc", "del", "dev", "h3", "root", check=False)
        return None

    def remove(self):
        for name in reversed(self.made):
            for pid in run("ip", "netns", "pids", name, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            run("ip", "netns", "del", name, check=False)
        self.made = []


class Shard:
    """One engram-shard process: shard `shard`, replica `replica`."""

    def __init__(self, args, net, work, shard, replica):
        self.shard, self.replica = shard, replica
        self.host = "h%d" % ((shard + replica) % 3 + 1)
        self.ip = "%s.%d" % (SUBNET, HOSTS[self.host])
        self.port = 7000 + 10 * shard + replica
        self.stream_port = 7500 + 10 * shard + replica
        self.addr = "%s:%d" % (self.ip, self.port)
        self.cmd = ["ip", "netns", "exec", net.ns(self.host),
                    os.path.join(args.bin, "engram-shard"),
                    "--db", os.path.join(work, "shard-%d" % shard), "--listen", self.addr,
                    "--stream-port", str(self.stream_port), "--metrics-port", "-1",
                    "--ram-budget", "16M", "--reader-threads", "2", "--drain-timeout", "2s"]
        self.log = os.path.join(work, "shard-%d-%d.log" % (shard, replica))
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        with open(self.log, "a") as log:
            log.write("=== start %d\n" % self.starts)
            log.flush()
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=log,
                                         preexec_fn=die_with_parent)

    def wait_serving(self, timeout=60):
        marker = "=== start %d\n" % self.starts
        deadline = time.time() + timeout
        while time.time() < deadline:
            with open(self.log) as f:
                if "serving shard" in f.read().split(marker)[-1]:
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("%s did not start serving; its log:\n%s" % (self.addr, tail(self.log)))

    def signal(self, sig):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self):
        if self.proc is None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def tail(path, n=20):
    try:
        with open(path) as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def make_faults(net, by_key, netem_reason):
    s00, s11, s20, s21 = by_key[0, 0], by_key[1, 1], by_key[2, 0], by_key[2, 1]
    br = net.ns("br")

    def restart(s):
        s.start()
        s.wait_serving()

    def cut(dev, state):
        run("ip", "-n", br, "link", "set", dev, state)

    faults = [
        Fault("kill", "kill -9 %s (shard 0 r0, %s)" % (s00.addr, s00.host), {0},
              lambda: (s00.signal(signal.SIGKILL), s00.proc.wait()), lambda: restart(s00)),
        Fault("stop", "SIGSTOP %s (shard 1 r1, %s)" % (s11.addr, s11.host), {1},
              lambda: s11.signal(signal.SIGSTOP), lambda: s11.signal(signal.SIGCONT)),
        Fault("link", "link of h2 down (shard 0 r1, shard 1 r0)", {0, 1},
              lambda: cut("h2", "down"), lambda: cut("h2", "up")),
        Fault("netem", "netem 50ms + 5% loss on h3 (shard 1 r1, shard 2 r0)", {1, 2},
              lambda: run("tc", "-n", br, "qdisc", "add", "dev", "h3", "root", "netem", "delay",
                          "50ms", "loss", "5%"),
              lambda: run("tc", "-n", br, "qdisc", "del", "dev", "h3", "root")),
        Fault("shard-down", "SIGSTOP both replicas of shard 2", {2},
              lambda: (s20.signal(signal.SIGSTOP), s21.signal(signal.SIGSTOP)),
              lambda: (s20.signal(signal.SIGCONT), s21.signal(signal.SIGCONT))),
    ]
    faults[3].skipped = netem_reason
    return faults


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", help="directory of engram-shard, engramctl, engram-fault-driver")
    ap.add_argument("--rate", type=float, default=50, help="steps per second")
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--no-hedge", action="store_true", help="the client without hedging")
    ap.add_argument("--transport", choices=["stream", "grpc"], default="stream",
                    help="the client's transport (row stream where offered, or gRPC only)")
    ap.add_argument("--fault-seconds", type=float, default=FAULT_SECONDS,
                    help="how long each fault lasts")
    ap.add_argument("--quiet-seconds", type=float, default=QUIET_SECONDS,
                    help="quiet time after each fault (at least 4)")
    ap.add_argument("--faults", default=",".join(FAULT_KEYS),
                    help="which faults, in this order: " + ",".join(FAULT_KEYS))
    ap.add_argument("--self-test", action="store_true",
                    help="check that the analysis catches what it exists for (no root needed)")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.bin:
        ap.error("--bin is required")
    if args.quiet_seconds < 4 or any(k not in FAULT_KEYS for k in args.faults.split(",")):
        ap.error("--quiet-seconds must be at least 4, --faults a list of " + ",".join(FAULT_KEYS))

    if os.geteuid() != 0:
        print("fault: skipped: not root (network namespaces need CAP_SYS_ADMIN)")
        return SKIP
    if shutil.which("ip") is None:
        print("fault: skipped: iproute2's ip is not installed")
        return SKIP
    for b in ("engram-shard", "engramctl", "engram-fault-driver"):
        if not os.access(os.path.join(args.bin, b), os.X_OK):
            print("fault: FAILED: %s not built in %s" % (b, args.bin))
            return 1

    def on_signal(sig, _frame):
        raise SystemExit(128 + sig)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    remove_stale()
    net = Network()
    work = tempfile.mkdtemp(prefix="engram-fault-%d-" % os.getpid())
    shards, driver, ok = [], None, False
    try:
        probe = PREFIX + "probe"
        p = run("ip", "netns", "add", probe, check=False)
        if p.returncode != 0:
            print("fault: skipped: cannot make a network namespace: " + p.stderr.strip())
            return SKIP
        run("ip", "netns", "del", probe, check=False)
        net.build()
        netem_reason = net.netem_unavailable()

        ctl = os.path.join(args.bin, "engramctl")
        table = os.path.join(work, "table")
        run(ctl, "gen-table", "--preset", "small", "--engram-vocab-size", "2000", "--out", table)
        for i in range(N_SHARDS):
            run(ctl, "import", "--table", table, "--shards", str(N_SHARDS), "--shard-index",
                str(i), "--out", os.path.join(work, "shard-%d" % i))
        by_key = {}
        for i in range(N_SHARDS):
            for r in range(N_REPLICAS):
                s = Shard(args, net, work, i, r)
                s.start()
                shards.append(s)
                by_key[i, r] = s
        for s in shards:
            s.wait_serving()

        wanted = args.faults.split(",")
        faults = [f for f in make_faults(net, by_key, netem_reason) if f.key in wanted]
        n_active = sum(1 for f in faults if f.skipped is None)
        if n_active == 0:
            print("fault: skipped: none of --faults %s can be injected here: %s"
                  % (args.faults, "; ".join(f.skipped for f in faults)))
            return SKIP
        # The driver stops when told to, after the last fault's quiet time;
        # --seconds only bounds a run whose script died.
        planned = BASELINE_SECONDS + n_active * (args.fault_seconds + args.quiet_seconds)
        seconds = 2 * planned + 120
        addrs = ",".join("|".join(by_key[i, r].addr for r in range(N_REPLICAS))
                         for i in range(N_SHARDS))
        out = os.path.join(work, "steps.jsonl")
        driver_log = os.path.join(work, "driver.log")
        with open(driver_log, "w") as log:
            driver = subprocess.Popen(
                ["ip", "netns", "exec", net.ns("c"), os.path.join(args.bin, "engram-fault-driver"),
                 "--table", table, "--shard-map", os.path.join(work, "shard-0", "shard_map.json"),
                 "--shards", addrs, "--steps-per-second", str(args.rate), "--seconds",
                 str(seconds), "--batch", str(args.batch), "--rpc-deadline", "300ms",
                 "--hedge=%s" % ("false" if args.no_hedge else "true"),
                 "--transport", args.transport,
                 "--out", out], stdout=log, stderr=log, preexec_fn=die_with_parent)
        t0 = None
        for _ in range(600):  # the first step, then the driver's clock is ours
            if os.path.exists(out):
                with open(out) as f:
                    for line in f:
                        if line.startswith('{"step"'):
                            t0 = json.loads(line)["t"]
                            break
            if t0 is not None or driver.poll() is not None:
                break
            time.sleep(0.05)
        if t0 is None:
            raise RuntimeError("the driver ran no step; its log:\n" + tail(driver_log))

        for f in faults:
            if f.skipped is not None:
                print("fault: skipped %s: %s" % (f.name, f.skipped))
        next_at = t0 + BASELINE_SECONDS
        for f in faults:
            if f.skipped is not None:
                continue
            time.sleep(max(0.0, next_at - time.time()))
            f.start = time.time()
            f.inject()
            time.sleep(max(0.0, f.start + args.fault_seconds - time.time()))
            f.repair_at = time.time()
            f.repair()
            f.end = time.time()  # the fault is over for certain from here
            next_at = f.end + args.quiet_seconds
        with open(os.path.join(work, "faults.json"), "w") as fj:
            json.dump([{"fault": f.name, "start": f.start, "repair": getattr(f, "repair_at", None),
                        "end": f.end, "skipped": f.skipped} for f in faults], fj)
        time.sleep(max(0.0, next_at - time.time()))
        driver.send_signal(signal.SIGTERM)  # ends after the step in progress
        try:
            rc = driver.wait(timeout=30)
        except subprocess.TimeoutExpired:
            driver.kill()
            raise RuntimeError("the driver did not finish; its log:\n" + tail(driver_log))
        if rc not in (0, 2, 3):
            raise RuntimeError("the driver failed (exit %d):\n%s" % (rc, tail(driver_log)))

        meta, steps, hung = read_steps(out)
        rows, problems, worst = analyse(meta, steps, hung, faults, t0)
        print("fault: 3 hosts, %d engram-shard processes (%d shards x %d replicas), client at "
              "%d steps/s, batch %d, %s, rpc deadline %.0f ms, hedging %s; p99 bound "
              "max(min(10 x ref, rpc deadline), ref + 20 ms)"
              % (len(shards), N_SHARDS, N_REPLICAS, args.rate, args.batch,
                 "row stream" if args.transport == "stream" else "gRPC",
                 meta["rpc_deadline_ms"], "on" if meta["hedge"] else "off"))
        print_table(["fault", "start", "end", "steps during", "failed during", "wrong rows",
                     "p99 ref", "bound", "p99 after (+2 s)", "time to recover", "replicas back"],
                    rows)
        n_failed = sum(1 for s in steps if s["status"] != "OK")
        n_wrong = sum(s["wrong_rows"] for s in steps)
        print("steps: %d run, %d failed (%d partial), %d wrong rows; driver: %s"
              % (len(steps), n_failed, sum(1 for s in steps if s["partial"]), n_wrong,
                 tail(driver_log, 1).strip()))
        if problems:
            for p in problems[:20]:
                print("  " + p)
            if len(problems) > 20:
                print("  ... %d more" % (len(problems) - 20))
            print("fault: FAILED: %s" % problems[0])
            return 1
        print("fault: %d faults, %d steps, %d failed, %d wrong rows, recovered within %.1f s"
              % (len(rows), len(steps), n_failed, n_wrong, worst))
        ok = True
        return 0
    except (RuntimeError, OSError, ValueError, KeyError) as e:
        print("fault: FAILED: %s" % e)
        return 1
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
            driver.wait()
        for s in shards:
            s.stop()
        if not ok:
            for s in shards:
                if s.proc is not None and s.proc.returncode not in (0, None, -signal.SIGTERM):
                    print("--- %s (exit %s):\n%s" % (s.log, s.proc.returncode, tail(s.log, 8)))
        net.remove()
        if args.keep:
            open(os.path.join(work, "KEPT"), "w").close()
            print("fault: work directory kept: " + work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
