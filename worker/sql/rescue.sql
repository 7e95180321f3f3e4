-- Return rows whose lease expired (their worker died or hung) to received,
-- or to dead when their attempts are used up. Safe on every replica at once.
-- $1 limit, $2 max attempts.
WITH expired AS (
    SELECT id
    FROM inbox
    WHERE status = 'processing' AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE inbox AS i
SET status           = CASE WHEN i.attempts >= $2 THEN 'dead' ELSE 'received' END,
    available_at     = now(),
    last_error       = 'lease expired during attempt ' || i.attempts
                       || ' (worker ' || coalesce(i.locked_by, 'unknown') || ' lost the row)',
    lease_token      = NULL,
    lease_expires_at = NULL,
    locked_by        = NULL,
    updated_at       = now()
FROM expired
WHERE i.id = expired.id
RETURNING i.id, i.event_id, i.event_type, i.status, i.attempts
