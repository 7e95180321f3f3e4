-- Write what the brokers said of a batch, fenced: only rows of shards the
-- relay still holds under the tokens it claimed them with, unexpired. FOR
-- KEY SHARE on those shard rows: a relay taking a shard over (FOR UPDATE
-- SKIP LOCKED in outbox_shards_acquire.sql) skips it while this write runs,
-- so a zombie's outcome never lands on a shard another relay publishes;
-- the holder's own renewals (plain updates, FOR NO KEY UPDATE) neither wait
-- for it nor make it wait (FOR SHARE did, and a renewal and two loops'
-- writes deadlocked). Each row's outcome: published (acknowledged),
-- pending (refused: retried after @delays_ms, its key's later rows wait)
-- or dead (refused, attempts used up). Returns the rows written; the
-- others were fenced.
WITH fence AS (
    SELECT s.shard
    FROM outbox_shards AS s
    JOIN unnest(@shards::smallint[], @tokens::bigint[]) AS h(shard, token)
      ON s.shard = h.shard AND s.token = h.token
    WHERE s.owner = @relay AND s.expires_at > now()
    FOR KEY SHARE OF s
), o AS (
    SELECT *
    FROM unnest(@ids::bigint[], @outcomes::text[], @errors::text[], @delays_ms::bigint[])
         AS o(id, outcome, err, delay_ms)
)
UPDATE outbox AS x
SET status = o.outcome,
    attempts = x.attempts + 1,
    published_at = CASE WHEN o.outcome = 'published' THEN now() END,
    last_error = CASE WHEN o.outcome = 'published' THEN x.last_error ELSE o.err END,
    available_at = CASE WHEN o.outcome = 'pending'
                        THEN now() + o.delay_ms * interval '1 millisecond'
                        ELSE x.available_at END
FROM o
WHERE x.id = o.id AND x.status = 'pending'
  AND x.shard IN (SELECT shard FROM fence)
RETURNING x.id
