-- Delete one batch of the received rows a filter selects (discard of a
-- row that is not finished): never a reserved row (sql/ops_eligible.sql).
-- Rows another statement holds are skipped. Returns what unparking the
-- rows behind them needs (sql/unpark_deleted.sql, run in the same
-- transaction). The caller repeats the batch until it deletes nothing.
-- Index: inbox_received_idx (available_at, id); the primary key for the
-- delete.
WITH {{template "ops_batch" .}}
DELETE FROM inbox AS i
USING batch
WHERE i.id = batch.id
RETURNING i.id, i.source, i.key, i.event_type
