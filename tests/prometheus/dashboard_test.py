#!/usr/bin/env python3
"""The Grafana dashboard and the Prometheus rules against a live deployment.

    dashboard_test.py BIN_DIR WORK_DIR REPO_DIR [--png FILE]

On loopback: a small synthetic table imported into 3 shards, 3 engram-shard
processes (a RAM budget of a quarter of each shard, so rows also come from
RocksDB), a real Prometheus scraping them (and the client) every second with
helm/engram-store/files/prometheus-rules.yaml loaded, and engram-demo as the load.
While the load runs, every dashboard panel's PromQL, every recording rule and
every alert's left-hand side is evaluated through Prometheus' HTTP API; each
must return data, plausible for its unit, and no alert may fire or go pending.
Every metric name the dashboard and the rules use must be on a live /metrics
page, and one live page must pass `promtool check metrics`.

Static checks first (no processes): each alert is `<LHS> <op> <number>`, each
fires in the rules' unit tests and stays silent in their healthy test, each
panel has a unit and rates over $__rate_interval. (`promtool check rules` and
`promtool test rules` are separate ctest tests.)

The key panels are rendered with gnuplot to WORK_DIR/dashboard.png (or the
--png FILE, e.g. docs/dashboard.png). The last line printed is
    dashboard: P panels, R rules, all returned data
or, on failure, `dashboard: FAILED: ...` naming what failed. Exit 0 on
success, 1 on failure, 77 (skip) when prometheus or promtool is missing.
Every child process is stopped on any exit (and gets SIGTERM should this
script die: PR_SET_PDEATHSIG).
"""
import argparse
import ctypes
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

from prom_harness import (DEADLINE, T0, Children, Fatal, Prometheus, check_time,
                          free_port, http_get, run, say, wait_for_line)

SHARDS = 3
RATE_INTERVAL = "10s"      # what $__rate_interval stands for (10 scrapes of 1 s)
LOAD_BEFORE_EVAL = 20.0    # seconds of load before the queries are evaluated
UP_WAIT = 60.0             # the longest wait after it for a moment every target is up
DECODE_STEPS = 1200        # engram-demo decode steps: ~25 s of load on 2 cores
TRACE_LENGTH = 1400        # tokens a sequence: prefill 128 + the decode steps
# engram-demo's --rpc-deadline and --step-deadline: far above any latency a
# healthy run sees, so a machine loaded beside the test (scripts/flake_check.sh)
# stretches the load but never fails it; the client's latency panels must
# stay under the RPC deadline.
CLIENT_RPC_DEADLINE = 30.0
CLIENT_STEP_DEADLINE = 60.0
PNG_MAX_BYTES = 200_000

# Expressions that are zero on a healthy run (the demo hedges nothing and
# nothing fails): their values must all be 0.
ZERO_MARKERS = ("engram_client_retries_total", "engram_client_hedges_total",
                "engram_client_failed_rpcs_total", "engram_shard_data_loss_total",
                'code!~"OK|CANCELLED"')
# Rates that may be zero on this run (the demo has no worker-side cache).
MAY_BE_ZERO_MARKERS = ("engram_client_local_cache_hits_total",)
RATE_UNITS = ("ops", "reqps", "Bps")
ALERT_FORM = re.compile(r"^(?P<lhs>.*\S)\s*(?P<op>>=|<=|==|!=|>|<)\s*(?P<num>-?[0-9.]+(?:e-?[0-9]+)?)\s*$",
                        re.S)
METRIC_NAME = re.compile(r"\b(engram_(?:shard|client)_[a-z0-9_]+)")


# --- The files under test -----------------------------------------------------

