#!/usr/bin/env bash
# Part of image_test.sh, run by it in a network namespace of its own (so the
# chart's fixed ports are free): engram-shard from the image's root file
# system ROOTFS, as the image's user, with the chart's rendered arguments
# (WORK/args); checked with this machine's engramctl. The outcome's line is
# the last of WORK/serve.log. Environment: ROOTFS WORK BIN REPO PYTHON.
set -uo pipefail
log="$WORK/serve.log"
: >"$log"
say() { echo "image_test: $*" | tee -a "$log"; }
fail() { echo "$*" >>"$log"; exit 1; }
ip link set lo up || fail "ip link set lo up failed in the test's network namespace"

mapfile -t args <"$WORK/args"
port_of() { sed -n "s/^--$1=\(.*:\)\{0,1\}\([0-9]*\)$/\2/p" "$WORK/args"; }
grpc="$(port_of listen)" stream="$(port_of stream-advertise-port)" metrics="$(port_of metrics-port)"
chroot --userspec=10001:10001 "$ROOTFS" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin \
  /usr/local/bin/engram-shard "${args[@]}" >"$WORK/server.log" 2>&1 &
pid=$!
trap 'kill -KILL $pid 2>/dev/null' EXIT
for _ in $(seq 300); do
  grep -q "serving shard" "$WORK/server.log" && break
  kill -0 $pid 2>/dev/null || fail "engram-shard exited in the image: $(tail -1 "$WORK/server.log")"
  sleep 0.1
done
grep -q "serving shard" "$WORK/server.log" || fail "engram-shard did not start in 30 s: $(tail -1 "$WORK/server.log")"
say "$(grep "serving shard" "$WORK/server.log")"

info="$("$BIN/engramctl" info --shards "127.0.0.1:$grpc" 2>&1)" || fail "engramctl info: $info"
say "engramctl info: $info"
grep -q "row stream port $stream\b" <<<"$info" ||
  fail "Info advertises no row stream port $stream (the chart's Service port): $info"

"$BIN/engramctl" lookup --table "$ROOTFS/table" --shards "127.0.0.1:$grpc" --tokens "12 7 99 4 4 4" --json \
  >"$WORK/rows.json" 2>"$WORK/lookup.err" || fail "engramctl lookup: $(tail -1 "$WORK/lookup.err")"
"$PYTHON" "$REPO/tests/check_lookup_json.py" "$ROOTFS/table" "$WORK/rows.json" 6 1 >>"$log" 2>&1 ||
  fail "the rows served from the image differ from the table file"
grep -q "RPCs, [1-9][0-9]* of them answered over the row stream" "$WORK/lookup.err" ||
  fail "the lookup was not answered over the row stream on port $stream: $(cat "$WORK/lookup.err")"
say "engramctl lookup: rows equal the table file's; $(tail -1 "$WORK/lookup.err")"

exec 3<>"/dev/tcp/127.0.0.1/$metrics" || fail "no /metrics on the chart's metrics port $metrics"
printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
grep -q '^engram_shard_rows_total' <&3 || fail "/metrics on port $metrics has no engram_shard_rows_total"
exec 3<&-
say "/metrics served on port $metrics"

kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 0 ] || fail "engram-shard exited $rc on SIGTERM: $(tail -1 "$WORK/server.log")"
say "SIGTERM: engram-shard drained and exited 0"
