-- One page of the console's list of dead or rejected rows, newest first:
-- the filter (sql/failed_filter.sql) over the ids below @upto + 1 (the
-- page's keyset: (@after, @upto] is (0, the last id shown - 1]), at most
-- @limit rows, without payloads. Never a count of the table.
-- Index: inbox_failed_idx (status, id), partial on dead and rejected rows,
-- read backwards from @upto until @limit rows match. Locks nothing.
-- @status 'dead' or 'rejected'.
SELECT id, status, source, event_id, event_type, attempts, updated_at, coalesce(last_error, '')
FROM inbox
WHERE status = @status::text AND status IN ('dead', 'rejected')
  AND {{template "failed_filter" .}}
ORDER BY status DESC, id DESC
LIMIT @limit::int
