{{/* requeue_set: the SET that hands a dead or rejected row back to the
workers as fresh, shared by requeue.sql and requeue_rejected.sql: status
received, attempts reset, due now, no lease, started false (its handler has
not begun under a new lease). last_error is kept, the record of why the row
had failed. */}}
{{- define "requeue_set" -}}
status = 'received', attempts = 0, available_at = now(), updated_at = now(),
    started = false, lease_token = NULL, lease_expires_at = NULL, locked_by = NULL
{{- end -}}
