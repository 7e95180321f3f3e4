-- Dead outbox rows, newest first, for `inboxd outbox dead`: the filter over
-- every id ((@after, @upto] is (0, max bigint]), at most @limit rows.
-- Index: outbox_dead_idx (id), partial on dead rows, read backwards until
-- @limit rows match. Locks nothing.
-- The filter: sql/failed_filter.sql, on destination and created_at.
SELECT id, destination, event_id, event_type, key, attempts, coalesce(last_error, ''), created_at
FROM outbox
WHERE status = 'dead'
  AND {{template "failed_filter" .}}
ORDER BY id DESC
LIMIT @limit::int
