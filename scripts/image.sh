#!/usr/bin/env bash
# Builds the engram-store container image without Docker, with buildah:
#
#   scripts/image.sh BUILD_DIR [TAG]     image engram-store:TAG from BUILD_DIR/bin
#   scripts/image.sh --inputs-hash BUILD_DIR
#                                        prints the hash of what goes into the image
#
# The image is assembled, not built: a scratch container is mounted and given
# this machine's engram-shard and engramctl (debug sections stripped), the
# shared libraries they load (ldd) with the dynamic loader, a /bin/sh
# (busybox-static when installed, else dash and a few coreutils), /etc/passwd
# and /etc/group with the user engram 10001:10001, the CA certificates, /tmp
# and /data (owned by 10001). Nothing has to run inside the image to make
# it, so neither a container runtime nor a Docker daemon is needed (the
# binaries and the shell are then tried under chroot). The Dockerfile at the
# top of the tree makes the same image where Docker is at hand.
#
# TAG defaults to appVersion of helm/engram-store/Chart.yaml, else 0.1.0.
# buildah's storage (vfs driver: no kernel mounts) and its temporary files
# live in BUILD_DIR/image/, so nothing outside the build directory is
# touched; buildah knows the image there as localhost/engram-store:TAG. It is
# also written to a file, ENGRAM_IMAGE_ARCHIVE=oci (default):
# BUILD_DIR/image/engram-store-TAG.oci.tar (skopeo copy, podman load,
# ctr import); =docker: engram-store-TAG.docker.tar (docker load, kind load
# image-archive); =none: no file.
#
# Needs root (buildah's storage and mounts, chroot), buildah, strip and
# python3. The last line on success is
#   image: engram-store:TAG built (N MB, USER 10001:10001, ENTRYPOINT [...])
# with N the uncompressed size; on a missing prerequisite the script exits 1
# with one line saying why and what to do.
set -euo pipefail

