-- Cancel one batch of the live rows (.Status, received or processing) a
-- filter selects: each goes to dead with @error ("cancelled by <operator>:
-- <reason>") as its last_error, and loses its lease (a worker holding it
-- is fenced out: its outcome is counted, not applied, and its next renewal
-- cancels the handler). Rows another statement holds are skipped (SKIP
-- LOCKED), for a later batch or run. The rows leave the filter's set, so
-- the caller repeats the batch until it changes nothing.
-- Index: as sql/ops_live_match.sql; the primary key for the update.
-- The batch: sql/ops_batch.sql.
WITH {{template "ops_batch" .}}
UPDATE inbox AS i
SET status = 'dead', last_error = @reason::text, started = false,
    lease_token = NULL, lease_expires_at = NULL, locked_by = NULL, updated_at = now()
FROM batch
WHERE i.id = batch.id
RETURNING i.id
