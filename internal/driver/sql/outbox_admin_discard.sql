-- Delete the {{.Status}} outbox rows that match the filter in one range of
-- ids, (@after, @upto] (see outbox_admin_range.sql); returns the deleted
-- ids. A dead row holds no key back (the relay publishes the key's later
-- rows), so nothing is to be released with it; a pending one deleted
-- (`discard --pending`) lets its key's later rows go at the relay's next
-- read. No lease or fencing token: a relay publishing the row at that
-- moment may still get it to the broker once; its outcome then finds no
-- row to write.
-- Index and locks: sql/outbox_admin_batch.sql (outbox_dead_idx or
-- outbox_pending_idx, FOR UPDATE SKIP LOCKED).
{{template "outbox_batch" .}}
DELETE FROM outbox AS o
USING batch
WHERE o.id = batch.id
RETURNING o.id
