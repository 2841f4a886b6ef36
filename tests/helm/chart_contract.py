#!/usr/bin/env python3
"""Checks a rendering of helm/engram-store against what its parts promise
each other, beyond the API schemas (tests/helm/validate.mjs):

    chart_contract.py [--import-flag NAME=VALUE]... [--no-import-flag NAME]...
                      RENDERED.yaml REPO_DIR [ENGRAMCTL]

- every container and Service names the ports grpc, stream and metrics, with
  the same numbers, and the server's flags use them: the row stream port it
  advertises (--stream-advertise-port) is the one on every Service;
- the headless Service selects every shard server pod, each shard's Service
  and PodDisruptionBudget and anti-affinity term exactly that shard's pods;
- the shard-map ConfigMap lists each StatefulSet's pods by their DNS names
  under the headless Service, shard 0 first (and equals what
  `ENGRAMCTL shardmap --from-dns` prints for it, when ENGRAMCTL is given);
- each shard's init container imports that shard index of that shard count
  into the directory the server serves, from exactly one source (--table,
  --checkpoint or --gguf) that the pod can read: under the read-only table
  volume's mount, or (a table only) the directory the fetch-table init
  container downloads into; the profile trace is in the source's directory;
  a checkpoint or GGUF is imported as the pod's table version
  (--table-version), a table with its own;
- with --import-flag NAME=VALUE, every import passes --NAME VALUE; with
  --no-import-flag NAME, none passes --NAME (the expected command for the
  values rendered);
- memory request = limit, above --ram-budget; probes on the gRPC port;
- TLS and auth flags name files of mounted Secrets;
- the PrometheusRule holds files/prometheus-rules.yaml, the dashboard
  ConfigMap files/grafana-dashboard.json, and the ServiceMonitor
  scrapes the metrics port of the headless Service only.

Prints one line per failed check and a last line
"chart_contract: N checks, all passed" (exit 0) or "... F failed" (exit 1).
"""
import json
import posixpath
import re
import shlex
import subprocess
import sys

import yaml

PORT_NAMES = ["grpc", "stream", "metrics"]
# engramctl import's source flags: exactly one is given.
SOURCE_FLAGS = ["table", "checkpoint", "gguf"]


class Checker:
    def __init__(self):
        self.count = 0
        self.failed = []

    def expect(self, ok, what):
        self.count += 1
        if not ok:
            self.failed.append(what)
            print(f"FAILED: {what}")
        return ok


def flags(args):
    """--name=value (or --name value) arguments as a dict; bare flags map to True."""
    out, i = {}, 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            if "=" in a:
                k, v = a[2:].split("=", 1)
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                k, v = a[2:], args[i + 1]
                i += 1
            else:
                k, v = a[2:], True
            out[k] = v
        i += 1
    return out


def import_args(script):
    """The arguments of the `engramctl import` command in an init script
    (its lines joined where they end in a backslash), as the shell splits
    them; None when there is none."""
    for line in script.replace("\\\n", " ").splitlines():
        words = shlex.split(line)
        if words[:2] == ["engramctl", "import"]:
            return words[2:]
    return None


def under(path, directory):
    path, directory = posixpath.normpath(path), posixpath.normpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def mebibytes(quantity):
    m = re.fullmatch(r"([0-9]+)(Mi|Gi)", str(quantity))
    return int(m.group(1)) * (1024 if m.group(2) == "Gi" else 1) if m else None


