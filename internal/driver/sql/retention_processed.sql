-- Delete one batch of processed rows whose processed_at is older than
-- @retention_ms, oldest first, through inbox_processed_at_idx.
-- SKIP LOCKED: replicas running retention at once take different rows, and
-- a row some other statement holds is left for the next pass. Processed
-- rows are never claimed or completed, so no claim, completion or renewal
-- ever waits on these locks; an ingest insert waits only if it carries the
-- very event being deleted (a redelivery older than the retention), for the
-- length of one short batch.
WITH doomed AS (
    SELECT id
    FROM inbox
    WHERE status = 'processed'
      AND processed_at < now() - @retention_ms::bigint * interval '1 millisecond'
    ORDER BY processed_at
    LIMIT @batch
    FOR UPDATE SKIP LOCKED
)
DELETE FROM inbox AS i
USING doomed
WHERE i.id = doomed.id
