-- Record a batch of attempts of one worker (@worker) in the rows'
-- histories (sql/attempts_record.sql: an attempt already recorded is left
-- as it is, each row keeps its last 25). For attempts written on their
-- own; the engine writes its entries with the outcomes they belong to
-- (complete.sql with .History, rescue.sql, claim.sql).
WITH a AS (
    SELECT a.*, @worker::text AS worker
    FROM unnest(@row_ids::bigint[], @attempts::integer[], @started::timestamptz[], @finished::timestamptz[],
                @outcomes::text[], @errors::text[])
         AS a(row_id, attempt, started_at, finished_at, outcome, error)
), {{template "record_attempts" "a"}}
SELECT count(*) FROM a
