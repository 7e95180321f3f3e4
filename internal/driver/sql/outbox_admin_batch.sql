{{/* outbox_dead_batch: the CTE shared by outbox_admin_requeue.sql and
outbox_admin_discard.sql, the dead outbox rows that match the filter
(sql/failed_filter.sql, on destination and created_at) in one range of ids,
(@after, @upto] (see outbox_admin_range.sql).
Index: outbox_dead_idx (id), partial on dead rows, the range of it; with
@ids, the primary key.
Locks the rows, at most one batch of them, FOR UPDATE SKIP LOCKED: a row
another statement holds (another requeue or discard) is left as it is, for
a later run. */}}
{{- define "outbox_dead_batch" -}}
WITH batch AS (
    SELECT id
    FROM outbox
    WHERE status = 'dead'
      AND {{template "failed_filter" .}}
    FOR UPDATE SKIP LOCKED
)
{{- end -}}
