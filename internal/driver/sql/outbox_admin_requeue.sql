-- Hand the dead outbox rows that match the filter in one range of ids,
-- (@after, @upto] (see outbox_admin_range.sql), back to the relay: pending,
-- attempts reset, due now. last_error is kept as the record of why the row
-- had died. Returns the ids requeued.
-- A requeued row is published after the rows of its key that were
-- published while it was dead: its key's order is broken for it, by the
-- operator's choice.
-- Index and locks: sql/outbox_admin_batch.sql (outbox_dead_idx, FOR UPDATE
-- SKIP LOCKED). The relay writes no dead row, so no lease or fencing token
-- is involved.
{{template "outbox_batch" .}}
UPDATE outbox AS o
SET status = 'pending', attempts = 0, available_at = now()
FROM batch
WHERE o.id = batch.id
RETURNING o.id
