-- `inboxd outbox stats`, per destination: pending rows, the age of the
-- oldest by created_at (rows waiting after a refusal included), dead rows.
-- Published rows are not counted: they are most of the table (see
-- outbox_admin_estimate.sql).
-- Index: outbox_pending_idx and outbox_dead_idx, the partial indexes on the
-- pending and the dead rows, each read whole (with the heap rows they
-- point at); never a row of another status. Locks nothing.
SELECT destination, sum(pending)::bigint, max(oldest_pending_age_seconds)::float8, sum(dead)::bigint
FROM (SELECT destination, count(*) AS pending,
             extract(epoch FROM now() - min(created_at)) AS oldest_pending_age_seconds, 0 AS dead
      FROM outbox
      WHERE status = 'pending'
      GROUP BY destination
      UNION ALL
      SELECT destination, 0, NULL, count(*)
      FROM outbox
      WHERE status = 'dead'
      GROUP BY destination) AS s
GROUP BY destination
ORDER BY destination
