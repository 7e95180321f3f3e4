-- The rollup's cells of one span since @since, of @route ('' = every
-- route), oldest first: the console's charts and ops.Throughput.
-- Index: the primary key (span, at, route), the range since @since.
-- Locks nothing.
SELECT at, route, processed, retried, dead, latency_buckets
FROM route_rollup
WHERE span = @span::int AND at >= @since::timestamptz
  AND (@route::text = '' OR route = @route::text)
ORDER BY at, route
