-- Delete the dead or rejected rows that match the filter in one range of
-- ids, (@after, @upto] (see failed_range.sql); returns each deleted row's
-- id, source, key and event type (what unparking the rows behind a dead one
-- needs). The filter is the one of failed_match.sql.
-- Index: inbox_failed_idx (status, id), partial on dead and rejected rows,
-- the range of it; with @ids, the primary key.
-- Locks the rows it deletes, at most one batch of them, FOR UPDATE SKIP
-- LOCKED: a row another statement holds is left, for a later run.
WITH batch AS (
    SELECT id
    FROM inbox
    WHERE status = @status::text AND status IN ('dead', 'rejected')
      AND id > @after::bigint AND id <= @upto::bigint
      AND (@ids::bigint[] IS NULL OR id = ANY (@ids::bigint[]))
      AND (@event_type::text = '' OR event_type = @event_type::text)
      AND (@source::text = '' OR source = @source::text)
      AND (@since::timestamptz IS NULL OR updated_at >= @since::timestamptz)
      AND (@until::timestamptz IS NULL OR updated_at < @until::timestamptz)
    FOR UPDATE SKIP LOCKED
)
DELETE FROM inbox AS i
USING batch
WHERE i.id = batch.id
RETURNING i.id, i.source, i.key, i.event_type
