-- How many rows a retention pass would delete now (prune --dry-run): the
-- processed rows through inbox_processed_at_idx, the dead and rejected ones
-- (when @failed_ms > 0) through their partial index, without the dead rows
-- that hold their key back (as retention_failed.sql; a text/template for
-- sql/holds_key.sql, @blocking_types passed as @ordered_types too).
SELECT
    (SELECT count(*) FROM inbox
     WHERE status = 'processed'
       AND processed_at < now() - @processed_ms::bigint * interval '1 millisecond') AS processed,
    CASE WHEN @failed_ms::bigint > 0 THEN
        (SELECT count(*) FROM inbox
         WHERE status IN ('dead', 'rejected')
           AND updated_at < now() - @failed_ms::bigint * interval '1 millisecond'
           AND NOT ({{template "holds_key" "inbox"}}))
    ELSE 0 END AS failed
