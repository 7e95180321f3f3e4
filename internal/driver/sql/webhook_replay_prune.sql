-- Delete one batch of at most @batch of the webhook source @source's
-- replay records older than @window_ms: they no longer refuse anything.
-- Index: webhook_replays_seen_idx (source, seen_at). Locks: the rows
-- deleted; SKIP LOCKED, so replicas pruning at once take different rows
-- and never wait for a request's record.
WITH doomed AS (
    SELECT source, body_sha256
    FROM webhook_replays
    WHERE source = @source
      AND seen_at < now() - @window_ms::bigint * interval '1 millisecond'
    LIMIT @batch
    FOR UPDATE SKIP LOCKED
)
DELETE FROM webhook_replays AS r
USING doomed
WHERE r.source = doomed.source AND r.body_sha256 = doomed.body_sha256
