-- Extend the leases of rows this worker still holds, and record which of
-- them start their handler now (@started: the worker starts the handler
-- only once this statement committed, so that a rescue after a crash
-- counts the attempt) and which do not run theirs (@idle: finished with
-- the outcome not yet written, or waiting unstarted; the rows that must
-- not share the crash of a row about to start: the row before a chain
-- follower, or every other row of the worker when a suspect starts, see
-- start.go): a rescue refunds their attempt. The lease renewal loop and the start marks (start.go)
-- share this statement; the index used is the primary key. @extend says
-- which leases to extend: start marks leave them as they are (the claim's
-- is fresh enough), so that a mark changes no indexed column and
-- PostgreSQL can update the row in place (a HOT update, no new index
-- entries): marks run once per started row, renewals rarely.
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
    FROM unnest(@ids::bigint[], @tokens::bigint[], @started::boolean[], @idle::boolean[], @extend::boolean[])
         AS c(id, lease_token, started, idle, extend)
), locked AS (
    SELECT i.id
    FROM inbox AS i
    JOIN c ON i.id = c.id AND i.lease_token = c.lease_token
    ORDER BY i.id
    FOR UPDATE OF i SKIP LOCKED
), renewed AS (
    UPDATE inbox AS i
    SET lease_expires_at = CASE WHEN c.extend THEN now() + @lease_ms::bigint * interval '1 millisecond'
                                ELSE i.lease_expires_at END,
        started          = CASE WHEN c.idle THEN false ELSE i.started OR c.started END
    FROM c
    JOIN locked USING (id)
    WHERE i.id = c.id
    RETURNING i.id
)
SELECT c.id, r.id IS NOT NULL AS renewed, i.id IS NOT NULL AS held
FROM c
LEFT JOIN renewed AS r ON r.id = c.id
LEFT JOIN inbox AS i ON i.id = c.id AND i.lease_token = c.lease_token
