{{/*
The chart's name, and the full name that prefixes every object: the release
name, with the chart name appended unless it is already in it (Helm's
convention). Both fit 63 characters.
*/}}
{{- define "engram-store.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "engram-store.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "engram-store.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "engram-store.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the release's shard server pods. */}}
{{- define "engram-store.selectorLabels" -}}
app.kubernetes.io/name: {{ include "engram-store.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: shard-server
{{- end }}

{{/* The image reference. */}}
{{- define "engram-store.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The shard directory of the table version, on the data volume. */}}
{{- define "engram-store.shardDir" -}}
{{- printf "/data/v%v" .Values.table.version }}
{{- end }}

{{/* The headless Service's DNS name. */}}
{{- define "engram-store.serviceDomain" -}}
{{- printf "%s.%s.svc.%s" (include "engram-store.fullname" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{/*
The client's shard-map string: shards comma-separated, shard 0 first; the
replicas of a shard (its pods' DNS names, gRPC port) joined by '|'. What
`engramctl shardmap --from-dns <service> --shards K --replicas R` prints.
*/}}
{{- define "engram-store.shardMap" -}}
{{- $fullname := include "engram-store.fullname" . }}
{{- $domain := include "engram-store.serviceDomain" . }}
{{- $shards := list }}
{{- range $i := until (int .Values.shards) }}
{{- $replicas := list }}
{{- range $r := until (int $.Values.replicasPerShard) }}
{{- $replicas = append $replicas (printf "%s-%d-%d.%s:%v" $fullname $i $r $domain $.Values.ports.grpc) }}
{{- end }}
{{- $shards = append $shards (join "|" $replicas) }}
{{- end }}
{{- join "," $shards }}
{{- end }}

{{/* The same through the per-shard ClusterIP Services (kube-proxy picks the replica). */}}
{{- define "engram-store.serviceShardMap" -}}
{{- $fullname := include "engram-store.fullname" . }}
{{- $shards := list }}
{{- range $i := until (int .Values.shards) }}
{{- $shards = append $shards (printf "%s-shard-%d.%s.svc.%s:%v" $fullname $i $.Release.Namespace $.Values.clusterDomain $.Values.ports.grpc) }}
{{- end }}
{{- join "," $shards }}
{{- end }}

{{/*
Checks of the values that Kubernetes would only catch at install (or not
at all); a failed check stops the render with what to change.
*/}}
{{- define "engram-store.validate" -}}
{{- if lt (int .Values.shards) 1 }}
{{- fail "shards must be at least 1" }}
{{- end }}
{{- if lt (int .Values.replicasPerShard) 1 }}
{{- fail "replicasPerShard must be at least 1" }}
{{- end }}
{{- $pod := printf "%s-%d-%d" (include "engram-store.fullname" .) (sub (int .Values.shards) 1) (sub (int .Values.replicasPerShard) 1) }}
{{- if gt (len $pod) 63 }}
{{- fail (printf "pod name %s is longer than 63 characters: set fullnameOverride to a shorter name" $pod) }}
{{- end }}
{{- if lt (int .Values.ramBudgetMiB) 0 }}
{{- fail "ramBudgetMiB must not be negative" }}
{{- end }}
{{- if not (has .Values.table.source.type (list "volume" "url")) }}
{{- fail (printf "table.source.type must be volume or url, not %q" .Values.table.source.type) }}
{{- end }}
{{- if and (eq .Values.table.source.type "url") (not .Values.table.source.url) }}
{{- fail "table.source.url is required with table.source.type url" }}
{{- end }}
{{- $format := .Values.table.source.format }}
{{- $file := toString (.Values.table.source.file | default "") }}
{{- if not (has $format (list "table" "checkpoint" "gguf")) }}
{{- fail (printf "table.source.format must be table, checkpoint or gguf, not %q" $format) }}
{{- end }}
{{- if and (ne $format "table") (ne .Values.table.source.type "volume") }}
{{- fail (printf "table.source.format %s needs table.source.type volume, not %q: a checkpoint or GGUF is hundreds of GB of files, mount it read-only (table.source.volume, table.source.path)" $format .Values.table.source.type) }}
{{- end }}
{{- if and (eq $format "gguf") (not $file) }}
{{- fail "table.source.file is required with table.source.format gguf: the GGUF file's name inside table.source.path (any split of a split set)" }}
{{- end }}
{{- if contains "/" $file }}
{{- fail (printf "table.source.file must be a file name, not a path (%q): put its directory in table.source.path" $file) }}
{{- end }}
{{- if and $file (ne $format "gguf") }}
{{- fail (printf "table.source.file is read with table.source.format gguf only (format is %q): set table.source.format gguf, or unset table.source.file" $format) }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) }}
{{- fail "tls.secretName is required with tls.enabled (a kubernetes.io/tls Secret)" }}
{{- end }}
{{- if and .Values.auth.enabled (not .Values.auth.secretName) }}
{{- fail "auth.secretName is required with auth.enabled (a Secret with key token)" }}
{{- end }}
{{- if not (has .Values.antiAffinity (list "required" "preferred" "none")) }}
{{- fail (printf "antiAffinity must be required, preferred or none, not %q" .Values.antiAffinity) }}
{{- end }}
{{- end }}

{{/* Every container's securityContext: non-root, read-only root, no privileges. */}}
{{- define "engram-store.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}

{{/* The ports of every Service: the containers' names and numbers. */}}
{{- define "engram-store.servicePorts" -}}
- {name: grpc, port: {{ .Values.ports.grpc }}, targetPort: grpc, protocol: TCP}
# The port the servers advertise for the row stream (--stream-advertise-port).
- {name: stream, port: {{ .Values.ports.stream }}, targetPort: stream, protocol: TCP}
- {name: metrics, port: {{ .Values.ports.metrics }}, targetPort: metrics, protocol: TCP}
{{- end }}
