#!/usr/bin/env bash
# Writes each CRD controller-gen generated (config/crd/bases, their one home)
# into the chart as a template, as cert-manager's chart carries its CRDs:
# rendered only with crds.enabled, annotated helm.sh/resource-policy: keep
# with crds.keep, labelled as the release's. As templates, `helm upgrade`
# upgrades them (Helm never touches a chart's crds/ directory after the
# install). The spec is copied as generated; hack/chartcheck holds the
# rendered CRDs to config/crd/bases.
set -euo pipefail
src=${1:-config/crd/bases}
dst=${2:-charts/retryguard/templates}
rm -f "$dst"/crd-*.yaml
for f in "$src"/*.yaml; do
	# A template action in a generated CRD would be executed by Helm.
	if grep -q '{{' "$f"; then
		echo "$f holds '{{', which Helm would read as a template action" >&2
		exit 1
	fi
	name=$(sed -n 's/^  name: //p' "$f" | head -n 1)
	if [[ -z "$name" ]]; then
		echo "$f: no metadata.name" >&2
		exit 1
	fi
	out="$dst/crd-$(basename "$f")"
	{
		echo '{{/* Generated from '"$f"' by hack/chart-crds.sh (make manifests); do not edit. */}}'
		echo '{{- if .Values.crds.enabled }}'
		echo 'apiVersion: apiextensions.k8s.io/v1'
		echo 'kind: CustomResourceDefinition'
		echo 'metadata:'
		echo "  name: $name"
		echo '  {{- if .Values.crds.keep }}'
		echo '  annotations:'
		echo '    helm.sh/resource-policy: keep'
		echo '  {{- end }}'
		echo '  labels: {{- include "retryguard.crdLabels" . | nindent 4 }}'
		sed -n '/^spec:/,$p' "$f"
		echo '{{- end }}'
	} >"$out"
done
