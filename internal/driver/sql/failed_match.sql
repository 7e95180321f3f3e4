-- The dead or rejected rows that match a requeue or discard filter in one
-- range of ids, (@after, @upto] (see failed_range.sql), oldest id first,
-- without their payloads: what --dry-run lists, and the rejected rows
-- `requeue --status rejected` re-maps one by one.
-- Index: inbox_failed_idx (status, id), partial on dead and rejected rows,
-- the range of it; with @ids, the primary key. Locks nothing.
-- @status 'dead' or 'rejected'; the filter: sql/failed_filter.sql.
SELECT id, status, source, event_id, event_type, attempts, updated_at, coalesce(last_error, '')
FROM inbox
WHERE status = @status::text AND status IN ('dead', 'rejected')
  AND {{template "failed_filter" .}}
ORDER BY status, id