def load_rules(path):
    """(recording [(name, expr)], alerts [(name, expr)]) of a rules file."""
    recording, alerts = [], []
    for group in yaml.safe_load(open(path))["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                recording.append((rule["record"], rule["expr"].strip()))
            else:
                alerts.append((rule["alert"], rule["expr"].strip()))
    return recording, alerts


def load_panels(path):
    """(dashboard, [(title, unit, [expr])]) of the non-row panels."""
    dash = json.load(open(path))
    panels = []
    for p in dash["panels"]:
        if p["type"] == "row":
            continue
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
        panels.append((p["title"], unit, [t["expr"] for t in p.get("targets", [])]))
    return dash, panels


def substitute(expr):
    """A panel's PromQL as Prometheus gets it from Grafana (all shards)."""
    return (expr.replace("$__rate_interval", RATE_INTERVAL).replace("${shard}", ".*")
            .replace("$shard", ".*"))


def static_checks(rules_path, test_path, dash, panels, alerts, problems):
    """Checks of the files alone; appends to `problems`."""
    for name, expr in alerts:
        m = ALERT_FORM.match(expr)
        if not m or re.search(r"\bbool\b", expr):
            problems.append(f"alert {name}: expr is not `<LHS> <op> <number>` without bool")
    # Unit tests: every alert fires somewhere and is silent in the healthy test.
    fired, silent_healthy = set(), set()
    for test in yaml.safe_load(open(test_path))["tests"]:
        for case in test.get("alert_rule_test", []):
            if case.get("exp_alerts"):
                fired.add(case["alertname"])
            elif test.get("name") == "healthy deployment":
                silent_healthy.add(case["alertname"])
    for name, _ in alerts:
        if name not in fired:
            problems.append(f"alert {name}: fires in no test of {os.path.basename(test_path)}")
        if name not in silent_healthy:
            problems.append(f"alert {name}: not checked silent in the healthy deployment test")
    # Dashboard: the datasource variable, a unit per panel, $__rate_interval.
    variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource", {})
    if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problems.append("dashboard: no `datasource` variable of type datasource (prometheus)")
    if not 36 <= dash.get("schemaVersion", 0) <= 39:
        problems.append(f"dashboard: schemaVersion {dash.get('schemaVersion')} (want ~38)")
    for title, unit, exprs in panels:
        if not unit:
            problems.append(f'panel "{title}": no fieldConfig.defaults.unit')
        if not exprs:
            problems.append(f'panel "{title}": no targets')
        for e in exprs:
            for window in re.findall(r"\[([^\]]*)\]", e):
                if window != "$__rate_interval":
                    problems.append(f'panel "{title}": range [{window}], not [$__rate_interval]')
    for p in dash["panels"]:
        if p["type"] != "row" and p.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f'panel "{p["title"]}": datasource is not ${{datasource}}')


# --- Plausibility -------------------------------------------------------------

def observed_range(pages, histogram):
    """(lowest, highest) latency the shards observed this run, from their
    cumulative buckets: the lower edge of the first bucket any observation
    fell in, and the bucket bound that holds every observation (inf when some
    fell above the largest finite bucket)."""
    cumulative = {}
    for page in pages:
        for le, count in re.findall(rf'^{histogram}_bucket{{.*le="([^"]+)".*}} (\S+)$', page, re.M):
            cumulative[float(le)] = cumulative.get(float(le), 0.0) + float(count)
    les = sorted(cumulative)
    if not les or cumulative[les[-1]] == 0:
        return None
    total = cumulative[les[-1]]
    first = next(i for i, le in enumerate(les) if cumulative[le] > 0)
    low = les[first - 1] if first > 0 else 0.0
    high = next(le for le in les if cumulative[le] >= total)
    return low, high


def latency_bound(expr, shard_pages):
    """((low, high) in seconds, what it is) for a latency expression."""
    m = re.search(r"(engram_shard_[a-z_]+_seconds)_bucket", expr)
    if m:
        r = observed_range(shard_pages, m.group(1))
        return r, f"the range of {m.group(1)} the shards observed this run"
    return (0.0, CLIENT_RPC_DEADLINE), "the client's RPC deadline"


