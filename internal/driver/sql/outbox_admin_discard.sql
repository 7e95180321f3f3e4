-- Delete the dead outbox rows that match the filter in one range of ids,
-- (@after, @upto] (see outbox_admin_range.sql); returns the deleted ids.
-- A dead row holds no key back (the relay publishes the key's later rows),
-- so nothing is to be released with it.
-- Index and locks: sql/outbox_admin_batch.sql (outbox_dead_idx, FOR UPDATE
-- SKIP LOCKED).
{{template "outbox_dead_batch" .}}
DELETE FROM outbox AS o
USING batch
WHERE o.id = batch.id
RETURNING o.id
