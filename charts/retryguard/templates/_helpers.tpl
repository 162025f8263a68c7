{{/* The chart's name, or nameOverride. */}}
{{- define "retryguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The objects' name, as Helm's own chart template makes it: fullnameOverride,
else <release>-<name>, else the release's name alone when it already holds the
name (release retryguard gives retryguard, not retryguard-retryguard).
*/}}
{{- define "retryguard.fullname" -}}
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

{{- define "retryguard.labels" -}}
app.kubernetes.io/name: {{ include "retryguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "retryguard.selector" -}}
app.kubernetes.io/name: {{ include "retryguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The image: by digest when one is set, else its tag, defaulting to the chart's appVersion. */}}
{{- define "retryguard.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The metrics Service, the job name Prometheus gives its targets. */}}
{{- define "retryguard.metricsService" -}}
{{ include "retryguard.fullname" . }}-metrics
{{- end -}}

{{/* The CRDs' labels, as cert-manager's chart labels its own (component crds). */}}
{{- define "retryguard.crdLabels" -}}
{{ include "retryguard.labels" . }}
app.kubernetes.io/component: crds
{{- end -}}

{{/*
The manager's ServiceAccount, as cert-manager's chart names its own:
serviceAccount.name, else the fullname when the chart creates it, else the
namespace's default.
*/}}
{{- define "retryguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ default (include "retryguard.fullname" .) .Values.serviceAccount.name }}
{{- else -}}
{{ default "default" .Values.serviceAccount.name }}
{{- end -}}
{{- end -}}

{{/* The pods' PriorityClass: priorityClassName, else global.priorityClassName (an umbrella chart's). */}}
{{- define "retryguard.priorityClassName" -}}
{{- default (.Values.global | default dict).priorityClassName .Values.priorityClassName -}}
{{- end -}}

{{/* The pods' pull Secrets: global.imagePullSecrets (an umbrella chart's), then imagePullSecrets, each name once. */}}
{{- define "retryguard.imagePullSecrets" -}}
{{- $names := list -}}
{{- $secrets := list -}}
{{- range concat ((.Values.global | default dict).imagePullSecrets | default list) (.Values.imagePullSecrets | default list) -}}
{{- if not (has .name $names) -}}
{{- $names = append $names .name -}}
{{- $secrets = append $secrets . -}}
{{- end -}}
{{- end -}}
{{- with $secrets }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* The user the operator's requests carry, for the ValidatingAdmissionPolicy. */}}
{{- define "retryguard.serviceAccountUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "retryguard.serviceAccountName" . }}
{{- end -}}

{{- define "retryguard.webhookService" -}}
{{ include "retryguard.fullname" . }}-webhook
{{- end -}}

{{- define "retryguard.certSecret" -}}
{{ include "retryguard.fullname" . }}-webhook-cert
{{- end -}}

{{- define "retryguard.proxyInjector" -}}
{{ include "retryguard.fullname" . }}-proxy-injector
{{- end -}}

{{/* The retryguard-proxy sidecar's image: by digest when one is set, else its tag, defaulting to the chart's appVersion. */}}
{{- define "retryguard.proxyImage" -}}
{{- if .Values.proxy.image.digest -}}
{{ .Values.proxy.image.repository }}@{{ .Values.proxy.image.digest }}
{{- else -}}
{{ .Values.proxy.image.repository }}:{{ .Values.proxy.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}