def plausible(unit, expr, values, shard_pages):
    """None if `values` are plausible for a panel of `unit`, else why not."""
    vals = [v for _, v in values]
    if any(math.isnan(v) or math.isinf(v) for v in vals):
        return "NaN or Inf in " + ", ".join(f"{v:g}" for v in vals)
    if any(m in expr for m in ZERO_MARKERS):
        if any(v != 0 for v in vals):
            return f"not 0 on a healthy run: {max(vals):g}"
        return None
    if unit == "percentunit":
        if not all(0 <= v <= 1 for v in vals):
            return f"ratio outside [0, 1]: {min(vals):g}..{max(vals):g}"
    elif unit == "s":
        bounds, what = latency_bound(expr, shard_pages)
        if bounds is None:
            return f"no observations in {what}"
        low, high = bounds
        if not all(low <= v <= high and v > 0 for v in vals):
            return f"latency {min(vals):g}..{max(vals):g} s outside [{low:g}, {high:g}] ({what})"
    elif unit in RATE_UNITS or unit == "bytes":
        if min(vals) < 0:
            return f"negative: {min(vals):g}"
        if max(vals) <= 0 and not any(m in expr for m in MAY_BE_ZERO_MARKERS):
            return "0 under load"
    elif min(vals) < 0:
        return f"negative: {min(vals):g}"
    # A per-shard series for each of the shards.
    per_shard = re.search(r"by \(shard\b", expr) and (
        "engram_client_" not in expr or "engram_client_shard_" in expr)
    if per_shard:
        shards = {lab.get("shard") for lab, _ in values}
        if shards != {str(i) for i in range(SHARDS)}:
            return f"shards {sorted(s for s in shards if s)} (want 0..{SHARDS - 1})"
    return None


def rule_unit(name):
    """The panel unit a recording rule's values have, from its name."""
    if "ratio" in name:
        return "percentunit"
    if "seconds" in name:
        return "s"
    if "increase" in name:
        return "short"
    return "ops"


def compare(value, op, number):
    return {">": value > number, "<": value < number, ">=": value >= number,
            "<=": value <= number, "==": value == number, "!=": value != number}[op]


def sample_names(page):
    """The sample names on a /metrics page."""
    return {re.split(r"[{ ]", line, 1)[0] for line in page.splitlines()
            if line and not line.startswith("#")}


# --- The picture ----------------------------------------------------------------

