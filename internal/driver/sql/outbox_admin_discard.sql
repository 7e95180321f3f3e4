-- Delete the dead outbox rows that match the filter in one range of ids,
-- (@after, @upto] (see outbox_admin_range.sql); returns the deleted ids.
-- A dead row holds no key back (the relay publishes the key's later rows),
-- so nothing is to be released with it.
-- Index: outbox_dead_idx (id), partial on dead rows, the range of it; with
-- @ids, the primary key.
-- Locks the rows it deletes, at most one batch of them, FOR UPDATE SKIP
-- LOCKED: a row another statement holds is left, for a later run.
-- The filter: sql/failed_filter.sql, on destination and created_at.
WITH batch AS (
    SELECT id
    FROM outbox
    WHERE status = 'dead'
      AND {{template "failed_filter" .}}
    FOR UPDATE SKIP LOCKED
)
DELETE FROM outbox AS o
USING batch
WHERE o.id = batch.id
RETURNING o.id
