-- Add one replica's counts of one cell to the per-route rollup (migration
-- 018): the cell (span, at, route) is created, or has the counts and the
-- latency histogram added elementwise. The caller sends a flush's cells in
-- one batch, sorted, so two replicas' upserts lock them in one order.
-- Index: the primary key (span, at, route).
INSERT INTO route_rollup AS r (span, at, route, processed, retried, dead, latency_buckets)
VALUES (@span::int, @at::timestamptz, @route::text, @processed::bigint, @retried::bigint, @dead::bigint, @buckets::bigint[])
ON CONFLICT (span, at, route) DO UPDATE
SET processed = r.processed + excluded.processed,
    retried   = r.retried + excluded.retried,
    dead      = r.dead + excluded.dead,
    latency_buckets = ARRAY(SELECT coalesce(a, 0) + coalesce(b, 0)
                            FROM unnest(r.latency_buckets, excluded.latency_buckets) WITH ORDINALITY AS u(a, b, o)
                            ORDER BY o)
