{{/* The release's resource name. */}}
{{- define "outboxd.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "outboxd.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "outboxd.labels" -}}
{{ include "outboxd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "outboxd.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "outboxd.secretName" -}}
{{- .Values.secret.existingSecret | default (include "outboxd.fullname" .) -}}
{{- end -}}

{{/*
The settings as OUTBOXD_* variables: key "publish-timeout" becomes
OUTBOXD_PUBLISH_TIMEOUT, as outboxd reads them. metrics-addr is the chart's
own (the probes use it); with pipelines, table is each pipeline's.
*/}}
{{- define "outboxd.settingsEnv" -}}
{{- range $key, $value := .Values.settings }}
{{- if and (ne $key "metrics-addr") (not (and $.Values.pipelines (eq $key "table"))) }}
OUTBOXD_{{ $key | upper | replace "-" "_" }}: {{ $value | toString | quote }}
{{- end }}
{{- end }}
OUTBOXD_METRICS_ADDR: {{ printf ":%v" .Values.metrics.port | quote }}
{{- end -}}

{{/* The pipelines file, as run --config and migrate --config read it. */}}
{{- define "outboxd.pipelinesFile" -}}
{{ dict "pipelines" .Values.pipelines | toYaml }}
{{- end -}}

{{/* Where the pods and the migrate hook find the pipelines file. */}}
{{- define "outboxd.pipelinesPath" -}}
/etc/outboxd/pipelines.yaml
{{- end -}}
