-- The next batch of a relay: pending rows of the shards it holds, in id
-- order, at most @batch rows and about @batch_bytes bytes (the first row
-- always, however large). No lock: a shard is published by the holder of
-- its lease alone, and every write back is fenced by the lease's token
-- (outbox_outcome.sql).
--
-- Rows are read by status, never "above the last id sent": a row whose
-- transaction committed after a higher id was published is pending, and is
-- read now. Rows of the destinations the relay holds back (@held: not
-- reachable) are left, and so are those waiting after a refusal
-- (available_at) and every later row of their key: the refused rows still
-- waiting are read first, through the small outbox_refused_idx (a refusal
-- is the only thing that makes a pending row wait, and it counts an
-- attempt), and a row whose key (hash, then the columns) has one with a
-- lower id is left. MATERIALIZED: the planner joins a handful of keys
-- instead of probing the table once per candidate row.
WITH waiting AS MATERIALIZED (
    SELECT key_hash, destination, key, min(id) AS first_id
    FROM outbox
    WHERE status = 'pending' AND attempts > 0 AND available_at > now()
      AND key_hash IS NOT NULL
    GROUP BY key_hash, destination, key
)
SELECT id, shard, destination, event_id, event_type, key, headers, payload, attempts, created_at
FROM (
    SELECT c.*, sum(c.size) OVER (ORDER BY c.id) - c.size AS before
    FROM (
        SELECT o.id, o.shard, o.destination, o.event_id, o.event_type, o.key, o.headers, o.payload,
               o.attempts, o.created_at,
               octet_length(o.payload) + octet_length(o.headers::text) + coalesce(octet_length(o.key), 0) AS size
        FROM outbox AS o
        WHERE o.status = 'pending'
          AND o.shard = ANY (@shards::smallint[])
          AND o.destination <> ALL (@held::text[])
          AND o.available_at <= now()
          AND NOT EXISTS (
                SELECT 1
                FROM waiting AS w
                WHERE w.key_hash = o.key_hash AND w.first_id < o.id
                  AND w.destination = o.destination AND w.key = o.key)
        ORDER BY o.id
        LIMIT @batch
    ) AS c
) AS b
WHERE b.before = 0 OR b.before + b.size <= @batch_bytes
ORDER BY id
