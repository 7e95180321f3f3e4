-- Dead or rejected rows, newest first. $1 status, $2 event type ('' = any),
-- $3 limit.
SELECT id, status, source, event_id, event_type, attempts, updated_at, coalesce(last_error, '')
FROM inbox
WHERE status = $1 AND ($2 = '' OR event_type = $2)
ORDER BY id DESC
LIMIT $3
