-- Return the dead rows that match the filter in one range of ids,
-- (@after, @upto] (see failed_range.sql), to received as fresh: attempts
-- reset, due now, no lease, started false. last_error is kept as the record
-- of why the row had died. Returns the ids requeued.
-- Index: inbox_failed_idx, the partial index on (status, id) of dead and
-- rejected rows, the range of it (the status IN (...) term lets the planner
-- use it even with a generic plan); with @ids, the primary key.
-- Locks the rows it requeues, at most one batch of them, FOR UPDATE SKIP
-- LOCKED: a row another statement holds (retention deleting it, another
-- requeue or discard) is left as it is, for a later run.
-- The filter: sql/failed_filter.sql; the SET: sql/requeue_set.sql.
WITH batch AS (
    SELECT id
    FROM inbox
    WHERE status = 'dead' AND status IN ('dead', 'rejected')
      AND {{template "failed_filter" .}}
    FOR UPDATE SKIP LOCKED
)
UPDATE inbox AS i
SET {{template "requeue_set"}}
FROM batch
WHERE i.id = batch.id
RETURNING i.id
