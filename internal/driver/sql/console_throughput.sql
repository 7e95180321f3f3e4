-- Rows processed and rows that died per minute over the last hour, for the
-- console's chart: one row per minute that has any, oldest first, minute
-- as the epoch second it starts at.
-- Index: inbox_processed_at_idx (processed_at), partial on processed rows,
-- the last hour of it; inbox_failed_idx (status, id) for the dead rows
-- (updated_at is when a row died; dead rows are few and kept for
-- inspection). Locks nothing.
WITH p AS (
    SELECT date_trunc('minute', processed_at) AS minute, count(*) AS n
    FROM inbox
    WHERE status = 'processed' AND processed_at >= now() - interval '1 hour'
    GROUP BY 1
), d AS (
    SELECT date_trunc('minute', updated_at) AS minute, count(*) AS n
    FROM inbox
    WHERE status = 'dead' AND status IN ('dead', 'rejected') AND updated_at >= now() - interval '1 hour'
    GROUP BY 1
)
SELECT extract(epoch FROM coalesce(p.minute, d.minute))::bigint, coalesce(p.n, 0), coalesce(d.n, 0)
FROM p FULL JOIN d ON p.minute = d.minute
ORDER BY 1