def main():
    usage = ("usage: chart_contract.py [--import-flag NAME=VALUE]... [--no-import-flag NAME]... "
             "RENDERED.yaml REPO_DIR [ENGRAMCTL]")
    argv, want_import, no_import = sys.argv[1:], {}, []
    while argv and argv[0] in ("--import-flag", "--no-import-flag"):
        if len(argv) < 2:
            sys.exit(usage)
        if argv[0] == "--import-flag":
            if "=" not in argv[1]:
                sys.exit(usage)
            k, v = argv[1].split("=", 1)
            want_import[k] = v
        else:
            no_import.append(argv[1])
        argv = argv[2:]
    if len(argv) not in (2, 3):
        sys.exit(usage)
    rendered, repo = argv[0], argv[1]
    engramctl = argv[2] if len(argv) == 3 else None
    with open(rendered) as f:
        objects = [o for o in yaml.safe_load_all(f) if o]
    c = Checker()
    by_kind = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(o)

    sets = sorted(by_kind.get("StatefulSet", []), key=lambda s: int(s["metadata"]["name"].rsplit("-", 1)[1]))
    services = by_kind.get("Service", [])
    headless = [s for s in services if s["spec"].get("clusterIP") == "None"]
    c.expect(len(sets) >= 1, "at least one StatefulSet")
    c.expect(len(headless) == 1, "exactly one headless Service")
    if not sets or len(headless) != 1:
        return finish(c)
    headless = headless[0]
    svc_name = headless["metadata"]["name"]
    namespace = "engram"  # chart_test.sh renders into this namespace
    domain = f"{svc_name}.{namespace}.svc.cluster.local"
    n_shards = len(sets)
    container_ports = None
    expected_map = []

    for index, sts in enumerate(sets):
        name = sts["metadata"]["name"]
        spec = sts["spec"]
        pod = spec["template"]
        pod_labels = pod["metadata"]["labels"]
        c.expect(name.endswith(f"-{index}"), f"StatefulSet {name} is shard {index}")
        c.expect(pod_labels.get("engram.io/shard") == str(index), f"{name}: pods labelled engram.io/shard={index}")
        c.expect(selects(spec["selector"]["matchLabels"], pod_labels), f"{name}: selector matches its pods")
        c.expect(spec["serviceName"] == svc_name, f"{name}: serviceName is the headless Service")
        c.expect(selects(headless["spec"]["selector"], pod_labels), f"headless Service selects {name}'s pods")
        replicas = spec["replicas"]
        expected_map.append("|".join(f"{name}-{r}.{domain}" for r in range(replicas)))

        server = [k for k in pod["spec"]["containers"] if k["name"] == "shard"]
        if not c.expect(len(server) == 1, f"{name}: one container named shard"):
            continue
        server = server[0]
        ports = {p["name"]: p["containerPort"] for p in server.get("ports", [])}
        c.expect(sorted(ports) == sorted(PORT_NAMES), f"{name}: container ports named {PORT_NAMES}, got {sorted(ports)}")
        if container_ports is None:
            container_ports = ports
        c.expect(ports == container_ports, f"{name}: same container ports as the other shards")
        f = flags(server["args"])
        listen_port = int(str(f.get("listen", ":")).rsplit(":", 1)[1] or 0)
        c.expect(listen_port == ports.get("grpc"), f"{name}: --listen port {listen_port} is the grpc port")
        c.expect(int(f.get("stream-port", -2)) == ports.get("stream"), f"{name}: --stream-port is the stream port")
        c.expect(int(f.get("stream-advertise-port", -2)) == ports.get("stream"),
                 f"{name}: --stream-advertise-port is the stream port")
        c.expect(int(f.get("metrics-port", -2)) == ports.get("metrics"), f"{name}: --metrics-port is the metrics port")
        db = f.get("db")

        imports = [k for k in pod["spec"].get("initContainers", []) if k["name"] == "import"]
        if c.expect(len(imports) == 1, f"{name}: an import init container"):
            script = " ".join(imports[0].get("command", []) + imports[0].get("args", []))
            m = re.search(r"engramctl import .*?--shards (\d+) --shard-index (\d+)", script, re.S)
            c.expect(m and int(m.group(1)) == n_shards and int(m.group(2)) == index,
                     f"{name}: imports shard {index} of {n_shards}")
            c.expect(f"dir={db}\n" in script and 'mv "$dir.importing" "$dir"' in script,
                     f"{name}: imports into the served directory {db}")
            check_import_source(c, name, pod, imports[0], want_import, no_import)

        res = server.get("resources", {})
        req, lim = res.get("requests", {}).get("memory"), res.get("limits", {}).get("memory")
        budget = re.fullmatch(r"([0-9]+)M", str(f.get("ram-budget", "")))
        c.expect(req == lim and mebibytes(lim) is not None, f"{name}: memory request {req} = limit {lim}")
        c.expect(budget and mebibytes(lim) and mebibytes(lim) > int(budget.group(1)),
                 f"{name}: memory limit {lim} above --ram-budget {f.get('ram-budget')}")

        tls = "tls-cert" in f
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            p = server.get(probe, {})
            ok = (p.get("tcpSocket", {}).get("port") == "grpc") if tls else (p.get("grpc", {}).get("port") == ports.get("grpc"))
            c.expect(ok, f"{name}: {probe} on the gRPC port ({'tcp' if tls else 'gRPC health'})")

        mounts = {m["mountPath"]: m["name"] for m in server.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        for flag in ("tls-cert", "tls-key", "tls-ca", "auth-token-file", "admin-token-file"):
            if flag in f:
                directory = f[flag].rsplit("/", 1)[0]
                vol = volumes.get(mounts.get(directory, ""), {})
                c.expect("secret" in vol, f"{name}: --{flag} {f[flag]} is in a mounted Secret")

        aff = pod["spec"].get("affinity", {}).get("podAntiAffinity", {})
        terms = aff.get("requiredDuringSchedulingIgnoredDuringExecution", []) + \
            [t["podAffinityTerm"] for t in aff.get("preferredDuringSchedulingIgnoredDuringExecution", [])]
        for t in terms:
            sel = t["labelSelector"]["matchLabels"]
            others = [s for s in sets if s is not sts and selects(sel, s["spec"]["template"]["metadata"]["labels"])]
            c.expect(selects(sel, pod_labels) and not others, f"{name}: anti-affinity spreads this shard's pods only")

        pdbs = [p for p in by_kind.get("PodDisruptionBudget", []) if selects(p["spec"]["selector"]["matchLabels"], pod_labels)]
        if by_kind.get("PodDisruptionBudget"):
            c.expect(len(pdbs) == 1 and pdbs[0]["spec"].get("maxUnavailable") == 1,
                     f"{name}: one PodDisruptionBudget, maxUnavailable 1")
            for p in pdbs:
                others = [s for s in sets if s is not sts and
                          selects(p["spec"]["selector"]["matchLabels"], s["spec"]["template"]["metadata"]["labels"])]
                c.expect(not others, f"{p['metadata']['name']}: selects shard {index}'s pods only")

        shard_svcs = [s for s in services if s is not headless and selects(s["spec"]["selector"], pod_labels)]
        c.expect(len(shard_svcs) == 1, f"{name}: one ClusterIP Service for the shard")
        for s in shard_svcs:
            others = [o for o in sets if o is not sts and selects(s["spec"]["selector"], o["spec"]["template"]["metadata"]["labels"])]
            c.expect(not others, f"Service {s['metadata']['name']} selects shard {index}'s pods only")

    for s in services:
        ports = {p["name"]: (p["port"], p.get("targetPort")) for p in s["spec"]["ports"]}
        want = {n: (container_ports.get(n), n) for n in PORT_NAMES} if container_ports else {}
        c.expect(ports == want, f"Service {s['metadata']['name']}: ports {ports}, want {want} "
                 "(the advertised row stream port must be the Service's)")

    grpc_port = container_ports.get("grpc") if container_ports else 0
    expected = ",".join("|".join(f"{a}:{grpc_port}" for a in shard.split("|")) for shard in expected_map)
    maps = [m for m in by_kind.get("ConfigMap", []) if "shard-map" in m.get("data", {})]
    if c.expect(len(maps) == 1, "one ConfigMap with the shard map"):
        c.expect(maps[0]["data"]["shard-map"] == expected,
                 f"shard-map {maps[0]['data']['shard-map']!r}, want {expected!r}")
        if engramctl:
            replicas = sets[0]["spec"]["replicas"]
            out = subprocess.run([engramctl, "shardmap", "--from-dns", domain, "--shards", str(n_shards),
                                  "--replicas", str(replicas), "--port", str(grpc_port)],
                                 capture_output=True, text=True)
            c.expect(out.returncode == 0 and out.stdout.strip() == expected,
                     f"engramctl shardmap --from-dns {domain} printed {out.stdout.strip()!r} {out.stderr.strip()}")

    for rule in by_kind.get("PrometheusRule", []):
        with open(f"{repo}/helm/engram-store/files/prometheus-rules.yaml") as f:
            c.expect(rule["spec"] == yaml.safe_load(f), "PrometheusRule spec is files/prometheus-rules.yaml")
    dashboards = [m for m in by_kind.get("ConfigMap", []) if "engram-store.json" in m.get("data", {})]
    for m in dashboards:
        with open(f"{repo}/helm/engram-store/files/grafana-dashboard.json") as f:
            c.expect(json.loads(m["data"]["engram-store.json"]) == json.load(f),
                     "dashboard ConfigMap holds files/grafana-dashboard.json")
        c.expect(any(v == "1" for v in m["metadata"]["labels"].values()), "dashboard ConfigMap has the sidecar label")
    for sm in by_kind.get("ServiceMonitor", []):
        chosen = [s for s in services if selects(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
        c.expect(chosen == [headless], "ServiceMonitor selects the headless Service only")
        c.expect([e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"], "ServiceMonitor scrapes the metrics port")
        relabel = {r["targetLabel"] for r in sm["spec"]["endpoints"][0].get("relabelings", [])}
        c.expect({"job", "shard", "replica"} <= relabel, "ServiceMonitor sets job, shard and replica")
    return finish(c)


def check_import_source(c, name, pod, init, want, absent):
    """The import's source: one flag, a path the init container can read, the
    profile trace beside it, the table version; then the expected flags."""
    args = import_args(init.get("args", [""])[0])
    if not c.expect(args is not None, f"{name}: the import init container runs engramctl import"):
        return
    f = flags(args)
    given = [k for k in SOURCE_FLAGS if k in f]
    if not c.expect(len(given) == 1, f"{name}: engramctl import has exactly one source flag, got {given}"):
        return
    kind, path = given[0], str(f[given[0]])
    # The directory the source is in: the table or checkpoint directory, the GGUF's.
    src_dir = posixpath.dirname(path) if kind == "gguf" else path
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    mounted = [m["mountPath"] for m in init.get("volumeMounts", [])
               if m["name"] == "table" and m.get("readOnly") and "table" in volumes]
    fetch = [k for k in pod["spec"].get("initContainers", []) if k["name"] == "fetch-table"]
    if fetch:
        fetch_script = fetch[0].get("args", [""])[0]
        c.expect(kind == "table" and f"mkdir -p {path}\n" in fetch_script,
                 f"{name}: --{kind} {path} is the directory fetch-table downloads the table into")
        if "profile-trace" in f:
            c.expect(re.search(r"for f in [^;]*\b" + re.escape(posixpath.basename(str(f["profile-trace"]))) + r"\b",
                               fetch_script) is not None,
                     f"{name}: fetch-table downloads the profile trace {f['profile-trace']}")
    else:
        c.expect(any(under(src_dir, m) for m in mounted),
                 f"{name}: --{kind} {path} is in the table volume mounted read-only (mounts {mounted})")
    if kind == "gguf":
        c.expect(path.endswith(".gguf"), f"{name}: --gguf {path} names a .gguf file")
    if "profile-trace" in f:
        trace = str(f["profile-trace"])
        c.expect(posixpath.dirname(trace) == posixpath.normpath(src_dir),
                 f"{name}: --profile-trace {trace} is in the source's directory {src_dir}")
    version = pod["metadata"].get("annotations", {}).get("engram.io/table-version")
    if kind == "table":
        c.expect("table-version" not in f, f"{name}: a table is imported with its own version (no --table-version)")
    else:
        c.expect(str(f.get("table-version")) == version,
                 f"{name}: --{kind} is imported as the pod's table version {version}, "
                 f"got --table-version {f.get('table-version')}")
    for k, v in want.items():
        c.expect(k in f and str(f[k]) == v, f"{name}: engramctl import --{k} {f.get(k)}, want {v}")
    for k in absent:
        c.expect(k not in f, f"{name}: engramctl import without --{k}, got --{k} {f.get(k)}")


def finish(c):
    if c.failed:
        print(f"chart_contract: {c.count} checks, {len(c.failed)} failed")
        return 1
    print(f"chart_contract: {c.count} checks, all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
