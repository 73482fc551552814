{{/*
Chart name, truncated to the 63 characters a DNS label allows.
*/}}
{{- define "otelloop.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name. The release name alone when it already contains the chart name, so that
`helm install otelloop ./helm/otelloop` gives resources called "otelloop" and "otelloop-headless".
Truncated to 54 characters so that suffixes like "-headless" still fit in 63.
*/}}
{{- define "otelloop.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 54 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "otelloop.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "otelloop.selectorLabels" -}}
app.kubernetes.io/name: {{ include "otelloop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "otelloop.labels" -}}
helm.sh/chart: {{ include "otelloop.chart" . }}
{{ include "otelloop.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: otelloop
{{- end }}

{{- define "otelloop.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "otelloop.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "otelloop.headlessServiceName" -}}
{{- printf "%s-headless" (include "otelloop.fullname" .) }}
{{- end }}

{{- define "otelloop.configMapName" -}}
{{- printf "%s-config" (include "otelloop.fullname" .) }}
{{- end }}

{{- define "otelloop.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
True ("true") when the gateway runs as a StatefulSet: each replica then gets its own volume for the
persistent export queue (a SQLite file must not be shared between processes on different nodes).
*/}}
{{- define "otelloop.statefulset" -}}
{{- if and (eq .Values.mode "deployment") .Values.persistence.enabled }}true{{ end }}
{{- end }}

{{/*
Listen ports and address for the current mode. Sidecar mode uses other ports by default, because an
agent pod (or a Collector next to it) usually holds 4317/4318/9464 already.
*/}}
{{- define "otelloop.ports" -}}
{{- if eq .Values.mode "sidecar" }}
{{- toYaml .Values.sidecar.ports }}
{{- else }}
{{- toYaml .Values.ports }}
{{- end }}
{{- end }}

{{- define "otelloop.portNames" -}}
{{- if eq .Values.mode "sidecar" -}}
grpc: otelloop-grpc
http: otelloop-http
admin: otelloop-admin
{{- else -}}
grpc: otlp-grpc
http: otlp-http
admin: admin
{{- end }}
{{- end }}

{{/*
The otelloop configuration file (docs/configuration.md): .Values.config with the listen endpoints
taken from the chart's port settings (so that the container ports, probes and Services always agree
with what the process binds) and, when persistence is on, the export queue directory set to the
mounted volume.
*/}}
{{- define "otelloop.config" -}}
{{- $ports := include "otelloop.ports" . | fromYaml }}
{{- $recvAddr := "0.0.0.0" }}
{{- if eq .Values.mode "sidecar" }}
{{- $recvAddr = .Values.sidecar.listenAddress }}
{{- end }}
{{- $cfg := deepCopy (.Values.config | default dict) }}
{{- $endpoints := dict
      "receiver" (dict
        "grpc" (dict "endpoint" (printf "%s:%v" $recvAddr $ports.grpc))
        "http" (dict "endpoint" (printf "%s:%v" $recvAddr $ports.http)))
      "admin" (dict "endpoint" (printf "0.0.0.0:%v" $ports.admin)) }}
{{- $cfg = mergeOverwrite $cfg $endpoints }}
{{- if and (include "otelloop.statefulset" .) (kindIs "map" $cfg.exporter) }}
{{- $_ := set $cfg.exporter "persistent_dir" .Values.persistence.mountPath }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/*
The otelloop container, shared by the gateway workload and the sidecar snippet.
*/}}
{{- define "otelloop.container" -}}
{{- $ports := include "otelloop.ports" . | fromYaml }}
{{- $names := include "otelloop.portNames" . | fromYaml -}}
name: otelloop
image: {{ include "otelloop.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
args:
  - serve
  - --config
  - /etc/otelloop/config.yaml
  {{- with .Values.extraArgs }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- if and (eq .Values.mode "sidecar") .Values.sidecar.native }}
restartPolicy: Always
{{- end }}
ports:
  - name: {{ $names.grpc }}
    containerPort: {{ $ports.grpc }}
    protocol: TCP
  - name: {{ $names.http }}
    containerPort: {{ $ports.http }}
    protocol: TCP
  - name: {{ $names.admin }}
    containerPort: {{ $ports.admin }}
    protocol: TCP
{{- with .Values.extraEnv }}
env:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.extraEnvFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .Values.livenessProbe.enabled }}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ $names.admin }}
  {{- toYaml (omit .Values.livenessProbe "enabled") | nindent 2 }}
{{- end }}
{{- if .Values.readinessProbe.enabled }}
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ $names.admin }}
  {{- toYaml (omit .Values.readinessProbe "enabled") | nindent 2 }}
{{- end }}
{{- with .Values.securityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.resources }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumeMounts:
  - name: otelloop-config
    mountPath: /etc/otelloop
    readOnly: true
  - name: otelloop-tmp
    mountPath: /tmp
  {{- if include "otelloop.statefulset" . }}
  - name: otelloop-queue
    mountPath: {{ .Values.persistence.mountPath }}
  {{- end }}
  {{- with .Values.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/*
Pod volumes for the container above (the queue volume comes from the StatefulSet's claim template).
*/}}
{{- define "otelloop.volumes" -}}
- name: otelloop-config
  configMap:
    name: {{ include "otelloop.configMapName" . }}
- name: otelloop-tmp
  {{- if .Values.tmpVolume.sizeLimit }}
  emptyDir:
    sizeLimit: {{ .Values.tmpVolume.sizeLimit }}
  {{- else }}
  emptyDir: {}
  {{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}