def render_png(prom, start, end, work, out_path):
    """The key panels over the load, with gnuplot, to out_path."""
    charts = [
        ("Rows served/s by shard", "rows/s", 1,
         f"sum by (shard) (rate(engram_shard_rows_total[{RATE_INTERVAL}]))", "shard {shard}"),
        ("Lookup latency p50 / p99 by shard", "ms", 1000, None, None),
        ("Hot-hit ratio by shard", "%", 100,
         f'sum by (shard) (rate(engram_shard_rows_total{{tier!="disk"}}[{RATE_INTERVAL}])) / '
         f"sum by (shard) (rate(engram_shard_rows_total[{RATE_INTERVAL}]))", "shard {shard}"),
        ("In-flight Lookups and row stream connections", "", 1, None, None),
    ]
    bucket = f'rate(engram_shard_request_duration_seconds_bucket{{method="Lookup"}}[{RATE_INTERVAL}])'
    multi = {
        1: [(f"histogram_quantile(0.5, sum by (shard, le) ({bucket}))", "p50 shard {shard}"),
            (f"histogram_quantile(0.99, sum by (shard, le) ({bucket}))", "p99 shard {shard}")],
        3: [(f"sum by (shard) (avg_over_time(engram_shard_inflight_requests[{RATE_INTERVAL}]))",
             "in flight, shard {shard}"),
            ("sum by (shard) (engram_shard_stream_connections)", "stream connections, shard {shard}")],
    }
    script = ['set terminal pngcairo size 1000,680 font "DejaVu Sans,8"',
              f"set output '{out_path}'",
              'set multiplot layout 2,2 title "engram-store on loopback: 3 shards under '
              'engram-demo (Prometheus, 1 s scrapes)"',
              'set xlabel "seconds into the load"', "set key top left font \",7\"",
              "set grid"]
    for i, (title, ylabel, scale, expr, legend) in enumerate(charts):
        queries = multi.get(i, [(expr, legend)])
        plots, data_path = [], os.path.join(work, f"png-{i}.dat")
        with open(data_path, "w") as f:
            block = 0
            for q, lf in queries:
                for labels, points in sorted(prom.series(q, start, end),
                                             key=lambda s: s[0].get("shard", "")):
                    for t, v in points:
                        if not math.isnan(v):
                            f.write(f"{t - start:.1f} {v * scale:.6g}\n")
                    f.write("\n\n")
                    plots.append(f"'{data_path}' index {block} using 1:2 with lines lw 1.5 "
                                 f"title \"{lf.format(**labels)}\"")
                    block += 1
        script += [f'set title "{title}"', f'set ylabel "{ylabel}"',
                   # Latency spans 1 ms to the cold start's 100 ms: log scale.
                   # Its key goes top right, above the lines once the start's peak is over.
                   "set logscale y; set yrange [*:*]; set offsets 0, 0, 0, 0; set key top right"
                   if ylabel == "ms"
                   # Headroom above the lines for the key.
                   else "unset logscale y; set yrange [0:*]; set offsets 0, 0, graph 0.4, 0; "
                   "set key top left"]
        script.append("plot " + ", ".join(plots) if plots else "plot 0 notitle")
    script.append("unset multiplot")
    gp = os.path.join(work, "dashboard.gp")
    open(gp, "w").write("\n".join(script) + "\n")
    run(["gnuplot", gp])
    return os.path.getsize(out_path)


# --- The test -------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bin_dir")
    ap.add_argument("work_dir")
    ap.add_argument("repo_dir")
    ap.add_argument("--png", help="where to write the panels' picture "
                    "(default WORK_DIR/dashboard.png)")
    args = ap.parse_args()
    children = Children()

    def on_signal(sig, _frame):
        raise SystemExit(128 + sig)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        problems, summary = test(args, children)
    except Fatal as e:
        problems, summary = [str(e)], None
    finally:
        children.stop()
    if problems:
        for p in problems:
            say(f"FAIL {p}")
        print("dashboard: FAILED: " + "; ".join(problems), flush=True)
        return 1
    print(summary, flush=True)
    return 0


