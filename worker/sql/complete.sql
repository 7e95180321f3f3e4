-- Write the outcome of many rows at once. Each row is fenced by its lease
-- token: a row whose lease was lost (rescued, or claimed again) is not
-- touched, and its id is missing from the result.
-- Arrays: id, lease token, new status, retry delay in ms, error, attempts delta.
UPDATE inbox AS i
SET status           = c.status,
    attempts         = i.attempts + c.attempts_delta,
    available_at     = CASE WHEN c.status = 'received'
                            THEN now() + c.delay_ms * interval '1 millisecond'
                            ELSE i.available_at END,
    last_error       = coalesce(c.last_error, i.last_error),
    processed_at     = CASE WHEN c.status = 'processed' THEN now() ELSE NULL END,
    lease_token      = NULL,
    lease_expires_at = NULL,
    locked_by        = NULL,
    updated_at       = now()
FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::integer[])
     AS c(id, lease_token, status, delay_ms, last_error, attempts_delta)
WHERE i.id = c.id
  AND i.lease_token = c.lease_token
  AND i.status = 'processing'
RETURNING i.id
