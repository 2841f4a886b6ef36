#!/usr/bin/env bash
# engramctl shardmap (the exact string of a 2x2 Helm deployment, every bad
# input) and engramctl info against two real engram-shard processes (one
# advertising a mapped row stream port), an unreachable address and a wrong
# shard order; activate with tokens; info, lookup and activate over mutual
# TLS.
set -euo pipefail
bin="$1"
tmp="$(mktemp -d)"; pids=()
cleanup() {
  local rc=$?
  [[ $rc -eq 0 ]] || { echo "deploy_cli_test: failed (exit $rc); server logs:" >&2; cat "$tmp"/log* >&2 2>/dev/null; }
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

# fails CMD...: CMD exits non-zero with exactly one line on stderr, which
# starts with the prefix in $want; prints that line.
fails() {
  local err rc
  set +e; err="$("$@" 2>&1 >/dev/null)"; rc=$?; set -e
  if [[ $rc -eq 0 || "$(wc -l <<<"$err")" -ne 1 || "$err" != "$want"* ]]; then
    echo "expected one '$want...' line and a non-zero exit from: $* (rc=$rc): $err"; exit 1
  fi
  echo "$err"
}

# shardmap: the exact string, then each kind of bad input.
svc=engram-store.engram.svc.cluster.local
out="$("$bin/engramctl" shardmap --from-dns "$svc" --shards 2 --replicas 2)"
want_map="engram-store-0-0.$svc:7070|engram-store-0-1.$svc:7070,engram-store-1-0.$svc:7070|engram-store-1-1.$svc:7070"
[[ "$out" == "$want_map" ]] || { echo "shardmap printed: $out"; exit 1; }
[[ "$("$bin/engramctl" shardmap --from-dns es --shards 1 --replicas 1 --port 9000)" == "es-0-0.es:9000" ]]
want="engramctl shardmap: "
sm() { fails "$bin/engramctl" shardmap "$@"; }
sm --shards 2 --replicas 2 | grep -q "needs --from-dns"
sm --from-dns "$svc" --replicas 2 | grep -q "needs --shards K"
sm --from-dns "$svc" --shards 0 --replicas 2 | grep -q "needs --shards K"
sm --from-dns "$svc" --shards two --replicas 2 | grep -q "got 'two'"
sm --from-dns "$svc" --shards 2 | grep -q "needs --replicas R"
sm --from-dns "$svc" --shards 2 --replicas -1 | grep -q "needs --replicas R"
sm --from-dns "$svc" --shards 2 --replicas 2 --port 0 | grep -q "port 0 is outside 1..65535"
sm --from-dns "$svc" --shards 2 --replicas 2 --port 65536 | grep -q "port 65536 is outside"
sm --from-dns Engram.ns --shards 2 --replicas 2 | grep -q "label \"Engram\" has 'E'"
sm --from-dns es_1.ns --shards 2 --replicas 2 | grep -q "has '_'"
sm --from-dns -es.ns --shards 2 --replicas 2 | grep -q "starts or ends with '-'"
sm --from-dns es..ns --shards 2 --replicas 2 | grep -q "empty label"
sm --from-dns "$(printf 'a%.0s' {1..64}).ns" --shards 2 --replicas 2 | grep -q "has 64 characters"
sm --from-dns "$(printf 'a%.0s' {1..60}).ns" --shards 10 --replicas 2 | grep -q "pod name"
sm --from-dns "$svc" --shards 2 --replicas 2 extra | grep -q "flags only"

# info: two shards on 127.0.0.1, shard 1 advertising row stream port 7071.
"$bin/engramctl" gen-table --out "$tmp/table" --preset small --engram-vocab-size 400 --seed 5 >/dev/null
addrs=()
for i in 0 1; do
  "$bin/engramctl" import --table "$tmp/table" --shards 2 --shard-index $i --out "$tmp/s$i" >/dev/null
  extra=(); [[ $i -eq 1 ]] && extra=(--stream-advertise-port 7071)
  "$bin/engram-shard" --db "$tmp/s$i" --listen 127.0.0.1:0 --stream-port 0 "${extra[@]}" > "$tmp/log$i" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do grep -q "serving shard" "$tmp/log$i" && break; sleep 0.1; done
  addrs+=("$(grep -o '127.0.0.1:[0-9]*' "$tmp/log$i" | head -1)")
done
sport0="$(grep -o 'row stream :[0-9]*' "$tmp/log0" | grep -o '[0-9]*$')"

out="$("$bin/engramctl" info --shards "${addrs[0]},${addrs[1]}")"
[[ "$(wc -l <<<"$out")" -eq 2 ]] || { echo "info printed: $out"; exit 1; }
line0="$(sed -n 1p <<<"$out")"; line1="$(sed -n 2p <<<"$out")"
[[ "$line0" =~ ^${addrs[0]}:\ shard\ 0/2\ of\ table\ [^\ ]+\ v1,\ rows\ [0-9]+\ [0-9]+\ .*,\ row\ stream\ port\ $sport0$ ]] \
  || { echo "info line 0: $line0"; exit 1; }
[[ "$line1" =~ ^${addrs[1]}:\ shard\ 1/2\ .*,\ row\ stream\ port\ 7071$ ]] || { echo "info line 1: $line1"; exit 1; }

# An unreachable replica: its line says UNAVAILABLE, the others still print,
# and the exit is non-zero at the end.
dead="127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
set +e; out="$("$bin/engramctl" info --shards "${addrs[0]}|$dead,${addrs[1]}" --timeout 5s)"; rc=$?; set -e
[[ $rc -eq 1 && "$(wc -l <<<"$out")" -eq 3 ]] || { echo "info with $dead: rc=$rc: $out"; exit 1; }
grep -q "^$dead: UNAVAILABLE: " <<<"$out"
grep -q "^${addrs[1]}: shard 1/2 .*row stream port 7071$" <<<"$out"
# Wrong shard order: every line says so.
set +e; out="$("$bin/engramctl" info --shards "${addrs[1]},${addrs[0]}")"; rc=$?; set -e
[[ $rc -eq 1 && "$(grep -c 'MISPLACED: --shards lists it as shard' <<<"$out")" -eq 2 ]] \
  || { echo "swapped info: rc=$rc: $out"; exit 1; }
# Bad input: one line, exit 2.
want="engramctl info: "
fails "$bin/engramctl" info | grep -q "needs --shards ADDRS"
fails "$bin/engramctl" info --shards "${addrs[0]},,${addrs[1]}" | grep -q "shard 1 is empty"
fails "$bin/engramctl" info --shards "${addrs[0]}" --timeout 0s | grep -q "not positive"
# activate: a shard with tokens, switched from version 1 to version 2
# imported beside it; refused without the admin token, and with the data one.
"$bin/engramctl" gen-table --out "$tmp/table2" --preset small --engram-vocab-size 400 --seed 6 \
  --table-version 2 >/dev/null
mkdir -p "$tmp/versions"
"$bin/engramctl" import --table "$tmp/table" --shards 1 --shard-index 0 --out "$tmp/versions/v1" >/dev/null
"$bin/engramctl" import --table "$tmp/table2" --shards 1 --shard-index 0 --out "$tmp/versions/v2" >/dev/null
echo "data-token-0123456789abcdef" > "$tmp/token"
echo "admin-token-0123456789abcdef" > "$tmp/admin-token"
"$bin/engram-shard" --db "$tmp/versions/v1" --listen 127.0.0.1:0 --auth-token-file "$tmp/token" \
  --admin-token-file "$tmp/admin-token" > "$tmp/logv" 2>&1 &
pids+=($!)
for _ in $(seq 600); do grep -q "serving shard" "$tmp/logv" && break; sleep 0.1; done
addr="$(grep -o '127.0.0.1:[0-9]*' "$tmp/logv" | head -1)"
set +e
out="$("$bin/engramctl" activate --shards "$addr" --to-version 2)"; rc=$?
[[ $rc -eq 1 && "$out" == "$addr: UNAUTHENTICATED: "* ]] || { echo "activate, no token: rc=$rc: $out"; exit 1; }
out="$("$bin/engramctl" activate --shards "$addr" --to-version 2 --admin-token-file "$tmp/token")"; rc=$?
[[ $rc -eq 1 && "$out" == "$addr: PERMISSION_DENIED: "* ]] || { echo "activate, data token: rc=$rc: $out"; exit 1; }
out="$("$bin/engramctl" activate --shards "$addr" --to-version 9 --admin-token-file "$tmp/admin-token")"; rc=$?
[[ $rc -eq 1 && "$out" == "$addr: NOT_FOUND: "* ]] || { echo "activate v9: rc=$rc: $out"; exit 1; }
set -e
out="$("$bin/engramctl" activate --shards "$addr" --to-version 2 --admin-token-file "$tmp/admin-token")"
[[ "$out" =~ ^$addr:\ version\ 1\ -\>\ 2\ \(load\ [0-9.]+\ s,\ drain\ [0-9.]+\ s\)$ ]] || { echo "activate: $out"; exit 1; }
out="$("$bin/engramctl" info --shards "$addr" --auth-token-file "$tmp/token")"
[[ "$out" == "$addr: shard 0/1 of table "*" v2, "* ]] || { echo "info after activate: $out"; exit 1; }
set +e; out="$("$bin/engramctl" info --shards "$addr")"; rc=$?; set -e
[[ $rc -eq 1 && "$out" == "$addr: UNAUTHENTICATED: "* ]] || { echo "info, no token: rc=$rc: $out"; exit 1; }
want="engramctl activate: "
fails "$bin/engramctl" activate --shards "$addr" | grep -q "needs --to-version N"
fails "$bin/engramctl" activate --shards "$addr" --to-version 2 --admin-token-file "$tmp/none" \
  | grep -q "cannot read the admin token file"
# TLS: a shard requiring client certificates (made here with openssl);
# info, activate and lookup speak TLS with --tls-ca/--tls-cert/--tls-key.
c="$tmp/certs"; mkdir -p "$c"
ossl() { openssl "$@" >/dev/null 2>&1; }
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=test-ca \
  -keyout "$c/ca.key" -out "$c/ca.pem"
for who in server client; do
  ossl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$who" \
    -keyout "$c/$who.key" -out "$c/$who.csr"
  printf 'subjectAltName=IP:127.0.0.1\n' > "$c/$who.ext"
  ossl x509 -req -in "$c/$who.csr" -CA "$c/ca.pem" -CAkey "$c/ca.key" -CAcreateserial -days 2 \
    -extfile "$c/$who.ext" -out "$c/$who.pem"
done
"$bin/engramctl" import --table "$tmp/table" --shards 1 --shard-index 0 --out "$tmp/stls" >/dev/null
"$bin/engram-shard" --db "$tmp/stls" --listen 127.0.0.1:0 --tls-cert "$c/server.pem" \
  --tls-key "$c/server.key" --tls-ca "$c/ca.pem" > "$tmp/logt" 2>&1 &
pids+=($!)
for _ in $(seq 600); do grep -q "serving shard" "$tmp/logt" && break; sleep 0.1; done
taddr="$(grep -o '127.0.0.1:[0-9]*' "$tmp/logt" | head -1)"
tls=(--tls-ca "$c/ca.pem" --tls-cert "$c/client.pem" --tls-key "$c/client.key")
out="$("$bin/engramctl" info --shards "$taddr" "${tls[@]}")"
[[ "$out" == "$taddr: shard 0/1 of table "*" v1, "* ]] || { echo "info over TLS: $out"; exit 1; }
set +e; out="$("$bin/engramctl" info --shards "$taddr" --timeout 3s)"; rc=$?; set -e
[[ $rc -eq 1 && "$out" == "$taddr: UNAVAILABLE: "* ]] || { echo "info, plaintext to TLS: rc=$rc: $out"; exit 1; }
set +e; out="$("$bin/engramctl" info --shards "$taddr" --timeout 3s --tls-ca "$c/ca.pem")"; rc=$?; set -e
[[ $rc -eq 1 && "$out" == "$taddr: UNAVAILABLE: "* ]] || { echo "info, no client cert: rc=$rc: $out"; exit 1; }
out="$("$bin/engramctl" lookup --table "$tmp/table" --shards "$taddr" --tokens "5 6 7" --values 2 "${tls[@]}" 2>/dev/null)"
[[ "$(grep -c '^pos [0-9] layer ' <<<"$out")" -gt 0 ]] || { echo "lookup over TLS: $out"; exit 1; }
set +e; "$bin/engramctl" activate --shards "$taddr" --to-version 1 "${tls[@]}" >/dev/null; rc=$?; set -e
[[ $rc -eq 0 ]] || { echo "activate over TLS (a no-op) failed: rc=$rc"; exit 1; }
want="engramctl info: "
fails "$bin/engramctl" info --shards "$taddr" --tls-cert "$c/client.pem" --tls-key "$c/client.key" \
  | grep -q "need --tls-ca"
fails "$bin/engramctl" info --shards "$taddr" --tls-ca "$c/ca.pem" --tls-cert "$c/client.pem" \
  | grep -q "together"
fails "$bin/engramctl" info --shards "$taddr" --tls-ca "$c/none.pem" | grep -q "none.pem"
echo "deploy CLI: all checks passed"
