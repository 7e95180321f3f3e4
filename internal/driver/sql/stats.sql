-- The inbox gauges, read through the partial indexes only: never a count
-- over processed rows. One index-only scan of the received index gives the
-- received count, the stale count, the oldest received row (rows waiting in
-- backoff included: it carries received_at) and the oldest due row.
-- @stale_ms: received rows older than this (by received_at) are stale.
WITH r AS (
    SELECT count(*) AS received,
           count(*) FILTER (WHERE received_at < now() - @stale_ms::bigint * interval '1 millisecond') AS stale,
           min(received_at) AS oldest_received,
           min(available_at) FILTER (WHERE available_at <= now()) AS oldest_ready
    FROM inbox
    WHERE status = 'received'
)
SELECT r.received,
       (SELECT count(*) FROM inbox WHERE status = 'processing') AS processing,
       (SELECT count(*) FROM inbox WHERE status = 'dead') AS dead,
       (SELECT count(*) FROM inbox WHERE status = 'rejected') AS rejected,
       r.stale,
       coalesce(extract(epoch FROM now() - r.oldest_received), 0)::float8 AS oldest_received_age_seconds,
       coalesce(extract(epoch FROM now() - r.oldest_ready), 0)::float8 AS oldest_ready_age_seconds
FROM r
