{{- define "retryguard.fullname" -}}
{{- printf "%s-retryguard" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "retryguard.labels" -}}
app.kubernetes.io/name: retryguard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "retryguard.selector" -}}
app.kubernetes.io/name: retryguard
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
