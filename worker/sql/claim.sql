-- Claim up to $1 due rows for this worker in one short statement.
-- $1 limit, $2 lease token, $3 lease in milliseconds, $4 worker id.
WITH picked AS (
    SELECT id
    FROM inbox
    WHERE status = 'received' AND available_at <= now()
    ORDER BY available_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE inbox AS i
SET status           = 'processing',
    attempts         = i.attempts + 1,
    lease_token      = $2,
    lease_expires_at = now() + $3::bigint * interval '1 millisecond',
    locked_by        = $4,
    updated_at       = now()
FROM picked
WHERE i.id = picked.id
RETURNING i.id, i.source, i.event_id, i.event_type, i.key, i.payload, i.headers, i.attempts, i.received_at
