-- Delete one batch of dead and rejected rows that went dead (or were
-- rejected) more than @retention_ms ago (updated_at), through the partial
-- index on those statuses. As retention_processed.sql, with SKIP LOCKED.
-- A text/template: a dead row that holds its key back (sql/holds_key.sql:
-- a key, on a route whose dead rows block, @blocking_types, passed as
-- @ordered_types too) is kept whatever its age: deleting it would let the
-- rows parked behind it run, and a redelivery of it run after them. Such
-- rows are read and skipped by every batch; there are as many as the
-- inboxd_ordered_blocked_keys gauge counts keys, or few more.
WITH doomed AS (
    SELECT id
    FROM inbox
    WHERE status IN ('dead', 'rejected')
      AND updated_at < now() - @retention_ms::bigint * interval '1 millisecond'
      AND NOT ({{template "holds_key" "inbox"}})
    ORDER BY status, id
    LIMIT @batch
    FOR UPDATE SKIP LOCKED
)
DELETE FROM inbox AS i
USING doomed
WHERE i.id = doomed.id