def test(args, children):
    bin_dir = os.path.abspath(args.bin_dir)
    work = os.path.abspath(args.work_dir)
    repo = os.path.abspath(args.repo_dir)
    rules_path = os.path.join(repo, "helm/engram-store/files/prometheus-rules.yaml")
    test_path = os.path.join(repo, "helm/engram-store/files/prometheus-rules.test.yaml")
    dash_path = os.path.join(repo, "helm/engram-store/files/grafana-dashboard.json")
    png_path = os.path.abspath(args.png or os.path.join(work, "dashboard.png"))
    problems = []

    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prometheus or not promtool or not shutil.which("gnuplot"):
        print("dashboard: SKIP: needs prometheus, promtool and gnuplot on PATH", flush=True)
        sys.exit(77)

    # 1. The files alone.
    recording, alerts = load_rules(rules_path)
    dash, panels = load_panels(dash_path)
    static_checks(rules_path, test_path, dash, panels, alerts, problems)
    say(f"{len(panels)} panels, {len(recording)} recording rules, {len(alerts)} alerts")

    # 2. A table, a trace and 3 shards.
    os.makedirs(work, exist_ok=True)
    for d in ["table", "prometheus-data"] + [f"shard-{i}" for i in range(SHARDS)]:
        shutil.rmtree(os.path.join(work, d), ignore_errors=True)
    table = os.path.join(work, "table")
    ctl = os.path.join(bin_dir, "engramctl")
    run([ctl, "gen-table", "--preset", "small", "--engram-vocab-size", "10000", "--out", table])
    trace = os.path.join(work, "zipf.trace")
    run(["node", os.path.join(repo, "tools/make-zipf-trace"), "--out", trace,
         "--sequences", "128", "--length", str(TRACE_LENGTH)])
    lines = open(trace).read().splitlines()
    # The hot-row profile learns from one half; the load replays the other.
    open(os.path.join(work, "profile.trace"), "w").write("\n".join(lines[0::2]) + "\n")
    open(os.path.join(work, "workload.trace"), "w").write("\n".join(lines[1::2]) + "\n")
    for i in range(SHARDS):
        run([ctl, "import", "--table", table, "--shards", str(SHARDS), "--shard-index", str(i),
             "--out", os.path.join(work, f"shard-{i}"),
             "--profile-trace", os.path.join(work, "profile.trace")])
    # A quarter of a shard's row bytes: most rows come from RocksDB.
    budget = os.path.getsize(os.path.join(table, "rows.safetensors")) // SHARDS // 4
    addrs, mports = [], []
    for i in range(SHARDS):
        out = os.path.join(work, f"shard-{i}.out")
        p = children.start(f"engram-shard {i}",
                           [os.path.join(bin_dir, "engram-shard"), "--db",
                            os.path.join(work, f"shard-{i}"), "--listen", "127.0.0.1:0",
                            "--metrics-port", "0", "--ram-budget", str(budget)],
                           out, os.path.join(work, f"shard-{i}.err"))
        # engram-shard: serving shard I/K of TABLE vV on HOST:PORT (metrics :M) ...
        m = wait_for_line(out, r"serving shard .* on (\S+) \(metrics :(\d+)\)", p,
                          f"engram-shard {i}", 120)
        addrs.append(m.group(1))
        mports.append(int(m.group(2)))
    say(f"shards on {', '.join(addrs)} (metrics :{', :'.join(map(str, mports))}), "
        f"hot tier {budget} bytes each")

    # 3. Prometheus: the shards by static targets, the client through a file
    #    written once engram-demo has printed its metrics port.
    client_sd = os.path.join(work, "client-targets.json")
    open(client_sd, "w").write("[]\n")
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [rules_path],
        "scrape_configs": [
            {"job_name": "engram-shard",
             "static_configs": [{"targets": [f"127.0.0.1:{mports[i]}"],
                                 "labels": {"shard": str(i), "replica": "0"}}
                                for i in range(SHARDS)]},
            {"job_name": "engram-client", "file_sd_configs": [{"files": [client_sd]}]},
        ],
    }
    config_path = os.path.join(work, "prometheus.yml")
    open(config_path, "w").write(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    prom_proc = children.start("prometheus",
                               [prometheus, f"--config.file={config_path}",
                                f"--storage.tsdb.path={os.path.join(work, 'prometheus-data')}",
                                f"--web.listen-address=127.0.0.1:{port}"],
                               os.path.join(work, "prometheus.out"),
                               os.path.join(work, "prometheus.log"))
    prom = Prometheus(port)
    prom_start = time.time()
    while True:
        check_time("waiting for Prometheus")
        if prom_proc.poll() is not None:
            raise Fatal(f"prometheus exited {prom_proc.returncode}; see "
                        f"{os.path.join(work, 'prometheus.log')}")
        try:
            http_get(f"{prom.base}/-/ready", timeout=1)
            shards_up = prom.instant('count(up{job="engram-shard"} == 1)', time.time())
            if shards_up and shards_up[0][1] == SHARDS:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    say(f"prometheus on 127.0.0.1:{port} scraping {SHARDS} shards "
        f"({time.time() - prom_start:.1f} s to ready)")

    # 4. The load: engram-demo, serving the client's metrics if it can.
    demo_bin = os.path.join(bin_dir, "engram-demo")
    demo_err = os.path.join(work, "demo.err")
    demo_argv = [demo_bin, "--table", table,
                 "--shard-map", os.path.join(work, "shard-0/shard_map.json"),
                 "--shards", ",".join(addrs), "--metrics-ports", ",".join(map(str, mports)),
                 "--trace", os.path.join(work, "workload.trace"),
                 "--decode-steps", str(DECODE_STEPS), "--metrics-port", "0",
                 "--rpc-deadline", f"{CLIENT_RPC_DEADLINE:g}s",
                 "--step-deadline", f"{CLIENT_STEP_DEADLINE:g}s"]
    demo = children.start("engram-demo", demo_argv, os.path.join(work, "demo.out"), demo_err)
    load_start = time.time()
    m = wait_for_line(demo_err, r"client metrics on 127\.0\.0\.1:(\d+)", demo,
                      "engram-demo", 120)
    client_port = int(m.group(1))
    tmp = client_sd + ".tmp"
    open(tmp, "w").write(json.dumps([{"targets": [f"127.0.0.1:{client_port}"]}]) + "\n")
    os.rename(tmp, client_sd)  # Prometheus watches the file

    # 5. While the load runs: the live pages and every query.
    while time.time() - load_start < LOAD_BEFORE_EVAL and demo.poll() is None:
        check_time("waiting for the load")
        time.sleep(0.2)
    # Evaluate at a moment every target's last scrape succeeded: on a loaded
    # machine a scrape can outlast its 1 s timeout, and a shard's gauges are
    # then absent until the next one (Prometheus's staleness), which is not
    # the dashboard's fault. Waits for such a moment at most UP_WAIT.
    t_eval, waited = time.time() - 1, time.time()
    while demo.poll() is None:
        up = prom.instant("count(up == 1)", t_eval)
        if up and int(up[0][1]) == SHARDS + 1:
            break
        if time.time() - waited > UP_WAIT:
            problems.append(f"some target was down at every moment for {UP_WAIT:.0f} s "
                            f"({up and int(up[0][1])} of {SHARDS + 1} up)")
            break
        check_time("waiting for every target to be up")
        time.sleep(0.5)
        t_eval = time.time() - 1
    if demo.poll() is not None:
        # Its metrics page is gone with it: nothing below can be checked.
        last = (open(demo_err).read().strip().splitlines() or ["(no output)"])[-1]
        raise Fatal(f"engram-demo ended within {time.time() - load_start:.0f} s "
                    f"(exit {demo.returncode}): {last}")
    shard_pages = [http_get(f"http://127.0.0.1:{p}/metrics") for p in mports]
    shard_page = shard_pages[0]
    client_page = http_get(f"http://127.0.0.1:{client_port}/metrics")
    if not prom.instant('up{job="engram-client"} == 1', t_eval):
        problems.append("Prometheus has not scraped engram-demo's client metrics")

    def evaluate(name, expr, unit):
        """Evaluates one expression at t_eval; appends problems; True if checked."""
        try:
            values = prom.instant(expr, t_eval) or prom.last_of_range(expr, load_start, t_eval)
        except ValueError as e:
            problems.append(f"{name}: query error: {e}")
            return
        if not values:
            problems.append(f"{name}: no data")
            return
        why = plausible(unit, expr, values, shard_pages)
        if why:
            problems.append(f"{name}: {why}")

    checked_panels = checked_rules = 0
    for title, unit, exprs in panels:
        for e in exprs:
            evaluate(f'panel "{title}" ({e[:60]}...)', substitute(e), unit)
        checked_panels += 1
    for name, expr in recording:
        evaluate(f"rule {name}", expr, rule_unit(name))
        checked_rules += 1
    for name, expr in alerts:
        checked_rules += 1
        m = ALERT_FORM.match(expr)
        if not m:
            continue  # reported by the static checks
        lhs, op, number = m.group("lhs"), m.group("op"), float(m.group("num"))
        try:
            values = prom.instant(lhs, t_eval)
        except ValueError as e:
            problems.append(f"alert {name}: LHS query error: {e}")
            continue
        if not values:
            problems.append(f"alert {name}: LHS {lhs!r} returned no data")
        for labels, v in values:
            if math.isnan(v) or math.isinf(v):
                problems.append(f"alert {name}: LHS is {v:g} under load ({labels})")
            elif compare(v, op, number):
                # Pending at most: the run is far shorter than the alert's
                # `for:` (see the ALERTS check below).
                say(f"note: alert {name}: {v:g} {op} {number:g} at the evaluation "
                    f"(shard {labels.get('shard', '-')}, instance {labels.get('instance')})")
    say(f"evaluated at {t_eval - load_start:.0f} s into the load")

    # Live pages: promtool's lint, and every metric name the files use.
    for what, page in (("shard", shard_page), ("client", client_page)):
        if not page:
            continue
        r = subprocess.run([promtool, "check", "metrics"], input=page, capture_output=True,
                           text=True)
        if r.returncode != 0:
            problems.append(f"promtool check metrics on the {what}'s /metrics: "
                            f"{(r.stdout + r.stderr).strip()[:300]}")
    live = sample_names(shard_page) | sample_names(client_page)
    used = set()
    for _, _, exprs in panels:
        for e in exprs:
            used |= set(METRIC_NAME.findall(e))
    for _, expr in recording + alerts:
        used |= set(METRIC_NAME.findall(expr))
    for name in sorted(used):
        if name not in live:
            problems.append(f"metric {name} is on no live /metrics page")

    # Rules as Prometheus loaded them, and the alerts over the whole run.
    loaded = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
    if len(loaded) != len(recording) + len(alerts):
        problems.append(f"Prometheus loaded {len(loaded)} rules, the file has "
                        f"{len(recording) + len(alerts)}")
    for r in loaded:
        if r.get("health") != "ok":
            problems.append(f"rule {r['name']}: health {r.get('health')}: {r.get('lastError')}")
    for a in prom.api("alerts")["alerts"]:
        if a["state"] == "firing":
            problems.append(f"alert {a['labels'].get('alertname')} is firing ({a['labels']})")
    # Firing at any time of the run fails. Pending does not: at start-up a
    # 5-minute window holds little but the cold first seconds (e.g. the
    # prefill's large Lookups), which is what `for:` is there to wait out;
    # the LHS checks above show the condition false under steady load.
    run_seconds = int(time.time() - prom_start) + 1
    for labels, _ in prom.instant(f"max_over_time(ALERTS[{run_seconds}s])", time.time()):
        name, state = labels.get("alertname"), labels.get("alertstate")
        if state == "firing":
            problems.append(f"alert {name} fired during the run ({labels})")
        else:
            say(f"note: alert {name} was {state} for a while during the run "
                f"(shard {labels.get('shard', '-')})")

    # 6. The end of the load: the demo verifies the rows it got.
    try:
        demo.wait(timeout=max(1.0, DEADLINE - 25 - (time.monotonic() - T0)))
    except subprocess.TimeoutExpired:
        say("engram-demo still running; stopping it")
        demo.terminate()
        demo.wait()
    load_end = time.time()
    demo_last = (open(os.path.join(work, "demo.out")).read().strip().splitlines() or [""])[-1]
    if demo.returncode != 0 or " 0 wrong" not in demo_last:
        problems.append(f"engram-demo exited {demo.returncode}: {demo_last or 'no summary'}")
    else:
        say(f"load {load_end - load_start:.0f} s; {demo_last}")

    # 7. The picture of the key panels.
    size = render_png(prom, load_start, load_end, work, png_path)
    if size >= PNG_MAX_BYTES:
        problems.append(f"{png_path} is {size} bytes (limit {PNG_MAX_BYTES})")
    say(f"wrote {png_path} ({size // 1024} KB); {time.monotonic() - T0:.0f} s in all")
    return problems, f"dashboard: {checked_panels} panels, {checked_rules} rules, all returned data"


if __name__ == "__main__":
    sys.exit(main())