die() {
  echo "image: $*" >&2
  exit 1
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
self="$here/scripts/image.sh"

mode=build
if [ "${1:-}" = "--inputs-hash" ]; then
  mode=hash
  shift
fi
[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: scripts/image.sh BUILD_DIR [TAG] | --inputs-hash BUILD_DIR"
[ -d "$1" ] || die "no build directory $1 (run make build first)"
build="$(cd "$1" && pwd)"

NAME=engram-store
BINARIES=(engram-shard engramctl)
UID_GID=10001:10001
PORTS=(7070/tcp 7071/tcp 9090/tcp) # grpc, stream, metrics (the chart's ports)
ENTRYPOINT='["/usr/local/bin/engram-shard"]'
# The chart's arguments, so that `docker run -v SHARD:/data IMAGE` serves the
# shard imported to /data/shard on the EXPOSEd ports (the chart gives its
# own args, which replace these).
CMD='["--db","/data/shard","--listen=0.0.0.0:7070","--stream-port=7071","--metrics-port=9090"]'
# busybox applets linked as commands: the shell and what scripts in the pod
# (the chart's init container, kubectl exec) use.
APPLETS=(sh ash '[' '[[' test echo printf true false env id pwd sleep date kill ps
  mkdir rmdir mv rm cp ln ls cat chmod touch readlink realpath dirname basename
  head tail wc grep sed find du df stat sync tar)
# Without busybox: dash and these coreutils/grep/sed/findutils commands.
FALLBACK_COMMANDS=(mkdir rmdir mv rm cp ln ls cat chmod touch readlink realpath
  dirname basename head tail wc sleep env id date du df stat sync grep sed find)

for b in "${BINARIES[@]}"; do
  [ -x "$build/bin/$b" ] || die "no $build/bin/$b (run make build first)"
done
command -v ldd >/dev/null || die "ldd is missing (install libc-bin)"

# The shell that goes into the image: a static busybox when there is one.
shell_binary() {
  local bb
  if [ "${ENGRAM_IMAGE_SHELL:-busybox}" = busybox ]; then
    for bb in /usr/bin/busybox /bin/busybox; do
      if [ -x "$bb" ]; then
        echo "$bb"
        return
      fi
    done
  fi
  command -v dash || die "no busybox and no dash to put in the image as /bin/sh (apt-get install busybox-static)"
}
shell="$(shell_binary)"

# The absolute paths of the shared libraries (and the loader) FILE loads;
# nothing for a static executable.
libs_of() {
  local out
  if ! out="$(LC_ALL=C ldd "$1" 2>&1)"; then
    case "$out" in
      *"not a dynamic executable"* | *"statically linked"*) return 0 ;;
    esac
    die "ldd $1 failed: ${out//$'\n'/ }"
  fi
  if grep -q "not found" <<<"$out"; then
    die "$1 needs libraries this machine lacks: $(grep 'not found' <<<"$out" | tr -s ' \t\n' ' ')"
  fi
  awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$out"
}

# Every file of the image that comes from this machine, one path a line.
host_files() {
  local f
  {
    for b in "${BINARIES[@]}"; do libs_of "$build/bin/$b"; done
    libs_of "$shell"
    if [ "$(basename "$shell")" = dash ]; then
      for c in "${FALLBACK_COMMANDS[@]}"; do
        f="$(command -v "$c")" || die "no $c for the image's shell tools (apt-get install busybox-static)"
        echo "$f"
        libs_of "$f"
      done
    fi
  } | sort -u
}

ca_bundle=/etc/ssl/certs/ca-certificates.crt
[ -r "$ca_bundle" ] || die "no $ca_bundle (apt-get install ca-certificates)"

# What the image is made of: the binaries, this script, the shell and the
# host files with their contents. The image carries it as a label, so a
# caller (tests/image/image_test.sh) can tell whether an image is current.
inputs_hash() {
  {
    sha256sum "${BINARIES[@]/#/$build/bin/}" "$self" "$shell" "$ca_bundle"
    host_files | xargs -r sha256sum
  } | sha256sum | cut -c1-64
}

if [ "$mode" = hash ]; then
  inputs_hash
  exit 0
fi

# --- prerequisites of the build itself ---------------------------------------
[ "$(id -u)" -eq 0 ] || die "cannot build the image: not root (buildah's storage and mounts need root here; run sudo make image)"
command -v buildah >/dev/null || die "cannot build the image: buildah is missing (apt-get install buildah, or make setup)"
command -v strip >/dev/null || die "cannot build the image: strip is missing (apt-get install binutils)"
command -v python3 >/dev/null || die "cannot build the image: python3 is missing (apt-get install python3)"

tag="${2:-}"
if [ -z "$tag" ]; then
  chart="$here/helm/engram-store/Chart.yaml"
  if [ -f "$chart" ]; then
    tag="$(sed -n 's/^appVersion:[[:space:]]*["'"'"']\{0,1\}\([^"'"'"'[:space:]]*\).*/\1/p' "$chart" | head -1)"
  fi
  tag="${tag:-0.1.0}"
fi
ref="localhost/$NAME:$tag" # buildah's name for it (a short name would be resolved)

out="$build/image"
case "${ENGRAM_IMAGE_ARCHIVE:-oci}" in
  oci) archive_format=oci-archive archive="$out/$NAME-$tag.oci.tar" ;;
  docker) archive_format=docker-archive archive="$out/$NAME-$tag.docker.tar" ;;
  none) archive="" ;;
  *) die "ENGRAM_IMAGE_ARCHIVE is oci, docker or none, not '$ENGRAM_IMAGE_ARCHIVE'" ;;
