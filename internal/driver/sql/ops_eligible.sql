{{/* ops_eligible: the rows an operator's action may change, by action
(.Action) and status (.Status):
- cancel: any received or processing row; a processing row (or a received
  one reserved at ingest) loses its lease, so its worker's outcome is
  fenced out and its renewal cancels the handler;
- retry_now: a received row that is not due yet and not parked behind its
  key (available_at 9999-12-31 is the parked mark: making it due would run
  it before the row it waits for), nor reserved;
- discard: a received row without a reservation (a processing row is
  cancelled first). */}}
{{- define "ops_eligible" -}}
{{- if eq .Action "retry_now" -}}
lease_token IS NULL AND available_at > now() AND available_at <> '9999-12-31 00:00:00+00'
{{- else if eq .Action "discard" -}}
lease_token IS NULL
{{- else -}}
true
{{- end -}}
{{- end -}}
