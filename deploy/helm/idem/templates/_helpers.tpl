{{/* The release's base name. */}}
{{- define "idem.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "idem.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "idem.selectorLabels" -}}
app.kubernetes.io/name: {{ include "idem.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "idem.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "idem.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The drain's bound in seconds: timing.shutdownTimeoutSeconds, or upstream + 5 as the gateway's default. */}}
{{- define "idem.shutdownTimeout" -}}
{{- $t := int .Values.timing.shutdownTimeoutSeconds -}}
{{- if eq $t 0 -}}{{- $t = add (int .Values.timing.upstreamTimeoutSeconds) 5 -}}{{- end -}}
{{- $t -}}
{{- end -}}

{{/*
The pod's grace period: the gateway's shutdown delay, then its drain bounded by the shutdown
timeout, then the abort of calls still out; in the sidecar form the API stops after that.
*/}}
{{- define "idem.gracePeriod" -}}
{{- $g := add (int .Values.timing.shutdownDelaySeconds) (int (include "idem.shutdownTimeout" .)) (int .Values.timing.abortSeconds) -}}
{{- if .Values.sidecar.enabled -}}{{- $g = add $g (int .Values.sidecar.appStopSeconds) -}}{{- end -}}
{{- $g -}}
{{- end -}}

{{- define "idem.upstream" -}}
{{- if .Values.sidecar.enabled -}}
{{- printf "http://127.0.0.1:%d" (int .Values.sidecar.appPort) -}}
{{- else -}}
{{- required "upstream is required: the URL of the API behind the gateway (or sidecar.enabled)" .Values.upstream -}}
{{- end -}}
{{- end -}}

{{- define "idem.storeSecret" -}}
{{- if .Values.store.existingSecret -}}{{ .Values.store.existingSecret }}{{- else -}}{{ include "idem.fullname" . }}-store{{- end -}}
{{- end -}}

{{- define "idem.scopeSecret" -}}
{{- if .Values.scope.existingSecret -}}{{ .Values.scope.existingSecret }}{{- else -}}{{ include "idem.fullname" . }}-scope{{- end -}}
{{- end -}}

{{- define "idem.consoleSecret" -}}
{{- if .Values.console.existingSecret -}}{{ .Values.console.existingSecret }}{{- else -}}{{ include "idem.fullname" . }}-console{{- end -}}
{{- end -}}

{{/* The gateway's config file (gateway.Config in YAML). */}}
{{- define "idem.config" -}}
{{- $c := deepCopy (default (dict) .Values.config) -}}
{{- $_ := set $c "listen" "0.0.0.0:8080" -}}
{{- $_ = set $c "metrics_listen" (printf "0.0.0.0:%d" (int .Values.service.metricsPort)) -}}
{{- $_ = set $c "upstream" (include "idem.upstream" .) -}}
{{- if .Values.scope.none -}}
{{- $_ = set $c "scope" "none" -}}
{{- else -}}
{{- $_ = set $c "scope_header" (required "scope.header is required (or scope.none: true)" .Values.scope.header) -}}
{{- $_ = set $c "scope_secret_file" "/etc/idem/scope/scope-secret" -}}
{{- end -}}
{{- if .Values.console.enabled -}}
{{- $host := ternary "0.0.0.0" "127.0.0.1" (.Values.console.service | default false) -}}
{{- $_ = set $c "console_listen" (printf "%s:%d" $host (int .Values.console.port)) -}}
{{- $_ = set $c "console_token_file" "/etc/idem/console/console-token" -}}
{{- end -}}
{{- $_ = set $c "upstream_timeout" (printf "%ds" (int .Values.timing.upstreamTimeoutSeconds)) -}}
{{- $_ = set $c "shutdown_timeout" (printf "%ss" (include "idem.shutdownTimeout" .)) -}}
{{- $_ = set $c "shutdown_delay" (printf "%ds" (int .Values.timing.shutdownDelaySeconds)) -}}
{{- toYaml $c -}}
{{- end -}}
