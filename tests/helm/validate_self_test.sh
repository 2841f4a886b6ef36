#!/usr/bin/env bash
# Checks that tests/helm/validate.mjs accepts valid objects and rejects each
# kind of fault it exists for (schema, unknown kind, unknown field, names,
# labels, YAML). Exits 77 (skip) without node or the tools' npm packages.
#
#   bash tests/helm/validate_self_test.sh
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
validate="$here/validate.mjs"
tools="$here/../../tools"
if ! command -v node >/dev/null 2>&1; then
  echo "validate_self_test: skipped: node is not installed"; exit 77
fi
if [ ! -d "$tools/node_modules/kubernetes-models" ]; then
  echo "validate_self_test: skipped: no tools/node_modules (run scripts/setup.sh)"; exit 77
fi

passed=0
failed=0

# expect NAME WANT_EXIT PATTERN: runs the validator on stdin and checks its
# exit code and that its output contains PATTERN (a fixed string).
expect() {
  local name="$1" want="$2" pattern="$3" out rc
  out="$(node "$validate" 2>&1)"
  rc=$?
  if [ "$rc" -eq "$want" ] && grep -qF -- "$pattern" <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: $name: want exit $want and \"$pattern\", got exit $rc:"
    sed 's/^/  | /' <<<"$out"
  fi
}

expect "valid objects" 0 "validate: 4 objects, all valid" <<'YAML'
# A comment-only document, as a template may render: skipped.
---
apiVersion: v1
kind: Service
metadata:
  name: engram-store
  labels: {app.kubernetes.io/name: engram-store}
spec:
  clusterIP: None
  selector: {app.kubernetes.io/name: engram-store}
  ports: [{name: grpc, port: 7070, targetPort: grpc}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: engram-store-0}
spec:
  serviceName: engram-store
  selector: {matchLabels: {engram.io/shard: "0"}}
  template:
    metadata: {labels: {engram.io/shard: "0"}}
    spec:
      containers: [{name: shard, image: "engram-store:0.1.0", args: [--db, /data/shard]}]
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: engram-store}
spec:
  selector: {matchLabels: {app.kubernetes.io/name: engram-store}}
  endpoints: [{port: metrics, relabelings: [{targetLabel: job, replacement: engram-shard}]}]
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: {name: engram-store}
spec:
  groups: [{name: engram, rules: [{alert: EngramShardDown, expr: 'up{job="engram-shard"} == 0', for: 5m}]}]
YAML

expect "port is a string" 1 "data/spec/ports/0/port must be integer" <<'YAML'
apiVersion: v1
kind: Service
metadata: {name: engram-store}
spec:
  ports: [{name: grpc, port: abc}]
YAML

expect "StatefulSet without selector" 1 "data/spec must have required property selector" <<'YAML'
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: engram-store-0}
spec:
  serviceName: engram-store
  template:
    spec:
      containers: [{name: shard, image: engram-store}]
YAML

expect "unknown kind" 1 "unknown kind Shard of apiVersion engram.io/v1" <<'YAML'
apiVersion: engram.io/v1
kind: Shard
metadata: {name: engram-store-0}
YAML

expect "kind of another apiVersion" 1 "unknown kind StatefulSet of apiVersion v1" <<'YAML'
apiVersion: v1
kind: StatefulSet
metadata: {name: engram-store-0}
YAML

expect "misspelt field" 1 "unknown field /spec/template/spec/containers/0/imagePullPolicey" <<'YAML'
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: engram-store-0}
spec:
  serviceName: engram-store
  selector: {matchLabels: {a: b}}
  template:
    spec:
      containers: [{name: shard, image: engram-store, imagePullPolicey: Always}]
YAML

expect "misindented field" 1 "unknown field /spec/template/spec/ports" <<'YAML'
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: engram-store-0}
spec:
  serviceName: engram-store
  selector: {matchLabels: {a: b}}
  template:
    spec:
      containers: [{name: shard, image: engram-store}]
      ports: [{name: grpc, containerPort: 7070}]
YAML

expect "ConfigMap value is a number" 1 "data/data/port must be string" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata: {name: engram-store}
data: {port: 7070}
YAML

expect "ServiceMonitor port is a number" 1 "data/spec/endpoints/0/port must be string" <<'YAML'
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: engram-store}
spec:
  selector: {}
  endpoints: [{port: 9090}]
YAML

expect "no name" 1 "metadata.name is required" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata: {labels: {a: b}}
YAML

expect "Service name not a DNS-1035 label" 1 'metadata.name "Engram-Store" is not a DNS-1035 label' <<'YAML'
apiVersion: v1
kind: Service
metadata: {name: Engram-Store}
spec: {ports: [{port: 7070}]}
YAML

expect "name too long" 1 "is not a DNS-1035 label" <<'YAML'
apiVersion: v1
kind: Service
metadata: {name: a-release-name-that-is-long-enough-to-pass-sixty-three-characters-shard-0}
spec: {ports: [{port: 7070}]}
YAML

expect "bad label value" 1 'bad value "shard 0" of label "engram.io/shard"' <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata: {name: engram-store, labels: {engram.io/shard: shard 0}}
YAML

expect "label value not a string" 1 'bad value 0 of label "engram.io/shard"' <<'YAML'
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: engram-store-0}
spec:
  serviceName: engram-store
  selector: {matchLabels: {engram.io/shard: 0}}
  template:
    spec:
      containers: [{name: shard, image: engram-store}]
YAML

expect "YAML syntax error" 1 "YAML: " <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: engram-store
 data: [
YAML

expect "duplicate key" 1 "YAML: " <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata: {name: a, name: b}
YAML

expect "not an object" 1 "a document is not an object" <<'YAML'
engram-store is installed.
YAML

expect "no objects" 1 "validate: no objects in the input" <<'YAML'
# nothing but a comment
YAML

echo "validate_self_test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
