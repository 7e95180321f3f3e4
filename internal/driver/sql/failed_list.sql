-- Dead or rejected rows, newest first, for `inboxd dead`. $1 status, $2
-- event type ('' = any), $3 limit.
-- Index: inbox_failed_idx (status, id), partial on dead and rejected rows,
-- read backwards.
SELECT id, status, source, event_id, event_type, attempts, updated_at, coalesce(last_error, '')
FROM inbox
WHERE status = $1 AND status IN ('dead', 'rejected') AND ($2 = '' OR event_type = $2)
ORDER BY status DESC, id DESC
LIMIT $3
