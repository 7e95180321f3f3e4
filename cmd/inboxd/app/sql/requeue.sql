-- Return the dead rows that match the filter to received as fresh: attempts
-- reset, due now, no lease, started false. last_error is kept as the record
-- of why the row had died. Returns the ids requeued.
-- Index: inbox_failed_idx, the partial index on (status, id) of dead and
-- rejected rows (the status IN (...) term lets the planner use it even with
-- a generic plan); with @ids, the primary key.
-- @ids bigint[] (NULL = any), @event_type and @source ('' = any),
-- @since and @until timestamptz on updated_at (NULL = unbounded).
UPDATE inbox
SET status = 'received', attempts = 0, available_at = now(), updated_at = now(),
    started = false, lease_token = NULL, lease_expires_at = NULL, locked_by = NULL
WHERE status = 'dead' AND status IN ('dead', 'rejected')
  AND (@ids::bigint[] IS NULL OR id = ANY (@ids::bigint[]))
  AND (@event_type::text = '' OR event_type = @event_type::text)
  AND (@source::text = '' OR source = @source::text)
  AND (@since::timestamptz IS NULL OR updated_at >= @since::timestamptz)
  AND (@until::timestamptz IS NULL OR updated_at < @until::timestamptz)
RETURNING id
