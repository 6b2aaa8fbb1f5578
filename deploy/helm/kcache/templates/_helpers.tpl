{{/* The chart's name, or nameOverride. */}}
{{- define "kcache.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Object names: fullnameOverride, else the release name when it already says kcache, else
release-kcache. */}}
{{- define "kcache.fullname" -}}
{{- $name := include "kcache.name" . -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select kcache's pods. */}}
{{- define "kcache.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kcache.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{/* Labels of every object. */}}
{{- define "kcache.labels" -}}
{{ include "kcache.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "kcache.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "kcache.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "kcache.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The Secret holding kcache's serving certificate (tls.crt, tls.key). */}}
{{- define "kcache.tlsSecretName" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "kcache.fullname" .)) -}}
{{- end -}}

{{/* kcache's container port and its name: 8443 (https) with TLS, else 8080 (http). */}}
{{- define "kcache.containerPort" -}}
{{- if .Values.tls.enabled }}8443{{ else }}8080{{ end -}}
{{- end -}}

{{- define "kcache.portName" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end -}}
{{- end -}}

{{/* Port of kcache's own health and metrics endpoints (plain HTTP), named "admin". */}}
{{- define "kcache.adminPort" -}}
{{- .Values.adminPort | default 8081 -}}
{{- end -}}

{{- define "kcache.servicePort" -}}
{{- .Values.service.port | default (ternary 443 8080 .Values.tls.enabled) -}}
{{- end -}}

{{/* "true" when client certificates are verified (a client CA is configured). */}}
{{- define "kcache.clientCA" -}}
{{- if or .Values.tls.clientCA.secretName .Values.tls.clientCA.configMapName }}true{{ end -}}
{{- end -}}

{{/* Refuse values that would be unsafe or that kcache would reject. */}}
{{- define "kcache.validate" -}}
{{- if not (has .Values.auth (list "none" "delegated" "trust-local")) -}}
{{- fail (printf "auth must be none, delegated or trust-local, not %q" (toString .Values.auth)) -}}
{{- end -}}
{{- if not (has .Values.logFormat (list "text" "json")) -}}
{{- fail (printf "logFormat must be text or json, not %q" (toString .Values.logFormat)) -}}
{{- end -}}
{{- if and (not .Values.networkPolicy.enabled) (not .Values.networkPolicy.externallyEnforced) (ne .Values.auth "delegated") -}}
{{- fail "kcache does not authenticate callers with this auth mode: keep networkPolicy.enabled=true, or set networkPolicy.externallyEnforced=true if access to it is restricted by other means" -}}
{{- end -}}
{{- if and .Values.networkPolicy.enabled (not .Values.networkPolicy.clients) -}}
{{- fail "networkPolicy.clients: select the client pods (an empty rule would admit everyone)" -}}
{{- end -}}
{{- if not .Values.resources -}}
{{- fail "resources: list at least one resource to cache" -}}
{{- end -}}
{{- if and .Values.tls.clientCA.secretName .Values.tls.clientCA.configMapName -}}
{{- fail "tls.clientCA: set secretName or configMapName, not both" -}}
{{- end -}}
{{- if and (include "kcache.clientCA" .) (not .Values.tls.enabled) -}}
{{- fail "tls.clientCA needs tls.enabled=true (client certificates are part of the TLS handshake)" -}}
{{- end -}}
{{- if and .Values.tls.certManager.enabled (not .Values.tls.enabled) -}}
{{- fail "tls.certManager.enabled needs tls.enabled=true" -}}
{{- end -}}
{{- if and .Values.tls.certManager.enabled (not .Values.tls.certManager.issuerRef.name) -}}
{{- fail "tls.certManager.issuerRef.name: name the cert-manager Issuer or ClusterIssuer that signs kcache's certificate" -}}
{{- end -}}
{{- if eq (toString (include "kcache.adminPort" .)) (include "kcache.containerPort" .) -}}
{{- fail "adminPort must differ from kcache's API port (8443 with TLS, else 8080)" -}}
{{- end -}}
{{- range $key := list "listen" "adminListen" "resources" "dropManagedFields" "limits" -}}
{{- if hasKey $.Values.config $key -}}
{{- fail (printf "config.%s: set it with its own value (the chart renders it), not under config" $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
