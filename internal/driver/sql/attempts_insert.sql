-- Record a batch of attempts in the rows' histories (migration 017) and
-- keep the last 25 of each row: an attempt already recorded (a retried
-- write) is left as it is; the entries 25 attempts or more older than the
-- one written are deleted. Run only for batches that hold a failed attempt
-- or the end of a row that failed before: the happy path never runs it.
-- Index: the primary key (row_id, attempt), for the insert and the trim.
WITH a AS (
    SELECT *
    FROM unnest(@row_ids::bigint[], @attempts::integer[], @started::timestamptz[], @finished::timestamptz[],
                @outcomes::text[], @errors::text[])
         AS a(row_id, attempt, started_at, finished_at, outcome, error)
), ins AS (
    INSERT INTO inbox_attempts (row_id, attempt, started_at, finished_at, worker, outcome, error)
    SELECT row_id, attempt, started_at, finished_at, @worker::text, outcome, error
    FROM a
    ON CONFLICT (row_id, attempt) DO NOTHING
)
DELETE FROM inbox_attempts AS h
USING a
WHERE h.row_id = a.row_id AND h.attempt <= a.attempt - 25
