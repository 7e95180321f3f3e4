-- The inbox gauges, read through the partial indexes only: never a count
-- over processed rows. One index-only scan of the received index gives the
-- received count, the stale count, the oldest received row (rows waiting in
-- backoff included: it carries received_at) and the oldest due row.
-- Dead and rejected rows are counted up to @exact_upto + 1 (an index-only
-- scan of at most that many entries of inbox_failed_idx); past @exact_upto
-- the count is the planner's estimate (each table's rows, or each
-- partition's, by the share of the status in its statistics), never below
-- @exact_upto + 1: a count that would read every dead row of a large
-- inbox is not read (100,000 of them took 0.1 to 0.3 s).
-- @stale_ms: received rows older than this (by received_at) are stale.
WITH r AS (
    SELECT count(*) AS received,
           count(*) FILTER (WHERE received_at < now() - @stale_ms::bigint * interval '1 millisecond') AS stale,
           min(received_at) AS oldest_received,
           min(available_at) FILTER (WHERE available_at <= now()) AS oldest_ready
    FROM inbox
    WHERE status = 'received'
),
seen AS (
    SELECT (SELECT count(*) FROM (SELECT FROM inbox WHERE status = 'dead' LIMIT @exact_upto::bigint + 1) AS d) AS dead,
           (SELECT count(*) FROM (SELECT FROM inbox WHERE status = 'rejected' LIMIT @exact_upto::bigint + 1) AS j) AS rejected
),
est AS (
    -- The statistics of the inbox, or of its partitions (a partitioned
    -- table's own are not kept up to date by autovacuum).
    SELECT coalesce(sum(greatest(c.reltuples, 0) * coalesce(s.most_common_freqs[array_position(s.most_common_vals::text::text[], 'dead')], 0)), 0)::bigint AS dead,
           coalesce(sum(greatest(c.reltuples, 0) * coalesce(s.most_common_freqs[array_position(s.most_common_vals::text::text[], 'rejected')], 0)), 0)::bigint AS rejected
    FROM pg_class AS c
    JOIN pg_stats AS s ON s.schemaname = c.relnamespace::regnamespace::text AND s.tablename = c.relname
                      AND s.attname = 'status' AND NOT s.inherited
    WHERE c.relkind = 'r'
      AND (c.oid = to_regclass('inbox')
           OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass('inbox')))
)
SELECT r.received,
       (SELECT count(*) FROM inbox WHERE status = 'processing') AS processing,
       CASE WHEN seen.dead > @exact_upto::bigint THEN greatest(est.dead, seen.dead) ELSE seen.dead END AS dead,
       CASE WHEN seen.rejected > @exact_upto::bigint THEN greatest(est.rejected, seen.rejected) ELSE seen.rejected END AS rejected,
       seen.dead > @exact_upto::bigint AS dead_estimated,
       seen.rejected > @exact_upto::bigint AS rejected_estimated,
       r.stale,
       coalesce(extract(epoch FROM now() - r.oldest_received), 0)::float8 AS oldest_received_age_seconds,
       coalesce(extract(epoch FROM now() - r.oldest_ready), 0)::float8 AS oldest_ready_age_seconds
FROM r, seen, est
