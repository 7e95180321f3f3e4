-- Delete one batch of dead and rejected rows that went dead (or were
-- rejected) more than @retention_ms ago (updated_at), through the partial
-- index on those statuses. As retention_processed.sql, with SKIP LOCKED.
WITH doomed AS (
    SELECT id
    FROM inbox
    WHERE status IN ('dead', 'rejected')
      AND updated_at < now() - @retention_ms::bigint * interval '1 millisecond'
    ORDER BY status, id
    LIMIT @batch
    FOR UPDATE SKIP LOCKED
)
DELETE FROM inbox AS i
USING doomed
WHERE i.id = doomed.id
