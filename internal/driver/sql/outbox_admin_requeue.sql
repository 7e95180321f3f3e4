-- Hand the dead outbox rows that match the filter in one range of ids,
-- (@after, @upto] (see outbox_admin_range.sql), back to the relay: pending,
-- attempts reset, due now. last_error is kept as the record of why the row
-- had died. Returns the ids requeued.
-- A requeued row is published after the rows of its key that were
-- published while it was dead: its key's order is broken for it, by the
-- operator's choice.
-- Index: outbox_dead_idx (id), partial on dead rows, the range of it; with
-- @ids, the primary key.
-- Locks the rows it requeues, at most one batch of them, FOR UPDATE SKIP
-- LOCKED: a row another statement holds (another requeue or discard) is
-- left as it is, for a later run. The relay writes no dead row, so no
-- lease or fencing token is involved.
-- The filter: sql/failed_filter.sql, on destination and created_at.
WITH batch AS (
    SELECT id
    FROM outbox
    WHERE status = 'dead'
      AND {{template "failed_filter" .}}
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox AS o
SET status = 'pending', attempts = 0, available_at = now()
FROM batch
WHERE o.id = batch.id
RETURNING o.id
