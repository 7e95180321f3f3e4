-- Take up to @want shards that no relay holds (released, or their lease
-- expired), each with a new token: whatever the previous holder writes
-- under its old token from now on is fenced. FOR UPDATE SKIP LOCKED: two
-- relays taking shards at once take different ones, and a shard being
-- renewed or released meanwhile is left alone (the recheck of the lock
-- sees the renewal). Returns the shards taken with their tokens.
WITH free AS (
    SELECT shard
    FROM outbox_shards
    WHERE owner IS NULL OR expires_at <= now()
    ORDER BY shard
    LIMIT @want
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox_shards AS s
SET owner = @relay, token = s.token + 1,
    expires_at = now() + @lease_ms::bigint * interval '1 millisecond'
FROM free
WHERE s.shard = free.shard
RETURNING s.shard, s.token