esac
mkdir -p "$out/tmp"
export TMPDIR="$out/tmp" # buildah's temporary files (commit, push)
# One storage, inside the build directory, for every buildah command here.
# vfs: plain directory copies, which work on any file system and in a
# container; overlay also works on this machine but leaves kernel mounts.
driver="${ENGRAM_IMAGE_STORAGE_DRIVER:-vfs}"
# buildah's own settings, instead of /etc/containers/containers.conf: the
# network backend's lock and configurations (every buildah command takes
# the lock) in BUILD_DIR/image/cni instead of /etc/cni/net.d.
mkdir -p "$out/cni"
cat >"$out/containers.conf" <<EOF
[network]
network_backend = "cni"
network_config_dir = "$out/cni"
EOF
export CONTAINERS_CONF="$out/containers.conf"
bah() {
  buildah --root "$out/storage" --runroot "$out/runroot" --storage-driver "$driver" "$@"
}
# commit and push (containers/image's copy) also keep a blob-info cache,
# which buildah 1.28 puts in /var/lib/containers/cache for root whatever
# --root says, and no setting moves. containers/image takes the user from
# _CONTAINERS_ROOTLESS_UID when it is set, and a non-root user's cache is in
# $XDG_DATA_HOME: so, for these two commands only, the cache and the other
# per-user directories they then use are in BUILD_DIR/image/user/.
bah_copy() {
  _CONTAINERS_ROOTLESS_UID=10001 XDG_DATA_HOME="$out/user/data" XDG_CONFIG_HOME="$out/user/config" \
    XDG_RUNTIME_DIR="$out/user/run" bah "$@"
}
mkdir -p "$out/user/run"
chmod 0700 "$out/user/run"

started=$(date +%s)
hash="$(inputs_hash)"
ctr="$NAME-image-build"
bah rm "$ctr" >/dev/null 2>&1 || true # a container left by an interrupted run
bah from --name "$ctr" scratch >/dev/null
cleanup() {
  bah umount "$ctr" >/dev/null 2>&1 || true
  bah rm "$ctr" >/dev/null 2>&1 || true
}
trap cleanup EXIT
root="$(bah mount "$ctr")"

# --- the root file system ------------------------------------------------------
# Debian's merged-/usr layout, so the paths ldd prints (/lib/..., /lib64/...)
# are valid in the image as they are on this machine.
mkdir -p "$root"/usr/{bin,sbin,lib,lib64,local/bin} "$root"/{etc,dev,proc,sys,root,run,data}
ln -s usr/bin "$root/bin"
ln -s usr/sbin "$root/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
install -d -m 1777 "$root/tmp"
chmod 0700 "$root/root"
chown "$UID_GID" "$root/data"

for b in "${BINARIES[@]}"; do
  # Debug sections out (they are most of the size); the symbol table stays
  # for the stack traces of absl's failure handler.
  strip --strip-debug -o "$root/usr/local/bin/$b" "$build/bin/$b"
  chmod 0755 "$root/usr/local/bin/$b"
done

host_files >"$out/tmp/host-files"
while read -r f; do
  mkdir -p "$root$(dirname "$f")"
  cp -L --preserve=mode "$f" "$root$f"
done <"$out/tmp/host-files"

if [ "$(basename "$shell")" = busybox ]; then
  cp -L --preserve=mode "$shell" "$root/usr/bin/busybox"
  have="$("$shell" --list)"
  for a in "${APPLETS[@]}"; do
    grep -qxF -- "$a" <<<"$have" || die "$shell has no applet $a"
    ln -s busybox "$root/usr/bin/$a"
  done
else
  cp -L --preserve=mode "$shell" "$root/usr/bin/dash"
  ln -s dash "$root/usr/bin/sh"
fi

mkdir -p "$root/etc/ssl/certs"
cp "$ca_bundle" "$root/etc/ssl/certs/ca-certificates.crt"
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
engram:x:10001:10001:engram-store:/data:/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
engram:x:10001:
EOF
# glibc's files and dns lookups are part of libc.so.6 (2.34 and later).
cat >"$root/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
hosts: files dns
EOF

# Which Debian packages the libraries and the shell come from, as a label
# (nothing in the image is a dpkg database for scanners to read). One dpkg -S
# for all paths, each as ldd printed it, resolved, and with /usr added or
# removed (merged /usr: dpkg knows one spelling).
packages="$( (cat "$out/tmp/host-files"; echo "$shell") | while read -r f; do
  r="$(readlink -f "$f")"
  printf '%s\n' "$f" "$r" "${f#/usr}" "/usr${f#/usr}" "${r#/usr}" "/usr${r#/usr}"
done | sort -u | xargs dpkg -S 2>/dev/null | cut -d: -f1 | tr ', ' '\n\n' | grep . |
  sort -u | xargs -r dpkg-query -W -f='${Package}=${Version} ' 2>/dev/null || true)"

