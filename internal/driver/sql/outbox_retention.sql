-- Delete one batch of rows published more than @retention_ms ago, oldest
-- first, through outbox_published_idx. SKIP LOCKED: relays running
-- retention at once take different rows. Pending and dead rows are never
-- deleted here (dead ones wait for `inboxd outbox requeue` or `discard`).
WITH doomed AS (
    SELECT id
    FROM outbox
    WHERE status = 'published'
      AND published_at < now() - @retention_ms::bigint * interval '1 millisecond'
    ORDER BY published_at
    LIMIT @batch
    FOR UPDATE SKIP LOCKED
)
DELETE FROM outbox AS o
USING doomed
WHERE o.id = doomed.id
