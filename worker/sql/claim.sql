-- Claim due rows for this worker in one short statement, oldest due first:
-- at most @limit rows, and no more than @max_bytes of payload and key in
-- all (the first row alone may exceed it when @first_always, so that a row
-- bigger than the budget is not stuck for ever).
--
-- The first @idle rows go straight to idle handlers: they are marked
-- started, so their attempt counts even if the worker dies at once. The
-- others wait in the worker's prefetch queue unstarted; should their lease
-- expire before their handler starts, the rescuer refunds the attempt.
--
-- Locking: candidates are locked FOR UPDATE SKIP LOCKED, so replicas never
-- wait on each other; candidates beyond the byte budget are locked but not
-- updated, and their locks end with the statement.
-- attempts stops at the schema's bound (1,000,000): counting an attempt can
-- never overflow, whatever a third party wrote in the column.
-- @skip lists rows whose data makes their claim fail and that could not be
-- dead-lettered either; @only (when not 0) claims that one row, to confirm
-- which row poisons a claim before dead-lettering it.
WITH candidates AS (
    SELECT id, available_at, octet_length(payload) + coalesce(octet_length(key), 0) AS size
    FROM inbox
    WHERE status = 'received'
      AND available_at <= now()
      AND id <> ALL (@skip::bigint[])
      AND (@only::bigint = 0 OR id = @only::bigint)
    ORDER BY available_at, id
    LIMIT @limit
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT id,
           row_number() OVER w AS rn,
           sum(size) OVER w AS through
    FROM candidates
    WINDOW w AS (ORDER BY available_at, id ROWS UNBOUNDED PRECEDING)
)
UPDATE inbox AS i
SET status           = 'processing',
    attempts         = least(i.attempts, 999999) + 1,
    started          = picked.rn <= @idle,
    lease_token      = @token,
    lease_expires_at = now() + @lease_ms::bigint * interval '1 millisecond',
    locked_by        = @worker,
    updated_at       = now()
FROM picked
WHERE i.id = picked.id
  AND (picked.through <= @max_bytes::bigint OR (picked.rn = 1 AND @first_always::boolean))
RETURNING picked.rn, i.id, i.source, i.event_id, i.event_type, i.key, i.payload, i.headers,
          i.attempts, i.received_at, i.started
