-- The {{.Status}} outbox rows that match a requeue or discard filter in one
-- range of ids, (@after, @upto] (see outbox_admin_range.sql), oldest id
-- first, without their payloads: what --dry-run lists.
-- Index: outbox_dead_idx (id), partial on dead rows, or outbox_pending_idx
-- (id) on pending ones, the range of it; with @ids, the primary key. Locks
-- nothing.
-- The filter: sql/failed_filter.sql, on destination and created_at.
SELECT id, destination, event_id, event_type, key, attempts, coalesce(last_error, ''), created_at
FROM outbox
WHERE status = '{{.Status}}'
  AND {{template "failed_filter" .}}
ORDER BY id
