#!/usr/bin/env python3
"""Unpacks the OCI archive `make image` writes and checks the image against
the Helm chart and the Dockerfile:

    image_contract.py ARCHIVE WORK_DIR REPO_DIR RENDERED.yaml

- the image's config (from the archive, as a cluster would pull it): USER is
  the chart's securityContext runAsUser:runAsGroup, ENTRYPOINT engram-shard,
  WORKDIR /data, EXPOSE exactly the chart's three ports;
- the Dockerfile says the same (USER, WORKDIR, EXPOSE, ENTRYPOINT);
- the rendered chart runs the entrypoint (no `command` on the server
  container, its arguments start with --db) and its init container's
  /bin/sh and engramctl are in the image, /data is owned by the user.

Unpacks the root file system into WORK_DIR/rootfs (for the live part of
tests/image/image_test.sh). Prints one line per failed check and a last line
"image_contract: N checks, all passed" (exit 0) or "... F failed" (exit 1).
"""
import json
import os
import re
import sys
import tarfile

import yaml


def blob(archive, digest):
    algo, hexdigest = digest.split(":", 1)
    return archive.extractfile(f"blobs/{algo}/{hexdigest}")


def unpack(archive_path, rootfs):
    """Returns the image config; extracts every layer into rootfs."""
    with tarfile.open(archive_path) as archive:
        index = json.load(archive.extractfile("index.json"))
        manifest = json.load(blob(archive, index["manifests"][0]["digest"]))
        config = json.load(blob(archive, manifest["config"]["digest"]))
        os.makedirs(rootfs, exist_ok=True)
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=blob(archive, layer["digest"]), mode="r:*") as t:
                for member in t.getmembers():
                    name = member.name.lstrip("./")
                    if os.path.basename(name).startswith(".wh."):
                        continue  # whiteouts: none in a one-layer image
                    t.extract(member, rootfs, numeric_owner=True)
    return config["config"]


def dockerfile_config(path):
    """The final stage's USER, WORKDIR, EXPOSE and ENTRYPOINT."""
    text = re.sub(r"\\\n", " ", open(path).read())
    stages = re.split(r"(?m)^FROM ", text)
    out = {"EXPOSE": set()}
    for line in stages[-1].splitlines():
        m = re.match(r"(USER|WORKDIR|EXPOSE|ENTRYPOINT)\s+(.*)", line.strip())
        if not m:
            continue
        key, value = m.groups()
        if key == "EXPOSE":
            out["EXPOSE"] |= set(value.split())
        elif key == "ENTRYPOINT":
            out[key] = json.loads(value)
        else:
            out[key] = value.strip()
    return out


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: image_contract.py ARCHIVE WORK_DIR REPO_DIR RENDERED.yaml")
    archive, work, repo, rendered = sys.argv[1:]
    checks, failed = 0, []

    def expect(ok, what):
        nonlocal checks
        checks += 1
        if not ok:
            failed.append(what)
            print(f"FAILED: {what}")

    rootfs = os.path.join(work, "rootfs")
    config = unpack(archive, rootfs)
    values = yaml.safe_load(open(os.path.join(repo, "helm/engram-store/values.yaml")))
    sc = values["securityContext"]
    user = f"{sc['runAsUser']}:{sc['runAsGroup']}"
    ports = {f"{p}/tcp" for p in values["ports"].values()}
    entrypoint = ["/usr/local/bin/engram-shard"]

    expect(config.get("User") == user, f"image USER {config.get('User')!r}, the chart runs as {user}")
    expect(config.get("Entrypoint") == entrypoint, f"image ENTRYPOINT {config.get('Entrypoint')}, want {entrypoint}")
    expect(config.get("WorkingDir") == "/data", f"image WORKDIR {config.get('WorkingDir')!r}, want /data")
    expect(set(config.get("ExposedPorts", {})) == ports,
           f"image EXPOSE {sorted(config.get('ExposedPorts', {}))}, the chart's ports are {sorted(ports)}")

    docker = dockerfile_config(os.path.join(repo, "Dockerfile"))
    expect(docker.get("USER") == user, f"Dockerfile USER {docker.get('USER')!r}, want {user}")
    expect(docker.get("WORKDIR") == "/data", f"Dockerfile WORKDIR {docker.get('WORKDIR')!r}, want /data")
    expect(docker["EXPOSE"] == ports, f"Dockerfile EXPOSE {sorted(docker['EXPOSE'])}, want {sorted(ports)}")
    expect(docker.get("ENTRYPOINT") == entrypoint, f"Dockerfile ENTRYPOINT {docker.get('ENTRYPOINT')}, want {entrypoint}")

    objects = [o for o in yaml.safe_load_all(open(rendered)) if o]
    sets = [o for o in objects if o["kind"] == "StatefulSet"]
    expect(len(sets) >= 1, "the chart renders a StatefulSet")
    for sts in sets:
        pod = sts["spec"]["template"]["spec"]
        name = sts["metadata"]["name"]
        for c in pod["containers"]:
            expect("command" not in c, f"{name}: container {c['name']} runs the image's entrypoint")
            expect(c["args"][0].startswith("--db"), f"{name}: container {c['name']}'s arguments start with --db")
        for c in pod.get("initContainers", []):
            if c["image"] != pod["containers"][0]["image"]:
                continue  # the URL source's fetch image
            program = c["command"][0]
            expect(os.path.exists(rootfs + program), f"{name}: init container {c['name']}'s {program} is in the image")
            expect("engramctl import" in c["args"][0] and os.access(rootfs + "/usr/local/bin/engramctl", os.X_OK),
                   f"{name}: init container {c['name']} runs engramctl, which is in the image")
    st = os.stat(os.path.join(rootfs, "data"))
    expect(f"{st.st_uid}:{st.st_gid}" == user, f"/data owned by {st.st_uid}:{st.st_gid}, want {user}")
    expect(os.path.exists(os.path.join(rootfs, "etc/ssl/certs/ca-certificates.crt")), "CA certificates in the image")

    if failed:
        print(f"image_contract: {checks} checks, {len(failed)} failed")
        return 1
    print(f"image_contract: {checks} checks, all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
