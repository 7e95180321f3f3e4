-- Make one batch of the received rows a filter selects due now (retry
-- now): rows waiting out their backoff, never a parked row nor a reserved
-- one (sql/ops_eligible.sql). Rows another statement holds are skipped.
-- The rows leave the filter's set (they are due), so the caller repeats
-- the batch until it changes nothing.
-- Index: inbox_received_idx (available_at, id), from now on; the primary
-- key for the update.
WITH {{template "ops_batch" .}}
UPDATE inbox AS i
SET available_at = now(), updated_at = now()
FROM batch
WHERE i.id = batch.id
RETURNING i.id
