{{- define "kvrouter.name" -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "kvrouter.labels" -}}
app.kubernetes.io/name: kvrouter
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kvrouter.selector" -}}
app.kubernetes.io/name: kvrouter
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kvrouter.clusterKeySecret" -}}
{{- .Values.secrets.clusterKey.existingSecret | default (printf "%s-cluster-key" (include "kvrouter.name" .)) -}}
{{- end -}}
{{- define "kvrouter.adminTokenSecret" -}}
{{- .Values.secrets.adminToken.existingSecret | default (printf "%s-admin-token" (include "kvrouter.name" .)) -}}
{{- end -}}
{{- define "kvrouter.natsAuthSecret" -}}
{{- .Values.secrets.natsAuth.existingSecret | default (printf "%s-nats-auth" (include "kvrouter.name" .)) -}}
{{- end -}}

{{- define "kvrouter.natsURL" -}}
{{- if .Values.nats.enabled -}}
{{- printf "nats://%s-nats:4222" (include "kvrouter.name" .) -}}
{{- else -}}
{{- required "nats.url is required when nats.enabled is false" .Values.nats.url -}}
{{- end -}}
{{- end -}}

{{- define "kvrouter.discoverURI" -}}
{{- if eq .Values.discovery.mode "k8s" -}}
{{- printf "k8s://$(POD_NAMESPACE)?selector=%s" (.Values.discovery.selector | urlquery) -}}
{{- else if eq .Values.discovery.mode "k8s-inferencepool" -}}
{{- printf "k8s-inferencepool://$(POD_NAMESPACE)/%s" .Values.discovery.inferencePool -}}
{{- else if eq .Values.discovery.mode "dns" -}}
{{- printf "dns://%s" (required "discovery.dnsName is required with discovery.mode dns" .Values.discovery.dnsName) -}}
{{- else if ne .Values.discovery.mode "none" -}}
{{- fail (printf "discovery.mode %q: want k8s, k8s-inferencepool, dns or none" .Values.discovery.mode) -}}
{{- end -}}
{{- end -}}

{{/* A generated Secret value: the live Secret's on upgrade, random on install. */}}
{{- define "kvrouter.keep" -}}
{{- $s := lookup "v1" "Secret" .ctx.Release.Namespace .name -}}
{{- if and $s (hasKey $s.data .key) -}}
{{- index $s.data .key -}}
{{- else -}}
{{- .fresh | b64enc -}}
{{- end -}}
{{- end -}}
