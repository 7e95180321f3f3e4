{{/* The release's name for its objects: the release name when it holds the chart's, else release-chart. */}}
{{- define "inboxd.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The pods' selector. app.kubernetes.io/name stays "inboxd": it is the Prometheus job the alert rules select. */}}
{{- define "inboxd.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "inboxd.labels" -}}
{{ include "inboxd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "inboxd.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The container-level hardening both containers share (Pod Security "restricted", read-only root). */}}
{{- define "inboxd.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end -}}

{{/* Fails the rendering on values that cannot work, naming the value. */}}
{{- define "inboxd.validate" -}}
{{- $v := .Values -}}
{{- if not $v.database.existingSecret }}{{ fail "database.existingSecret: name the Secret with the database URLs" }}{{ end -}}
{{- if and $v.kafka.enabled (not $v.kafka.brokers) }}{{ fail "kafka.brokers: required with kafka.enabled" }}{{ end -}}
{{- if and $v.kafka.enabled (not $v.kafka.topics) (not $v.outbox.enabled) }}{{ fail "kafka.topics: required with kafka.enabled (unless outbox.enabled: publish only)" }}{{ end -}}
{{- if and $v.kafka.enabled $v.kafka.sasl.mechanism (not $v.kafka.sasl.existingSecret) }}{{ fail "kafka.sasl.existingSecret: required with kafka.sasl.mechanism" }}{{ end -}}
{{- if and $v.rabbitmq.enabled (not $v.rabbitmq.existingSecret) }}{{ fail "rabbitmq.existingSecret: name the Secret with the amqp:// URL" }}{{ end -}}
{{- if and $v.rabbitmq.enabled (not $v.rabbitmq.queues) (not $v.outbox.enabled) }}{{ fail "rabbitmq.queues: required with rabbitmq.enabled (unless outbox.enabled: publish only)" }}{{ end -}}
{{- if and $v.nats.enabled (not $v.nats.existingSecret) }}{{ fail "nats.existingSecret: name the Secret with the nats:// URL" }}{{ end -}}
{{- if and $v.nats.enabled (not $v.nats.streams) (not $v.outbox.enabled) }}{{ fail "nats.streams: required with nats.enabled (unless outbox.enabled: publish only)" }}{{ end -}}
{{- if and $v.webhooks.enabled (not $v.webhooks.existingSecret) }}{{ fail "webhooks.existingSecret: name the Secret with the webhook sources' secrets" }}{{ end -}}
{{- if and $v.console.enabled (not $v.console.existingTokenSecret) }}{{ fail "console.existingTokenSecret: the console is only served with a token (a Secret with key token)" }}{{ end -}}
{{- end -}}
