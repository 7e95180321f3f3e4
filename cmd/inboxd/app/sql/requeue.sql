-- Return dead rows to received as fresh: attempts reset, due now. last_error
-- is kept as the record of why the row had died. $1 ids (NULL = any),
-- $2 event type ('' = any).
UPDATE inbox
SET status = 'received', attempts = 0, available_at = now(), updated_at = now(),
    lease_token = NULL, lease_expires_at = NULL, locked_by = NULL
WHERE status = 'dead'
  AND ($1::bigint[] IS NULL OR id = ANY ($1::bigint[]))
  AND ($2 = '' OR event_type = $2)
