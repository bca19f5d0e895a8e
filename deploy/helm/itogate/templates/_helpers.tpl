{{/* Labels of every object: the base's (kustomization.yaml) and Helm's. */}}
{{- define "itogate.labels" -}}
app.kubernetes.io/name: itogate
app.kubernetes.io/part-of: itogate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The image: repository:tag, or repository@digest when a digest is given. */}}
{{- define "itogate.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .Values.image.digest) -}}
{{- fail (printf "image.digest %q: want sha256:<64 hex digits>" .Values.image.digest) -}}
{{- end -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end }}

{{/*
itogate.yaml: the base's configuration (files/configmap.yaml), .Values.config
merged over it, then what the Deployment's ports, mounts and Secrets rely on.
*/}}
{{- define "itogate.config" -}}
{{- $cm := .Files.Get "files/configmap.yaml" | fromYaml -}}
{{- $cfg := index $cm.data "itogate.yaml" | fromYaml -}}
{{- if hasKey $cfg "Error" -}}{{- fail (printf "files/configmap.yaml: %v" $cfg.Error) -}}{{- end -}}
{{- $cfg = mustMergeOverwrite $cfg (deepCopy .Values.config) -}}
{{- $_ := set $cfg "listen" "0.0.0.0:8443" -}}
{{- $_ = set $cfg "tls" (dict "cert_file" "/etc/itogate/tls/tls.crt" "key_file" "/etc/itogate/tls/tls.key") -}}
{{- $_ = set $cfg.ledger "driver" "postgres" -}}
{{- $_ = set $cfg.ledger "dsn" .Values.postgres.dsn -}}
{{- $_ = set $cfg.webhook "listen" "0.0.0.0:9443" -}}
{{- $_ = set $cfg.webhook "cert_file" "/etc/itogate/tls/tls.crt" -}}
{{- $_ = set $cfg.webhook "key_file" "/etc/itogate/tls/tls.key" -}}
{{- with .Values.webhook.namespaces -}}
{{- $_ = set $cfg.webhook "namespaces" . -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end }}
