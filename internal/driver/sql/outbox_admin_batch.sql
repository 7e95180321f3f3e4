{{/* outbox_batch: the CTE shared by outbox_admin_requeue.sql and
outbox_admin_discard.sql, the outbox rows of status .Status (dead; pending
for `discard --pending`) that match the filter (sql/failed_filter.sql, on
destination and created_at) in one range of ids, (@after, @upto] (see
outbox_admin_range.sql).
Index: outbox_dead_idx (id), partial on dead rows, or outbox_pending_idx
(id) on pending ones, the range of it; with @ids, the primary key.
Locks the rows, at most one batch of them, FOR UPDATE SKIP LOCKED: a row
another statement holds (another requeue or discard, a relay writing a
pending row's outcome) is left as it is, for a later run. */}}
{{- define "outbox_batch" -}}
WITH batch AS (
    SELECT id
    FROM outbox
    WHERE status = '{{.Status}}'
      AND {{template "failed_filter" .}}
    FOR UPDATE SKIP LOCKED
)
{{- end -}}