# The image's binaries run in it (chroot: no container runtime needed).
for b in "${BINARIES[@]}"; do
  if ! chroot "$root" "/usr/local/bin/$b" --help >/dev/null 2>"$out/tmp/chroot.err"; then
    die "chroot $root /usr/local/bin/$b --help failed: $(head -c 300 "$out/tmp/chroot.err" | tr '\n' ' ')"
  fi
done
chroot "$root" /bin/sh -c 'test -d /data && mkdir /tmp/x && mv /tmp/x /tmp/y && rm -r /tmp/y' ||
  die "chroot $root /bin/sh -c '...' failed: the image's /bin/sh or its commands do not run"
echo "image: chroot $root: engram-shard --help, engramctl --help and /bin/sh ran"

# --- the image's configuration -----------------------------------------------------
revision="$(git -C "$here" rev-parse HEAD 2>/dev/null || echo unknown)"
if [ "$revision" != unknown ] && ! git -C "$here" diff --quiet HEAD 2>/dev/null; then
  revision="$revision-dirty"
fi
config=(--os linux --arch "$(dpkg --print-architecture 2>/dev/null || echo amd64)"
  --user "$UID_GID" --workingdir /data
  --entrypoint "$ENTRYPOINT" --cmd "$CMD"
  --env PATH=/usr/local/bin:/usr/bin:/bin
  --label org.opencontainers.image.title=engram-store
  --label "org.opencontainers.image.description=Engram table shard server (engram-shard) and engramctl"
  --label org.opencontainers.image.version="$tag"
  --label org.opencontainers.image.revision="$revision"
  --label org.opencontainers.image.created="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  --label org.opencontainers.image.base.name=scratch
  --label engram.io/image-inputs="$hash"
  --label "engram.io/debian-packages=${packages% }")
for p in "${PORTS[@]}"; do config+=(--port "$p"); done
bah config "${config[@]}" "$ctr"

# buildah run is tried, not needed (everything above was checked under
# chroot): its default isolation needs a container runtime (runc or crun);
# --isolation chroot needs none and runs as the image's USER in WORKDIR.
if run_out="$(bah run --network none "$ctr" -- /usr/local/bin/engram-shard --help 2>&1 >/dev/null)"; then
  echo "image: buildah run: engram-shard --help ran"
else
  echo "image: buildah run (not needed) failed: $(tr '\n' ' ' <<<"$run_out")"
fi
if run_out="$(bah run --isolation chroot "$ctr" -- /bin/sh -c \
  '/usr/local/bin/engram-shard --help >/dev/null && echo "$(id -u):$(id -g) in $(pwd)"' 2>&1)"; then
  echo "image: buildah run --isolation chroot: engram-shard --help ran as $run_out"
else
  echo "image: buildah run --isolation chroot (not needed) failed: $(tr '\n' ' ' <<<"$run_out")"
fi

mb="$(du -sm "$root" | cut -f1)" # uncompressed
bah umount "$ctr" >/dev/null
old_id="$(bah images --no-trunc --noheading --format '{{.ID}}' "$ref" 2>/dev/null || true)"
bah_copy commit --rm --quiet "$ctr" "$ref" >/dev/null
trap - EXIT
# The image this tag named before, now untagged, goes.
new_id="$(bah images --no-trunc --noheading --format '{{.ID}}' "$ref")"
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
  bah rmi "$old_id" >/dev/null 2>&1 || true
fi

if [ -n "$archive" ]; then
  rm -f "$archive"
  bah_copy push --quiet "$ref" "$archive_format:$archive:$NAME:$tag" >/dev/null
  echo "image: wrote $archive ($(($(stat -c %s "$archive") / 1000000)) MB)"
fi
rm -rf "$out/tmp"/*

# The truth of what was committed, from the image's own configuration.
summary="$(bah inspect --type image "$ref" | python3 -c '
import json, sys
config = json.load(sys.stdin)["OCIv1"]["config"]
print(config.get("User", "?"), json.dumps(config.get("Entrypoint")))
')" || die "buildah inspect --type image $ref failed"
echo "image: took $(($(date +%s) - started)) s"
echo "image: $NAME:$tag built ($mb MB, USER ${summary%% *}, ENTRYPOINT ${summary#* })"
