-- Extend the leases of rows this worker still holds (queued, running, or
-- finished with the outcome unwritten). Starts are recorded elsewhere
-- (sql/mark_starts.sql); the index used is the primary key.
--
-- It never waits: a row locked by another statement (this worker's own
-- completion or transactional handler commit, typically) is skipped and
-- reported not renewed but still held, to be renewed at the next tick.
-- Waiting would queue the whole renewal behind one slow lock holder, and
-- every other lease would expire meanwhile. The locks it takes are in id
-- order (see complete.sql).
--
-- One row per element: renewed, or held (the token still matched when the
-- statement began; false means the row was fenced: rescued or claimed by
-- another worker, and its handler must stop).
-- Fenced by the lease token alone, as in complete.sql (see there why).
WITH c AS (
    SELECT *
    FROM unnest(@ids::bigint[], @tokens::bigint[]) AS c(id, lease_token)
), locked AS (
    SELECT i.id
    FROM inbox AS i
    JOIN c ON i.id = c.id AND i.lease_token = c.lease_token
    ORDER BY i.id
    FOR UPDATE OF i SKIP LOCKED
), renewed AS (
    UPDATE inbox AS i
    SET lease_expires_at = now() + @lease_ms::bigint * interval '1 millisecond',
        -- A reservation (a received row handed off at ingest, migration
        -- 013) stays out of claims' reach while it is renewed.
        available_at     = CASE WHEN i.status = 'received'
                                THEN now() + @lease_ms::bigint * interval '1 millisecond'
                                ELSE i.available_at END
    FROM c
    JOIN locked USING (id)
    WHERE i.id = c.id
    RETURNING i.id
)
SELECT c.id, r.id IS NOT NULL AS renewed, i.id IS NOT NULL AS held
FROM c
LEFT JOIN renewed AS r ON r.id = c.id
LEFT JOIN inbox AS i ON i.id = c.id AND i.lease_token = c.lease_token
