-- Delete the dead or rejected rows that match the filter in one range of
-- ids, (@after, @upto] (see failed_range.sql); returns each deleted row's
-- id, source, key and event type (what unparking the rows behind a dead one
-- needs). The filter: sql/failed_filter.sql.
-- Index: inbox_failed_idx (status, id), partial on dead and rejected rows,
-- the range of it; with @ids, the primary key.
-- Locks the rows it deletes, at most one batch of them, FOR UPDATE SKIP
-- LOCKED: a row another statement holds is left, for a later run.
WITH batch AS (
    SELECT id
    FROM inbox
    WHERE status = @status::text AND status IN ('dead', 'rejected')
      AND {{template "failed_filter" .}}
    FOR UPDATE SKIP LOCKED
)
DELETE FROM inbox AS i
USING batch
WHERE i.id = batch.id
RETURNING i.id, i.source, i.key, i.event_type
