{{- define "retryguard.fullname" -}}
{{- printf "%s-retryguard" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "retryguard.labels" -}}
app.kubernetes.io/name: retryguard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "retryguard.selector" -}}
app.kubernetes.io/name: retryguard
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The image, its tag defaulting to the chart's appVersion. */}}
{{- define "retryguard.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "retryguard.serviceAccountName" -}}
{{ include "retryguard.fullname" . }}
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

{{/* The retryguard-proxy sidecar's image, its tag defaulting to the chart's appVersion. */}}
{{- define "retryguard.proxyImage" -}}
{{ .Values.proxy.image.repository }}:{{ .Values.proxy.image.tag | default .Chart.AppVersion }}
{{- end -}}
